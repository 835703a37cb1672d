//! The late events a probe kept in its JSON result (`late_events` of a
//! crawl or cyclic result, `--explain` or `--keep-late`, and the lab's
//! tenants), read typed; and a lab run's tenants explained together on
//! the run's recording (`explain.json`).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use ontime_core::late::{LateAnswers, LateArrivals, LateSet, ProbeEvent};
use ontime_recording::recording::Recording;
use serde::{Deserialize, Serialize};

use crate::summary::RunExplanation;

/// What is read of a probe's result: its late events, and whether it is a
/// crawl's (a crawl has a send lag).
#[derive(Deserialize)]
struct Kept {
    #[serde(default)]
    late_events: Option<LateSet>,
    #[serde(default)]
    late_arrivals: Option<LateArrivals>,
    #[serde(default)]
    late_answers: Option<LateAnswers>,
    #[serde(default)]
    send_lag: Option<serde::de::IgnoredAny>,
    /// A flow receiver's (`ontime net receive`).
    #[serde(default)]
    reordered: Option<serde::de::IgnoredAny>,
}

impl Kept {
    /// What the probe's late events are: a crawl has a send lag, a flow
    /// receiver counts datagrams out of order.
    fn what(&self) -> &'static str {
        if self.send_lag.is_some() {
            "polls sent late"
        } else if self.reordered.is_some() {
            FLOW_WHAT
        } else {
            "wake-ups"
        }
    }
}

fn read_kept(path: &Path) -> Result<Kept> {
    let text = ontime_core::fsio::read_text_capped(path, "probe result", 256 << 20)?;
    serde_json::from_str(&text)
        .map_err(|e| ontime_core::bad_input(format!("{}: not a probe result: {e}", path.display())))
}

/// A probe result's late events and what they are ("polls sent late" or
/// "wake-ups"); None when it kept none.
pub fn read(path: &Path) -> Result<Option<(LateSet, &'static str)>> {
    let kept = read_kept(path)?;
    let what = kept.what();
    Ok(kept.late_events.map(|l| (l, what)))
}

/// A lab tenant's kept late events: by its probe's own lateness, and a
/// crawl's requests late at the gateway.
#[derive(Clone, Debug)]
pub struct TenantLate {
    /// t0, t1, ...
    pub name: String,
    pub late: LateSet,
    /// "polls sent late" or "wake-ups".
    pub what: &'static str,
    pub arrivals: Option<LateArrivals>,
    /// A crawl's requests whose answers came back late.
    pub answers: Option<LateAnswers>,
    /// A QEMU tenant's: its events are on the guest's clock, explained on
    /// the guest's own recording and split by the host's.
    pub guest: Option<GuestSide>,
}

impl TenantLate {
    /// Its path's nominal times: the answers' (the whole round trip),
    /// else the arrivals' (one way); None for a tenant off the path.
    pub fn path(&self) -> Option<ontime_core::late::PathNominal> {
        self.answers
            .as_ref()
            .map(|a| a.path)
            .or(self.arrivals.as_ref().map(|a| a.path()))
    }
}

/// What places a guest tenant's late events: the recording made inside
/// the guest and the guest's clock offset to the host's.
#[derive(Clone, Debug)]
pub struct GuestSide {
    pub recording: std::path::PathBuf,
    /// Host clock = guest clock + this.
    pub offset_ns: i64,
}

/// The offset a guest measured (`ontime_net::clock::ClockOffset`; only
/// the offset is read).
#[derive(Deserialize)]
struct GuestClock {
    offset_ns: i64,
}

/// Tenant `i`'s guest side in `dir`: None when it is no recorded guest
/// (no clock measurement was asked of it), else its recording and offset,
/// or why they cannot place its events.
pub fn guest_side(dir: &Path, i: usize) -> Option<std::result::Result<GuestSide, String>> {
    if !dir.join(ontime_core::names::guest_clock_probe(i)).exists() {
        return None;
    }
    let recording = dir.join(ontime_core::names::guest_sched_recording(i));
    let clock = dir.join(ontime_core::names::guest_clock_file(i));
    let placed = (|| {
        if !recording.exists() {
            return Err(format!(
                "the guest did not record itself ({}; see t{i}.guest-sched.err)",
                recording.display()
            ));
        }
        let text = ontime_core::fsio::read_text_capped(&clock, "guest clock offset", 1 << 20)
            .map_err(|e| format!("the guest's clock was not measured: {e:#}"))?;
        let c: GuestClock =
            serde_json::from_str(&text).map_err(|e| format!("{}: not a clock offset: {e}", clock.display()))?;
        Ok(GuestSide {
            recording: recording.clone(),
            offset_ns: c.offset_ns,
        })
    })();
    Some(placed)
}

