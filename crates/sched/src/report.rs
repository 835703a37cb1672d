//! The figures the analysis reports for each group and its threads: on-CPU
//! time, run delay, how the vCPUs' time splits into run, idle and steal,
//! contention episodes and who ran while the vCPUs waited. The streaming
//! [`Analyzer`](crate::analyze::Analyzer) fills them in; every
//! [`Analysis`](crate::analysis::Analysis) carries them as JSON.
use serde::{Deserialize, Serialize};

use ontime_recording::recording::GroupKind;

use crate::durations::Durations;
use crate::window::WindowUsage;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Episodes {
    pub count: u64,
    pub total_ns: u64,
    pub p50_ns: Option<u64>,
    pub p99_ns: Option<u64>,
    pub max_ns: Option<u64>,
}

impl Episodes {
    pub(crate) fn of(h: &Durations) -> Episodes {
        Episodes {
            count: h.len(),
            total_ns: h.total(),
            p50_ns: h.percentile(50.0),
            p99_ns: h.percentile(99.0),
            max_ns: (!h.is_empty()).then(|| h.max()),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Contention {
    /// Any of the tenant's vCPUs runnable but not running.
    pub any: Episodes,
    /// Some vCPUs waiting, none running, the rest idle.
    pub partial: Episodes,
    /// Every vCPU waiting.
    pub full: Episodes,
    /// Time some vCPUs ran while others waited.
    pub hazard_ns: u64,
    /// Time with any vCPU waiting, an episode still open included.
    #[serde(default)]
    pub any_ns: u64,
    /// `any_ns` as a share of the stretch reported, %.
    pub any_pct: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Preemptor {
    pub name: String,
    /// "tenant", "host-io", "thread" or "idle".
    pub kind: String,
    /// vCPU-waiting time spent behind it, ns.
    pub ns: u64,
    pub share: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ThreadReport {
    pub tid: u32,
    pub name: String,
    pub vcpu: bool,
    pub on_cpu_ns: u64,
    pub run_delay_ns: u64,
    /// Asleep by its own choice (waiting for work) ...
    #[serde(default)]
    pub sleep_ns: u64,
    /// ... and blocked in the kernel (uninterruptible: typically I/O).
    #[serde(default)]
    pub blocked_ns: u64,
    pub waits: u64,
    /// Times it ran on another CPU than the one it last ran on (counted at
    /// its switch-ins: the kernel's `nr_migrations` also counts a thread
    /// moved while it waited and moved back before it ran).
    #[serde(default)]
    pub migrations: u64,
    pub wait_p99_ns: Option<u64>,
    pub wait_max_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub usage: Vec<WindowUsage>,
}

/// Where a tenant's vCPUs spent the time they were observed, as document
/// 002 (and mpstat's %steal) counts it: running, idle (halted: sleeping or
/// blocked by their own doing) or stolen (runnable, not running). The three
/// sum to 100 % of the vCPUs' observed wall time.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct TimeShares {
    /// Observed wall time summed over the vCPUs (each from its first event).
    pub wall_ns: u64,
    pub run_pct: f64,
    pub idle_pct: f64,
    pub steal_pct: f64,
}

impl TimeShares {
    /// Over the vCPU threads among `threads`, or all of them when none is
    /// marked a vCPU.
    pub fn of_vcpus(threads: &[ThreadReport]) -> TimeShares {
        let any_vcpu = threads.iter().any(|t| t.vcpu);
        let (mut run, mut idle, mut steal) = (0u64, 0u64, 0u64);
        for t in threads.iter().filter(|t| t.vcpu || !any_vcpu) {
            run += t.on_cpu_ns;
            idle += t.sleep_ns + t.blocked_ns;
            steal += t.run_delay_ns;
        }
        let wall = run + idle + steal;
        let pct = |v: u64| share_pct(v, wall);
        TimeShares {
            wall_ns: wall,
            run_pct: pct(run),
            idle_pct: pct(idle),
            steal_pct: pct(steal),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GroupReport {
    pub name: String,
    pub kind: GroupKind,
    pub thread_count: u32,
    pub vcpus: u32,
    pub on_cpu_ns: u64,
    /// Runnable but not running (steal), summed over its threads.
    pub run_delay_ns: u64,
    /// Run delay / (on-CPU + run delay), %: how much of what the tenant
    /// asked for it had to wait for ("wait share of demand"). Not steal:
    /// a tenant that barely runs can wait for most of it.
    #[serde(default, alias = "steal_pct")]
    pub wait_share_pct: f64,
    /// Its vCPUs' time split as document 002 and mpstat split it.
    #[serde(default)]
    pub time_shares: TimeShares,
    pub usage: Vec<WindowUsage>,
    pub contention: Contention,
    pub preemptors: Vec<Preemptor>,
    pub threads: Vec<ThreadReport>,
}

/// `part` as a percentage of `whole` (0 when there is no whole).
pub(crate) fn share_pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

#[cfg(test)]
mod tests {
    use crate::analyze::tests::{analyzer, switch};
    use ontime_recording::event::{kind, Event, F_PREV_RUNNABLE};

    /// Steal as document 002 counts it: a vCPU's observed time is run,
    /// idle (asleep) or steal (runnable, not running), and the three shares
    /// add up to all of it. The older ratio, run delay / (run + run delay),
    /// is kept under its own name.
    #[test]
    fn run_idle_and_steal_add_up_to_the_observed_wall_time() {
        let mut a = analyzer();
        let wake = |ts| Event {
            ts,
            a: 10,
            kind: kind::WAKEUP,
            ..Default::default()
        };
        a.feed(&switch(1_000_000, 0, 0, 10, 0)); // runs 1 ms
        a.feed(&Event {
            c: 0x01,
            ..switch(2_000_000, 0, 10, 0, 0)
        }); // asleep 3 ms
        a.feed(&wake(5_000_000));
        a.feed(&switch(5_000_000, 0, 0, 11, 0)); // waits 2 ms behind 11
        a.feed(&switch(7_000_000, 0, 11, 10, 0)); // runs 2 ms
        a.feed(&switch(9_000_000, 0, 10, 11, F_PREV_RUNNABLE)); // preempted: waits 1 ms
        a.feed(&switch(10_000_000, 0, 11, 10, 0)); // runs, still at the end
        a.finish(12_000_000);
        let g = &a.report(&|t| t.to_string())[0];
        let th = &g.threads[0];
        assert_eq!(
            (th.on_cpu_ns, th.sleep_ns, th.run_delay_ns),
            (5_000_000, 3_000_000, 3_000_000)
        );
        let s = g.time_shares;
        assert_eq!(s.wall_ns, 11_000_000, "observed from its first event to the end");
        assert!((s.run_pct + s.idle_pct + s.steal_pct - 100.0).abs() < 1e-9);
        assert!((s.steal_pct - 300.0 / 11.0).abs() < 1e-9, "{s:?}");
        assert!((s.idle_pct - 300.0 / 11.0).abs() < 1e-9, "{s:?}");
        assert!(
            (g.wait_share_pct - 300.0 / 8.0).abs() < 1e-9,
            "3 ms waited of 8 ms wanted"
        );
    }
}
