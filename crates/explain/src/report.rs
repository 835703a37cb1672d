//! One late event as its JSON says it (docs/explain.md, "The JSON of an
//! explanation"): its causes summed by cause, detail, side and culprit,
//! largest first, unexplained always listed; culprits named from the
//! time line's thread table. This allocates (names, the list): it runs for
//! the events a result keeps, not for every event explained.

use ontime_recording::recording::GroupKind;
use serde::{Deserialize, Serialize};

use crate::cause::{Cause, CauseKind, Detail, Explanation, Irq, Side, Who};
use crate::timeline::Timeline;

/// A late event and the causes of its lateness.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateEvent {
    /// The probe thread.
    pub probe: Culprit,
    /// CLOCK_MONOTONIC, ns.
    pub planned_ns: u64,
    pub actual_ns: u64,
    /// actual - planned; the causes' `ns` add up to it.
    pub lateness_ns: u64,
    pub causes: Vec<CauseShare>,
}

/// The time one cause with one culprit accounts for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CauseShare {
    pub cause: CauseKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Detail>,
    pub side: Side,
    pub ns: u64,
    /// Waited for a CPU: of `ns`, the time another CPU the probe may run on
    /// idled.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub idle_elsewhere_ns: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub culprit: Option<Culprit>,
}

/// Who is to blame, as far as the events name it: a thread with its
/// process and group, an idle CPU, an interrupt, or only a CPU.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Culprit {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    /// Its process (thread group id).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    /// The recording's group: a tenant's name, or the host I/O path's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_kind: Option<GroupKind>,
    /// The CPU ran its idle task.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub idle: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u16>,
    /// `irq 24`, `vector 236`, `softirq NET_RX`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub irq: Option<String>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// What the causes are summed by.
type Key = (CauseKind, Option<Detail>, Side, Option<Who>, Option<u16>, Option<Irq>);

impl Explanation {
    /// This explanation as its JSON reports it, culprits named from `tl`.
    pub fn report(&self, tl: &Timeline) -> LateEvent {
        self.report_sides(tl, None)
    }

    /// As [`Explanation::report`] for a guest's probe: culprits on the
    /// guest's side named from `guest`'s thread table, the host's from
    /// `tl`'s, the probe from the guest's.
    pub fn report_sides(&self, tl: &Timeline, guest: Option<&Timeline>) -> LateEvent {
        let on = |side: Side| match (side, guest) {
            (Side::Guest, Some(g)) => g,
            _ => tl,
        };
        let mut sums: Vec<(Key, u64, u64)> = Vec::new();
        for s in &self.segments {
            let (who, cpu, irq) = s.cause.culprit(self.tid);
            let key = (s.cause.kind(), s.cause.detail(), s.side, who, cpu, irq);
            let idle = match s.cause {
                Cause::WaitedForCpu { idle_elsewhere_ns, .. } => idle_elsewhere_ns,
                _ => 0,
            };
            match sums.iter_mut().find(|(k, _, _)| *k == key) {
                Some((_, ns, i)) => {
                    *ns += s.len_ns();
                    *i += idle;
                }
                None => sums.push((key, s.len_ns(), idle)),
            }
        }
        if !sums.iter().any(|((kind, ..), _, _)| *kind == CauseKind::Unexplained) {
            // Shown even when nothing is: a reader sees it was looked for.
            sums.push(((CauseKind::Unexplained, None, tl.side(), None, None, None), 0, 0));
        }
        // Largest first; ties in the causes' order, so the output is stable.
        sums.sort_by(|(a, an, _), (b, bn, _)| bn.cmp(an).then(a.0.cmp(&b.0)));
        let causes = sums
            .into_iter()
            .map(|((cause, detail, side, who, cpu, irq), ns, idle)| CauseShare {
                cause,
                detail,
                side,
                ns,
                idle_elsewhere_ns: idle,
                culprit: culprit(on(side), who, cpu, irq),
            })
            .collect();
        LateEvent {
            probe: culprit(guest.unwrap_or(tl), Some(Who::Thread(self.tid)), None, None).unwrap_or_default(),
            planned_ns: self.planned_ns,
            actual_ns: self.actual_ns,
            lateness_ns: self.lateness_ns(),
            causes,
        }
    }
}

