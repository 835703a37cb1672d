//! The periodic wake-up probe as a simulated workload (document 001,
//! `ontime cyclic`, cyclictest's job): each thread wakes every interval on
//! an absolute plan, does a few microseconds of work and sleeps again.
//! Wake-up latency is how late the work started against the plan (the
//! completion minus the work minus the planned time); a wake-up that ends
//! after the next one was due is an overrun. The host's wake-up jitter
//! (`noise`) delays every wake-up; stalls come from the engine.

use crate::engine::{Item, Workload};
use crate::noise::{NoiseSampler, Quantiles};
use ontime_core::stats::LatencyHistogram;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// One tenant running the probe.
#[derive(Clone, Debug)]
pub struct CyclicTenant {
    pub threads: usize,
    pub interval_ns: u64,
    /// CPU per wake-up (reading the clock, recording the sample).
    pub cpu_ns: u64,
    /// When its plan starts.
    pub offset_ns: u64,
}

/// What a tenant measured.
#[derive(Clone, Debug, Default)]
pub struct CyclicMeasures {
    pub latency: LatencyHistogram,
    pub wakeups: u64,
    pub overruns: u64,
}

/// Every tenant's probe threads, numbered tenant by tenant.
pub struct CyclicWorkload {
    tenants: Vec<CyclicTenant>,
    /// Per thread: (tenant, its next wake-up's index).
    thread_tenant: Vec<usize>,
    next: Vec<u64>,
    /// Wake-ups due: (time with jitter, thread, index).
    due: BinaryHeap<Reverse<(u64, usize, u64)>>,
    horizon_ns: u64,
    noise: Option<NoiseSampler>,
    pub measures: Vec<CyclicMeasures>,
}

impl CyclicWorkload {
    /// Each tenant plans wake-ups for `horizon_ns` from its offset.
    pub fn new(tenants: Vec<CyclicTenant>, horizon_ns: u64) -> CyclicWorkload {
        let mut thread_tenant = Vec::new();
        for (i, t) in tenants.iter().enumerate() {
            thread_tenant.resize(thread_tenant.len() + t.threads.max(1), i);
        }
        let due = thread_tenant
            .iter()
            .enumerate()
            .map(|(th, &ti)| Reverse((tenants[ti].offset_ns + tenants[ti].interval_ns, th, 1)))
            .collect();
        CyclicWorkload {
            measures: vec![CyclicMeasures::default(); tenants.len()],
            next: vec![1; thread_tenant.len()],
            thread_tenant,
            tenants,
            due,
            horizon_ns,
            noise: None,
        }
    }

    /// Delays every wake-up by a draw from `q` (the host's jitter).
    pub fn with_host_noise(mut self, q: Quantiles, seed: u64) -> CyclicWorkload {
        self.noise = Some(NoiseSampler::new(q, seed));
        self
    }

    fn planned(&self, thread: usize, k: u64) -> u64 {
        let t = &self.tenants[self.thread_tenant[thread]];
        t.offset_ns + k * t.interval_ns
    }
}

impl Workload for CyclicWorkload {
    fn threads(&self) -> usize {
        self.thread_tenant.len()
    }

    fn next_arrival(&self) -> Option<u64> {
        self.due.peek().map(|r| r.0 .0)
    }

    fn arrive(&mut self, now: u64, push: &mut dyn FnMut(Item)) {
        while let Some(&Reverse((t, th, k))) = self.due.peek() {
            if t > now {
                break;
            }
            self.due.pop();
            let ti = self.thread_tenant[th];
            let planned = self.planned(th, k);
            if planned >= self.tenants[ti].offset_ns + self.horizon_ns {
                continue;
            }
            let interval = self.tenants[ti].interval_ns;
            push(Item {
                thread: th,
                release_ns: t,
                abs_deadline_ns: planned + interval,
                priority: 0,
                cpu_ns: self.tenants[ti].cpu_ns.max(1),
                tag: k,
                within: 0,
                woken_by: None,
            });
            self.next[th] = k + 1;
            let jitter = self.noise.as_mut().map_or(0, |n| n.next_ns());
            self.due.push(Reverse((self.planned(th, k + 1) + jitter, th, k + 1)));
        }
    }

    fn completed(&mut self, now: u64, item: &Item) {
        let th = item.thread;
        let ti = self.thread_tenant[th];
        let t = &self.tenants[ti];
        let planned = t.offset_ns + item.tag * t.interval_ns;
        let m = &mut self.measures[ti];
        m.wakeups += 1;
        m.latency
            .record(now.saturating_sub(t.cpu_ns.max(1)).saturating_sub(planned));
        if now > planned + t.interval_ns {
            m.overruns += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::run;
    use crate::sched::{Linux, LinuxClass};

    const MS: u64 = 1_000_000;

    /// Alone on a CPU every wake-up is on time; beside a fair hog under
    /// the Linux model a fair probe waits, but never longer than the hog's
    /// slice (1.5 ms with 2 CPUs' scaling): under EEVDF the lag it earns
    /// while it waits lets it preempt the hog on later wake-ups, until it
    /// has spent it. A real-time one does not wait at all.
    #[test]
    fn wakeups_wait_for_a_hogs_slice_unless_real_time() {
        let probe = CyclicTenant {
            threads: 1,
            interval_ns: MS,
            cpu_ns: 5_000,
            offset_ns: 0,
        };
        let horizon = 2_000 * MS;
        let mut alone = CyclicWorkload::new(vec![probe.clone()], horizon);
        run(
            &mut alone,
            1,
            &mut Linux::new(vec![LinuxClass::Fair { weight: 1024 }], 2),
            horizon + MS,
        );
        let m = &alone.measures[0];
        assert!(m.wakeups >= 1_990, "{}", m.wakeups);
        assert_eq!(m.latency.max(), 0);
        let fair = LinuxClass::Fair { weight: 1024 };
        for (class, least, worst) in [
            (fair, 100_000, 1_500_000u64),
            (
                LinuxClass::RealTime {
                    priority: 80,
                    slice_ns: None,
                },
                0,
                0,
            ),
        ] {
            let mut w = CyclicWorkload::new(vec![probe.clone()], horizon);
            // The hog is a second probe tenant whose one wake-up never ends.
            let mut both = WithHog {
                w: &mut w,
                started: false,
            };
            run(&mut both, 1, &mut Linux::new(vec![class, fair], 2), horizon + MS);
            let m = &w.measures[0];
            assert!(m.latency.max() <= worst, "{class:?}: {}", m.latency.max());
            assert!(m.latency.max() >= least, "{class:?}: {}", m.latency.max());
        }
    }

    /// The probe's threads plus one endless hog thread.
    struct WithHog<'a> {
        w: &'a mut CyclicWorkload,
        started: bool,
    }
    impl Workload for WithHog<'_> {
        fn threads(&self) -> usize {
            self.w.threads() + 1
        }
        fn next_arrival(&self) -> Option<u64> {
            if self.started {
                self.w.next_arrival()
            } else {
                Some(0)
            }
        }
        fn arrive(&mut self, now: u64, push: &mut dyn FnMut(Item)) {
            if !self.started {
                self.started = true;
                push(Item {
                    thread: self.w.threads(),
                    release_ns: 0,
                    abs_deadline_ns: u64::MAX,
                    priority: 0,
                    cpu_ns: u64::MAX / 4,
                    tag: u64::MAX,
                    within: 0,
                    woken_by: None,
                });
            }
            self.w.arrive(now, push);
        }
        fn completed(&mut self, now: u64, item: &Item) {
            if item.tag != u64::MAX {
                self.w.completed(now, item);
            }
        }
    }
}