/// A flow receiver's late events, as a report describes them.
pub const FLOW_WHAT: &str = "datagrams late end to end";

/// The answers a report describes its late events as.
pub const ANSWERS_WHAT: &str = "answers back late";

impl TenantLate {
    /// Every kept event, the arrivals' and answers' too (marked by their
    /// sent time).
    pub fn events(&self) -> impl Iterator<Item = ProbeEvent> + '_ {
        self.late
            .events
            .iter()
            .chain(self.arrivals.iter().flat_map(|a| a.set.events.iter()))
            .chain(self.answers.iter().flat_map(|a| a.set.events.iter()))
            .copied()
    }
}

/// A lab run's `net-explain.json`: per real-time channel with misses, the
/// relay thread's part of its worst misses, and per flow its worst late
/// datagrams, explained on the run's recording (docs/net.md, "Why a packet
/// missed").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NetExplanation {
    pub channels: Vec<RelayPartOfMisses>,
    /// Per flow with late datagrams (over its deadline, end to end: the
    /// sender's send call to the receiver's return from recv), the worst
    /// of them explained as late events of the receiving thread.
    #[serde(default)]
    pub flows: Vec<FlowLateExplanation>,
    /// What could not be explained, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlowLateExplanation {
    pub flow: String,
    pub explanation: RunExplanation,
}

/// Where a lab run keeps its [`NetExplanation`].
pub const NET_EXPLANATION: &str = "net-explain.json";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RelayPartOfMisses {
    /// The channel's id and its sending tenant.
    pub channel: u64,
    pub from: String,
    /// Each stretch a miss put on the relay is one event of its thread.
    pub explanation: RunExplanation,
}

/// A lab run's `explain.json`: each tenant's late events explained.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunExplanations {
    /// By tenant name (t0, t1, ...).
    pub tenants: BTreeMap<String, TenantExplanation>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TenantExplanation {
    /// "polls sent late" or "wake-ups".
    pub what: String,
    /// A QEMU tenant's probe, explained on its guest's recording and split
    /// by the host's: its threads are the guest's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub guest: bool,
    pub explanation: RunExplanation,
    /// A crawl's requests that arrived late at the gateway, explained
    /// with the host I/O path's part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrivals: Option<RunExplanation>,
    /// A crawl's requests whose answers came back late, explained with the
    /// path's and the gateway's parts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers: Option<RunExplanation>,
}

impl TenantExplanation {
    /// What a report leads with, and what its events are: the requests
    /// late at the gateway where a crawl kept and explained any (the
    /// gateway's receive stamp is the point's measured time, so they are
    /// what a crawl's interval error is made of), else the probe's own
    /// late events.
    pub fn primary(&self) -> (&RunExplanation, &str) {
        match &self.arrivals {
            Some(a) if a.explained > 0 => (a, "requests late at the gateway"),
            _ => (&self.explanation, &self.what),
        }
    }
}

/// The late events each tenant's `tN.json` in `dir` kept: (tenant name,
/// events, what they are), for those that kept any.
pub fn read_tenants(dir: &Path, tenants: usize) -> Result<Vec<TenantLate>> {
    let mut out = Vec::new();
    for i in 0..tenants {
        let file = dir.join(format!("t{i}.json"));
        if file.exists() {
            let kept = read_kept(&file)?;
            let what = kept.what();
            if let Some(late) = kept.late_events {
                // A guest's events are on its clock and its threads: without
                // its recording and offset they cannot be placed at all.
                let guest = match guest_side(dir, i) {
                    None => None,
                    Some(Ok(g)) => Some(g),
                    Some(Err(why)) => {
                        ontime_core::errln!("t{i}: its late events are not explained: {why}");
                        continue;
                    }
                };
                out.push(TenantLate {
                    name: format!("t{i}"),
                    late,
                    what,
                    arrivals: kept.late_arrivals,
                    answers: kept.late_answers,
                    guest,
                });
            }
        }
    }
    Ok(out)
}

