//! Whether the host's scheduler conserves work, counted as the streaming
//! [`crate::analyze::Analyzer`] meets the events: vCPU time queued behind a busy CPU while
//! another idled, and where the kernel queues waking threads and what
//! becomes of them ([`WakePlacement`]): onto a busy CPU while another
//! idled, preempting the running thread at once, pulled to the waker's
//! CPU, and who wakes onto whom ([`WakePreemptionByKind`]). The simulator's
//! Linux model is calibrated and checked against these counts. The state
//! machine they read (who runs where, who is queued) is
//! [`crate::analyze`]'s.
use serde::{Deserialize, Serialize};

use crate::report::share_pct;

/// Wake-ups of tracked threads by what the CPU the kernel queued them on
/// was doing: a host whose scheduler sees its idle CPUs puts a waking
/// thread on one; a guest whose idle vCPUs look busy to it (or a kernel
/// that packs work) queues it behind the running thread, which it then
/// preempts or waits for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WakePlacement {
    pub wakeups: u64,
    /// Queued on a CPU running something while another CPU idled.
    pub onto_busy_while_idle: u64,
    /// Of those: ran on that CPU within [`WAKE_AT_ONCE_NS`] with the
    /// occupant switched out still runnable (it preempted the running
    /// thread) ...
    pub preempted_at_once: u64,
    /// ... or with the occupant gone to sleep (mostly its waker, which
    /// blocks right after a synchronous wake-up: no preemption) ...
    #[serde(default)]
    pub occupant_slept_at_once: u64,
    /// ... ran on another CPU (moved), or waited longer (the occupant kept
    /// the CPU: no wake-up preemption).
    pub moved: u64,
    pub waited: u64,
    /// Wake-ups that found the CPU the thread last ran on busy while
    /// another CPU idled: the kernel's choice between the two ...
    #[serde(default)]
    pub prev_busy_while_idle: u64,
    /// ... and of those, how many it queued on that busy CPU all the same
    /// (the simulator's Linux model takes the share from calibration).
    #[serde(default)]
    pub stayed_on_busy_prev: u64,
    /// Wake-ups by a thread running on another CPU than the one the woken
    /// thread last ran on, that CPU running something too: the kernel's
    /// choice between the waker's CPU (`wake_affine`) and the last one ...
    #[serde(default)]
    pub waker_elsewhere_both_busy: u64,
    /// ... and of those, how many it queued on the waker's CPU (the share
    /// the simulator's Linux model was built against; `ontime sim
    /// validate` compares interval errors, not this share).
    #[serde(default)]
    pub pulled_to_waker: u64,
    /// Every wake-up onto a CPU running another thread, by who woke onto
    /// whom.
    #[serde(default)]
    pub by_kind: WakePreemptionByKind,
}

/// A woken thread that gets its CPU within this ran "at once".
pub const WAKE_AT_ONCE_NS: u64 = 50_000;

/// Wake-ups queued on a CPU running another thread (whether or not another
/// CPU idled), and what became of them, counted as [`WakePlacement`]
/// counts those behind a busy CPU while another idled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WakePreemption {
    pub wakeups: u64,
    pub preempted_at_once: u64,
    pub occupant_slept_at_once: u64,
    pub moved: u64,
    pub waited: u64,
}

impl WakePreemption {
    /// Preempted at once of preempted + waited, 0..100.
    pub fn preempt_pct(&self) -> f64 {
        share_pct(self.preempted_at_once, self.preempted_at_once + self.waited)
    }

    pub(crate) fn count(&mut self, o: WakeOutcome) {
        match o {
            WakeOutcome::Moved => self.moved += 1,
            WakeOutcome::PreemptedAtOnce => self.preempted_at_once += 1,
            WakeOutcome::OccupantSleptAtOnce => self.occupant_slept_at_once += 1,
            WakeOutcome::Waited => self.waited += 1,
        }
    }
}

/// What became of a thread woken onto a busy CPU, seen as it first runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WakeOutcome {
    /// It ran on another CPU.
    Moved,
    /// Within [`WAKE_AT_ONCE_NS`], the occupant switched out still runnable.
    PreemptedAtOnce,
    /// Within [`WAKE_AT_ONCE_NS`], the occupant gone to sleep.
    OccupantSleptAtOnce,
    /// Later: the occupant kept the CPU.
    Waited,
}

/// Which kind of thread woke onto which ([`WakePreemptionByKind`]'s pairs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WakePair {
    HostIoOntoTenant,
    TenantOntoTenant,
    TenantOntoHostIo,
    TenantOntoOther,
}

