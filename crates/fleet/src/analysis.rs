//! One window file, analysed as `observe report` and `profile report`
//! would: each tenant's steal, busiest 100 ms, contention and, with stack
//! samples, its functions' corrected time and the window's pprof.

use std::path::Path;

use anyhow::Result;
use ontime_sched::analyze::AnalysisOptions;
use ontime_trace::recording::{GroupKind, Recording};

use crate::probes::ProbeLate;
use crate::wire::{ProbeLateExplained, TenantFigures, LATE_SHOWN};

/// What a window gives: its tenants' figures, the pprof (gzipped
/// profile.proto) when it has samples, and notes.
pub struct Analysed {
    pub tenants: Vec<TenantFigures>,
    pub pprof: Option<Vec<u8>>,
    pub notes: Vec<String>,
    /// The agent's probes' late wake-ups, explained.
    pub late: Vec<ProbeLateExplained>,
}

/// Functions kept per tenant and window.
pub const TOP_FUNCTIONS: usize = 5;

/// A window shorter than this says nothing of shares of its time: steal
/// and contention are n/a. A continuous recording's last window, cut at
/// its stop, can be under a millisecond, where one preempted thread is
/// "100 % steal". A tenth of the shortest agent window (1 s).
pub const MIN_SHARE_WINDOW_NS: u64 = 100_000_000;
/// Less of a tenant's vCPU time observed than this in a window (threads
/// are observed from their first event), its steal is n/a: one wake-up's
/// wait is not a share.
pub const MIN_OBSERVED_NS: u64 = 10_000_000;

pub fn analyse(file: &Path, late: &[ProbeLate]) -> Result<Analysed> {
    let rec = Recording::read(file)?;
    let late = explain_late(&rec, late);
    let mut tenants = tenant_figures(&rec);
    let mut notes = Vec::new();
    let mut pprof = None;
    if rec.meta.sample_period_ns.is_some() {
        match ontime_profile::profile(&rec) {
            Ok(p) => {
                for t in &mut tenants {
                    let mut f: Vec<(String, u64)> = p
                        .report
                        .functions
                        .iter()
                        .filter(|r| r.tenant == t.name)
                        .map(|r| (r.function.clone(), r.program.corrected_ns))
                        .filter(|(_, ns)| *ns > 0)
                        .collect();
                    f.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                    f.truncate(TOP_FUNCTIONS);
                    t.functions = f;
                    t.sample_period_ns = rec.meta.sample_period_ns;
                }
                pprof = Some(p.pprof_bytes()?);
                notes.extend(p.report.notes.iter().cloned());
            }
            Err(e) => notes.push(format!("no profile: {e:#}")),
        }
    }
    Ok(Analysed {
        tenants,
        pprof,
        notes,
        late,
    })
}

/// Each probe's late wake-ups explained on the window (one time line for
/// all of them); the worst [`LATE_SHOWN`] kept with their causes.
pub fn explain_late(rec: &Recording, late: &[ProbeLate]) -> Vec<ProbeLateExplained> {
    if late.is_empty() {
        return Vec::new();
    }
    let all: Vec<ontime_core::late::ProbeEvent> = late.iter().flat_map(|l| l.events.iter().copied()).collect();
    let tl = ontime_explain::timeline::Timeline::from_recording(rec, &ontime_explain::summary::probe_tids(&all));
    late.iter()
        .map(|l| {
            let mut x = ontime_explain::summary::explain_run_on(
                &tl,
                rec,
                &l.events,
                l.late,
                l.threshold_ns,
                "the probe's late_over",
            );
            x.worst.truncate(LATE_SHOWN);
            // The fleet's view lists events, it draws no time line.
            x.over_time.clear();
            ProbeLateExplained {
                probe: l.probe.clone(),
                window_start_ns: rec.meta.start_ns,
                complete: l.complete,
                explanation: x,
            }
        })
        .collect()
}

/// Each tenant's steal, busiest 100 ms and contention (no functions);
/// shares are n/a where the window or the tenant's observed time is too
/// short for them ([`MIN_SHARE_WINDOW_NS`], [`MIN_OBSERVED_NS`]).
pub fn tenant_figures(rec: &Recording) -> Vec<TenantFigures> {
    let a = ontime_sched::analyze(
        rec,
        &AnalysisOptions {
            windows: vec![100_000_000],
            series: false,
        },
    );
    let long_enough = a.recording.duration_ns >= MIN_SHARE_WINDOW_NS;
    // An agent with probes records every thread (to name whoever delays
    // them); its tenants are still the ones it was given, not one per
    // process of the host.
    let named = |name: &str| !rec.meta.track_all || rec.meta.groups.iter().any(|g| g.name == name);
    a.groups
        .iter()
        .filter(|g| g.kind == GroupKind::Tenant && named(&g.name))
        .map(|g| TenantFigures {
            name: g.name.clone(),
            steal_pct: (long_enough && g.time_shares.wall_ns >= MIN_OBSERVED_NS).then_some(g.time_shares.steal_pct),
            peak_100ms_cpus: g.usage.first().and_then(|u| u.max),
            contention_pct: long_enough.then_some(g.contention.any_pct),
            on_cpu_ns: g.on_cpu_ns,
            functions: Vec::new(),
            sample_period_ns: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ontime_trace::event::{kind, Event, F_PREV_RUNNABLE};
    use ontime_trace::recording::{Group, Meta, ThreadInfo};

    const START: u64 = 1_000_000_000;

    fn switch(after_ns: u64, prev: u32, next: u32, flags: u8) -> Event {
        Event {
            ts: START + after_ns,
            a: prev,
            b: next,
            c: 0,
            cpu: 0,
            kind: kind::SWITCH,
            flags,
        }
    }

    /// A window of `length_ns` of one tenant whose one thread is 10.
    fn window(events: Vec<Event>, length_ns: u64) -> Recording {
        let tenant = Group {
            name: "t0".into(),
            kind: GroupKind::Tenant,
            source: vec![],
            vcpu_names: false,
        };
        let thread = ThreadInfo {
            tid: 10,
            tgid: 10,
            comm: "poll".into(),
            group: Some(0),
        };
        Recording::of_events(
            Meta::of_this_host("bpf", START, vec![tenant]),
            [(10, thread)].into_iter().collect(),
            events,
            START + length_ns,
        )
    }

    #[test]
    fn an_almost_empty_window_has_no_steal_or_contention() {
        // A continuous recording's last window, cut 0.86 ms in: its thread
        // ran 10 us, was preempted and waited to the end (~99 % "steal").
        let cut = vec![switch(10_000, 0, 10, 0), switch(20_000, 10, 0, F_PREV_RUNNABLE)];
        let tiny = tenant_figures(&window(cut, 860_000));
        assert_eq!(tiny.len(), 1);
        assert_eq!((tiny[0].steal_pct, tiny[0].contention_pct), (None, None), "{tiny:?}");
        // A whole window where it waited 100 ms of 1 s has both.
        let waited = vec![
            switch(10_000, 0, 10, 0),
            switch(500_000_000, 10, 0, F_PREV_RUNNABLE),
            switch(600_000_000, 0, 10, 0),
        ];
        let whole = tenant_figures(&window(waited, 1_000_000_000));
        let steal = whole[0].steal_pct.expect("a whole window's steal");
        assert!((steal - 10.0).abs() < 1.0, "{whole:?}");
        assert!(
            whole[0].contention_pct.is_some_and(|c| (c - 10.0).abs() < 1.0),
            "{whole:?}"
        );
    }
}