/// The threads a time line of `rec` must watch to explain `tenants`: their
/// probe threads, a guest's QEMU threads (its vCPUs and their wakers),
/// and the relay's (for the arrivals).
pub fn watched(rec: &Recording, tenants: &[TenantLate]) -> Vec<u32> {
    let events: Vec<ProbeEvent> = tenants
        .iter()
        .filter(|t| t.guest.is_none())
        .flat_map(|t| t.events())
        .collect();
    let mut tids = crate::summary::probe_tids(&events);
    for t in tenants.iter().filter(|t| t.guest.is_some()) {
        tids.extend(crate::summary::guest_threads(rec, &t.name));
    }
    tids.extend(crate::summary::relay_tid(rec));
    tids
}

/// Explains every `tN.json` in `dir` that kept late events, on `rec`;
/// None when none did.
pub fn explain_tenants(rec: &Recording, dir: &Path, tenants: usize) -> Result<Option<RunExplanations>> {
    let sets = read_tenants(dir, tenants)?;
    let tl = crate::timeline::Timeline::from_recording(rec, &watched(rec, &sets));
    Ok(explain_sets_on(&tl, rec, sets))
}

pub(crate) fn explain_sets_on(
    tl: &crate::timeline::Timeline,
    rec: &Recording,
    sets: Vec<TenantLate>,
) -> Option<RunExplanations> {
    let mut out = RunExplanations::default();
    for t in sets {
        let late = &t.late;
        let explanation = match &t.guest {
            Some(g) => match Recording::read(&g.recording) {
                Ok(guest) => crate::summary::explain_guest_on(
                    tl,
                    rec,
                    &guest,
                    g.offset_ns,
                    &crate::summary::vcpu_threads(rec, &t.name),
                    late,
                ),
                Err(e) => {
                    let mut x = crate::summary::explain_run_on(
                        tl,
                        rec,
                        &[],
                        late.late,
                        late.threshold_ns,
                        &late.threshold_from,
                    );
                    x.notes.push(format!("the guest's recording cannot be read: {e:#}"));
                    x
                }
            },
            None => crate::summary::explain_run_on(
                tl,
                rec,
                &late.events,
                late.late,
                late.threshold_ns,
                &late.threshold_from,
            ),
        };
        let arrivals = t
            .arrivals
            .as_ref()
            .map(|a| crate::summary::explain_arrivals_on(tl, rec, a));
        let answers = t
            .answers
            .as_ref()
            .map(|a| crate::summary::explain_answers_on(tl, rec, a));
        out.tenants.insert(
            t.name,
            TenantExplanation {
                what: t.what.to_string(),
                guest: t.guest.is_some(),
                explanation,
                arrivals,
                answers,
            },
        );
    }
    (!out.tenants.is_empty()).then_some(out)
}

/// As [`explain_tenants`], on the stretches of windows a flight recorder
/// kept (`summary::explain_stretches`), each read once for all tenants:
/// their probes' late events, and a crawl's requests late at the gateway
/// and answers back late with the path's part.
pub fn explain_tenants_in(
    stretches: &[Vec<std::path::PathBuf>],
    dir: &Path,
    tenants: usize,
) -> Result<Option<RunExplanations>> {
    use crate::summary::StretchSet;
    let sets = read_tenants(dir, tenants)?;
    let mut all = Vec::new();
    for t in &sets {
        all.push(StretchSet::probe(&t.late));
        all.extend(t.arrivals.as_ref().map(StretchSet::arrivals));
        all.extend(t.answers.as_ref().map(StretchSet::answers));
    }
    let mut explained = crate::summary::explain_stretches(stretches, &all).into_iter();
    let mut out = RunExplanations::default();
    for t in sets {
        let mut next = || {
            explained
                .next()
                .ok_or_else(|| anyhow::anyhow!("an explanation per set"))
        };
        let explanation = next()?;
        let arrivals = t.arrivals.is_some().then(&mut next).transpose()?;
        let answers = t.answers.is_some().then(&mut next).transpose()?;
        out.tenants.insert(
            t.name,
            TenantExplanation {
                what: t.what.to_string(),
                guest: false,
                explanation,
                arrivals,
                answers,
            },
        );
    }
    Ok((!out.tenants.is_empty()).then_some(out))
}