/// A thread woken onto a busy CPU, not yet run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PendingWake {
    pub(crate) woke_ns: u64,
    pub(crate) on: u16,
    /// Another CPU idled as it was queued ([`WakePlacement`]'s counts).
    pub(crate) while_idle: bool,
    pub(crate) pair: Option<WakePair>,
}

/// [`WakePreemption`] by which kind of thread woke onto which: the
/// kernel's wake-up preemption is not one share for all (a host I/O
/// path thread that runs tens of microseconds per wake-up preempts a
/// tenant's vCPU thread far more often than one vCPU thread preempts
/// another), and the simulator's Linux model draws one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WakePreemptionByKind {
    pub host_io_onto_tenant: WakePreemption,
    pub tenant_onto_tenant: WakePreemption,
    pub tenant_onto_host_io: WakePreemption,
    /// Onto a thread in no group (a host load, the gateway, ...).
    pub tenant_onto_other: WakePreemption,
}

impl WakePreemptionByKind {
    /// Each pair with what it is called.
    pub fn named(&self) -> [(&'static str, &WakePreemption); 4] {
        [
            ("the host I/O path onto a tenant", &self.host_io_onto_tenant),
            ("a tenant onto a tenant", &self.tenant_onto_tenant),
            ("a tenant onto the host I/O path", &self.tenant_onto_host_io),
            ("a tenant onto another thread", &self.tenant_onto_other),
        ]
    }

    pub(crate) fn slot(&mut self, pair: WakePair) -> &mut WakePreemption {
        match pair {
            WakePair::HostIoOntoTenant => &mut self.host_io_onto_tenant,
            WakePair::TenantOntoTenant => &mut self.tenant_onto_tenant,
            WakePair::TenantOntoHostIo => &mut self.tenant_onto_host_io,
            WakePair::TenantOntoOther => &mut self.tenant_onto_other,
        }
    }
}

impl WakePlacement {
    pub(crate) fn count(&mut self, o: WakeOutcome) {
        match o {
            WakeOutcome::Moved => self.moved += 1,
            WakeOutcome::PreemptedAtOnce => self.preempted_at_once += 1,
            WakeOutcome::OccupantSleptAtOnce => self.occupant_slept_at_once += 1,
            WakeOutcome::Waited => self.waited += 1,
        }
    }