/// A culprit named from the time line's thread table; None when there is
/// nothing to name.
fn culprit(tl: &Timeline, who: Option<Who>, cpu: Option<u16>, irq: Option<Irq>) -> Option<Culprit> {
    let mut c = Culprit {
        cpu,
        irq: irq.map(Irq::label),
        ..Culprit::default()
    };
    match who {
        Some(Who::Thread(tid)) => {
            c.tid = Some(tid);
            if let Some(t) = tl.thread(tid) {
                c.pid = Some(t.tgid).filter(|&p| p != 0);
                c.comm = Some(t.comm.clone()).filter(|s| !s.is_empty());
                if let Some(g) = t.group.and_then(|g| tl.group(g)) {
                    c.group = Some(g.name.clone());
                    c.group_kind = Some(g.kind);
                }
            }
        }
        Some(Who::Idle) => c.idle = true,
        Some(Who::Unknown) | None => {}
    }
    (c != Culprit::default()).then_some(c)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use ontime_recording::event::{kind, Event};
    use ontime_recording::recording::{Group, ThreadInfo};

    use super::*;
    use crate::attribute::explain;
    use crate::timeline::TimelineBuilder;

    const MS: u64 = 1_000_000;

    #[test]
    fn culprits_are_named_and_unexplained_is_always_listed() {
        let (probe, hog) = (100, 4242);
        let threads = HashMap::from([
            (
                probe,
                ThreadInfo {
                    tid: probe,
                    tgid: 99,
                    comm: "crawl-vcpu0".into(),
                    group: Some(0),
                },
            ),
            (
                hog,
                ThreadInfo {
                    tid: hog,
                    tgid: hog,
                    comm: "stress-ng".into(),
                    group: None,
                },
            ),
        ]);
        let groups = vec![Group {
            name: "t0".into(),
            kind: GroupKind::Tenant,
            source: vec![],
            vcpu_names: true,
        }];
        let ev = |ts, a, b, c, flags, k| Event {
            ts,
            a,
            b,
            c,
            cpu: 1,
            kind: k,
            flags,
        };
        let mut b = TimelineBuilder::new(0, 2).names(threads, groups);
        b.watch(probe);
        for e in [
            ev(0, 0, probe, 0, 0, kind::SWITCH),
            ev(MS, probe, 0, 1, 0, kind::SWITCH),
            ev(2 * MS, 0, hog, 0, 0, kind::SWITCH),
            ev(10 * MS, probe, 0, 1, 0, kind::WAKEUP),
            ev(
                34 * MS,
                hog,
                probe,
                0,
                ontime_recording::event::F_PREV_RUNNABLE,
                kind::SWITCH,
            ),
        ] {
            b.feed(&e);
        }
        let tl = b.finish(40 * MS);
        let p = tl.probe(probe).unwrap();
        let late = explain(&tl, &p, 10 * MS, 37 * MS).report(&tl);
        assert_eq!(late.lateness_ns, 27 * MS);
        assert_eq!(late.causes.iter().map(|c| c.ns).sum::<u64>(), late.lateness_ns);
        assert_eq!(late.probe.comm.as_deref(), Some("crawl-vcpu0"));
        assert_eq!(late.probe.group.as_deref(), Some("t0"));
        let first = &late.causes[0];
        assert_eq!(first.cause, CauseKind::WaitedForCpu);
        assert_eq!(first.ns, 24 * MS);
        let who = first.culprit.as_ref().unwrap();
        assert_eq!(
            (who.tid, who.pid, who.comm.as_deref(), who.cpu),
            (Some(hog), Some(hog), Some("stress-ng"), Some(1))
        );
        assert_eq!(late.causes[1].cause, CauseKind::OwnWork);
        assert_eq!(late.causes[1].ns, 3 * MS);
        let last = late.causes.last().unwrap();
        assert_eq!((last.cause, last.ns), (CauseKind::Unexplained, 0));

        let json = serde_json::to_string(&late).unwrap();
        assert!(json.contains(r#""cause":"waited_for_cpu""#), "{json}");
        let back: LateEvent = serde_json::from_str(&json).unwrap();
        assert_eq!(back, late);
    }
}