    /// Share of wake-ups queued behind a busy CPU while another idled, 0..100.
    pub fn onto_busy_pct(&self) -> f64 {
        share_pct(self.onto_busy_while_idle, self.wakeups)
    }
    /// Of those, the share that preempted the running thread at once.
    pub fn preempted_pct(&self) -> f64 {
        share_pct(self.preempted_at_once, self.onto_busy_while_idle)
    }
    /// Of the woken threads queued behind a busy CPU that stayed there,
    /// the share whose occupant was preempted rather than waited for (an
    /// occupant that slept at once, a synchronous waker, decides
    /// nothing), 0..100: the kernel's wake-up preemption as measured.
    pub fn wake_preempt_pct(&self) -> f64 {
        share_pct(self.preempted_at_once, self.preempted_at_once + self.waited)
    }
    /// Of the wake-ups whose last CPU was busy while another idled, the
    /// share kept on it, 0..100.
    pub fn stayed_pct(&self) -> f64 {
        share_pct(self.stayed_on_busy_prev, self.prev_busy_while_idle)
    }
    /// Of the wake-ups by a busy CPU other than the woken thread's busy
    /// last one, the share queued on the waker's CPU, 0..100.
    pub fn pulled_pct(&self) -> f64 {
        share_pct(self.pulled_to_waker, self.waker_elsewhere_both_busy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::tests::{analyzer_on, switch};
    use crate::analyze::AnalysisOptions;
    use crate::analyze::Analyzer;
    use ontime_recording::event::{kind, Event, F_PREV_RUNNABLE};
    use ontime_recording::recording::{Group, GroupKind};

    /// Wake-ups are counted by where the kernel queued them: behind a busy
    /// CPU while another idled, then whether the thread preempted the
    /// running one at once, ran elsewhere, or waited; a wake-up onto an
    /// idle CPU only counts as a wake-up.
    #[test]
    fn wake_ups_behind_a_busy_cpu_while_another_idles_are_counted() {
        let mut a = analyzer_on(2);
        let wake = |ts, cpu| Event {
            ts,
            a: 10,
            c: cpu,
            kind: kind::WAKEUP,
            ..Default::default()
        };
        // CPU 0 runs 99 (untracked), CPU 1 idles.
        a.feed(&switch(0, 0, 0, 99, 0));
        a.feed(&switch(0, 1, 0, 0, 0));
        // Behind CPU 0, preempting 99 within 10 us, then sleeping.
        a.feed(&wake(1_000_000, 0));
        a.feed(&switch(1_010_000, 0, 99, 10, F_PREV_RUNNABLE));
        a.feed(&switch(1_100_000, 0, 10, 99, 0));
        // Behind CPU 0 again, waiting 1.4 ms for 99.
        a.feed(&wake(2_000_000, 0));
        a.feed(&switch(3_400_000, 0, 99, 10, 0));
        a.feed(&switch(3_500_000, 0, 10, 99, 0));
        // Behind CPU 0 once more, whose occupant (its waker) goes to sleep
        // at once: it got the CPU without preempting anyone.
        a.feed(&wake(3_800_000, 0));
        a.feed(&switch(3_805_000, 0, 99, 10, 0));
        a.feed(&switch(3_900_000, 0, 10, 99, 0));
        // Behind CPU 0, then pulled to CPU 1.
        a.feed(&wake(4_000_000, 0));
        a.feed(&switch(4_600_000, 1, 0, 10, 0));
        a.feed(&switch(4_700_000, 1, 10, 0, 0));
        // Onto the idle CPU 1, where it last ran.
        a.feed(&wake(5_000_000, 1));
        a.feed(&switch(5_000_000, 1, 0, 10, 0));
        // It sleeps, 98 takes CPU 1 and CPU 0 goes idle: woken, it leaves
        // its busy last CPU for the idle one.
        a.feed(&switch(5_100_000, 1, 10, 98, 0));
        a.feed(&switch(5_200_000, 0, 99, 0, 0));
        // The kernel reports the move before the wake-up.
        a.feed(&Event {
            ts: 5_300_000,
            a: 10,
            c: 0,
            kind: kind::MIGRATE,
            ..Default::default()
        });
        a.feed(&wake(5_300_000, 0));
        a.feed(&switch(5_300_000, 0, 0, 10, 0));
        assert_eq!(
            a.wake_placement,
            WakePlacement {
                wakeups: 6,
                onto_busy_while_idle: 4,
                preempted_at_once: 1,
                occupant_slept_at_once: 1,
                moved: 1,
                waited: 1,
                // The first wake-up's last CPU is not known; the second,
                // third and fourth stayed on busy CPU 0, the sixth left
                // CPU 1.
                prev_busy_while_idle: 4,
                stayed_on_busy_prev: 3,
                // Every wake-up was recorded on CPU 0: none came from a
                // busy CPU other than a busy last one.
                waker_elsewhere_both_busy: 0,
                pulled_to_waker: 0,
                // The same four, by kind: a tenant's thread onto 99,
                // which is in no group.
                by_kind: WakePreemptionByKind {
                    tenant_onto_other: WakePreemption {
                        wakeups: 4,
                        preempted_at_once: 1,
                        occupant_slept_at_once: 1,
                        moved: 1,
                        waited: 1,
                    },
                    ..Default::default()
                },
            }
        );
        assert_eq!(a.wake_placement.wake_preempt_pct(), 50.0);
    }

    /// A thread woken by another CPU's thread while its own last CPU is
    /// busy: the kernel pulls it to the waker's CPU (`wake_affine`) or
    /// leaves it where it ran; both are counted, other wake-ups are not.
    #[test]
    fn wake_ups_from_a_busy_cpu_count_whether_they_pull_to_the_waker() {
        let mut a = analyzer_on(2);
        let wake = |ts: u64, target: u32, waker_cpu: u16, waker: u32| Event {
            ts,
            a: 10,
            b: waker,
            c: target,
            cpu: waker_cpu,
            kind: kind::WAKEUP,
            ..Default::default()
        };
        // 10 runs on CPU 1 and sleeps; 98 then runs there, 99 on CPU 0.
        a.feed(&switch(0, 1, 0, 10, 0));
        a.feed(&switch(100_000, 1, 10, 98, 0));
        a.feed(&switch(100_000, 0, 0, 99, 0));
        // 99 wakes it from CPU 0 and it is pulled there.
        a.feed(&wake(1_000_000, 0, 0, 99));
        a.feed(&switch(1_010_000, 0, 99, 10, F_PREV_RUNNABLE));
        a.feed(&switch(1_100_000, 0, 10, 99, 0));
        // From CPU 1 (98) while CPU 0 is its last: left on CPU 0.
        a.feed(&wake(2_000_000, 0, 1, 98));
        a.feed(&switch(2_010_000, 0, 99, 10, F_PREV_RUNNABLE));
        a.feed(&switch(2_100_000, 0, 10, 99, 0));
        // Woken on its own last CPU (its timer): not a choice.
        a.feed(&wake(3_000_000, 0, 0, 99));
        a.feed(&switch(3_010_000, 0, 99, 10, F_PREV_RUNNABLE));
        a.feed(&switch(3_100_000, 0, 10, 99, 0));
        // From CPU 1 with CPU 1 idle: an idle waker's CPU is the kernel's
        // other rule (an idle CPU first), not counted.
        a.feed(&switch(3_500_000, 1, 98, 0, 0));
        a.feed(&wake(4_000_000, 1, 1, 0));
        let w = a.wake_placement;
        assert_eq!((w.waker_elsewhere_both_busy, w.pulled_to_waker), (2, 1), "{w:?}");
        assert_eq!(w.pulled_pct(), 50.0);
    }

    /// Wake-ups onto a busy CPU are counted by who woke onto whom, with
    /// no idle CPU needed: the host I/O path's thread preempts a tenant's
    /// vCPU thread at once, a tenant's waits for another tenant's.
    #[test]
    fn wake_up_preemption_is_counted_by_who_wakes_onto_whom() {
        let groups = [
            Group {
                name: "t".into(),
                kind: GroupKind::Tenant,
                source: vec![],
                vcpu_names: false,
            },
            Group {
                name: "host-io".into(),
                kind: GroupKind::HostIo,
                source: vec![],
                vcpu_names: false,
            },
        ];
        let mut a = Analyzer::new(
            0,
            1,
            &groups,
            &AnalysisOptions {
                windows: vec![1_000_000],
                series: false,
            },
        );
        // Tenant vCPU threads 10 and 11, the relay 20, on one CPU.
        a.set_thread(10, 0, true);
        a.set_thread(11, 0, true);
        a.set_thread(20, 1, false);
        let wake = |ts: u64, tid: u32| Event {
            ts,
            a: tid,
            c: 0,
            kind: kind::WAKEUP,
            ..Default::default()
        };
        a.feed(&switch(0, 0, 0, 10, 0));
        // The relay wakes onto 10 and preempts it within 5 us ...
        a.feed(&wake(1_000_000, 20));
        a.feed(&switch(1_005_000, 0, 10, 20, F_PREV_RUNNABLE));
        a.feed(&switch(1_050_000, 0, 20, 10, 0));
        // ... 11 wakes onto 10 and waits 2 ms for it.
        a.feed(&wake(2_000_000, 11));
        a.feed(&switch(4_000_000, 0, 10, 11, 0));
        // 10 wakes onto 11 and preempts it.
        a.feed(&wake(5_000_000, 10));
        a.feed(&switch(5_010_000, 0, 11, 10, F_PREV_RUNNABLE));
        let k = a.wake_placement.by_kind;
        let io = k.host_io_onto_tenant;
        assert_eq!(
            (io.wakeups, io.preempted_at_once, io.preempt_pct()),
            (1, 1, 100.0),
            "{k:?}"
        );
        let t = k.tenant_onto_tenant;
        assert_eq!(
            (t.wakeups, t.preempted_at_once, t.waited, t.preempt_pct()),
            (2, 1, 1, 50.0),
            "{k:?}"
        );
        assert_eq!(k.tenant_onto_host_io.wakeups + k.tenant_onto_other.wakeups, 0, "{k:?}");
        // No CPU idled: none of it is work conservation's.
        assert_eq!(a.wake_placement.onto_busy_while_idle, 0);
    }

    /// A vCPU preempted on CPU 0 waits there 2 ms; CPU 1 idles for the
    /// first of them (work not conserved), then runs another task.
    #[test]
    fn waits_behind_a_busy_cpu_while_another_idles_are_counted() {
        let mut a = analyzer_on(2);
        a.feed(&switch(1_000_000, 1, 99, 0, 0)); // CPU 1 idle
        a.feed(&switch(1_000_000, 0, 0, 10, 0)); // vCPU runs on CPU 0
        a.feed(&switch(2_000_000, 0, 10, 11, F_PREV_RUNNABLE)); // preempted: waits
        a.feed(&switch(3_000_000, 1, 0, 12, 0)); // CPU 1 busy from 3 ms
        a.feed(&switch(4_000_000, 0, 11, 10, 0)); // runs again
        a.finish(5_000_000);
        assert_eq!((a.queued_ns, a.queued_while_idle_ns), (2_000_000, 1_000_000));
    }
}
