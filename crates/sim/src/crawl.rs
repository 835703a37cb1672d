//! The crawler as a simulated workload (document 000): per tenant, streams
//! of polls on a fixed plan spread over the period, dealt round-robin to
//! the tenant's vCPU threads as `ontime crawl` deals them. Each poll is two
//! items on its thread: the send at the planned time (a small CPU cost),
//! and, one WAN round trip after the send completed, the answer's
//! processing (CPU from the same work model as `ontime crawl
//! --work-per-poll/--work-tail`). The gateway's receive time is the send's
//! completion plus the one-way delay; interval error is scored from it with
//! the crawler's own tracker, send lag from the planned time.
//!
//! With a host I/O path (`HostIo`), every request and every answer also
//! crosses one more thread, the host's I/O path (Dom0 / vhost / the lab's
//! relay), at a CPU cost per packet, competing for the same CPUs: a starved
//! I/O path delays every tenant (document 000, finding 4).
//!
//! Leaves out (for now): connection pools, timeouts and missed polls.

use crate::engine::{Item, Workload};
use ontime_core::interval::IntervalTracker;
use ontime_core::stats::LatencyHistogram;
use ontime_core::work::{WorkModel, WorkSampler};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// One crawler tenant.
#[derive(Clone, Debug)]
pub struct CrawlTenant {
    pub vcpus: usize,
    /// Polls per second (streams = rate x period).
    pub rate: f64,
    pub period_ns: u64,
    pub work: WorkModel,
    /// CPU to build and write a request.
    pub send_cost_ns: u64,
    /// One way between the crawler and the gateway.
    pub one_way_ns: u64,
}

/// The host's I/O path: one thread that forwards every packet.
#[derive(Clone, Copy, Debug)]
pub struct HostIo {
    pub cost_per_packet_ns: u64,
}

/// What a tenant measured.
#[derive(Clone, Debug, Default)]
pub struct CrawlMeasures {
    pub interval_error: LatencyHistogram,
    pub send_lag: LatencyHistogram,
    pub polls: u64,
}

struct Stream {
    tenant: usize,
    thread: usize,
    phase_ns: u64,
    period_ns: u64,
    next: u64,
    tracker: IntervalTracker,
}

/// Every tenant's crawler on one host: threads are numbered tenant by
/// tenant (tenant 0's vCPUs first).
pub struct CrawlWorkload {
    tenants: Vec<CrawlTenant>,
    streams: Vec<Stream>,
    samplers: Vec<WorkSampler>,
    /// Next planned send per stream: (time, stream).
    sends: BinaryHeap<Reverse<(u64, usize)>>,
    /// Answers on their way back: (arrival, stream, poll index).
    answers: BinaryHeap<Reverse<(u64, usize, u64)>>,
    pub measures: Vec<CrawlMeasures>,
    threads: usize,
    horizon_ns: u64,
    io: Option<HostIo>,
    /// Packets waiting for the I/O thread: (arrival, tag).
    io_queue: BinaryHeap<Reverse<(u64, u64)>>,
}

/// What an item is, from its tag's low two bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Send = 0,
    Answer = 1,
    /// The I/O path forwards a request ...
    IoRequest = 2,
    /// ... or an answer.
    IoAnswer = 3,
}

/// Tags: the low two bits are the kind; then the poll index (38 bits);
/// the stream in the high 24 bits.
fn tag(stream: usize, poll: u64, kind: Kind) -> u64 {
    ((stream as u64) << 40) | ((poll & 0x3f_ffff_ffff) << 2) | kind as u64
}

fn untag(t: u64) -> (usize, u64, Kind) {
    let kind = match t & 3 {
        0 => Kind::Send,
        1 => Kind::Answer,
        2 => Kind::IoRequest,
        _ => Kind::IoAnswer,
    };
    ((t >> 40) as usize, (t >> 2) & 0x3f_ffff_ffff, kind)
}

impl CrawlWorkload {
    /// Tenants' threads are numbered tenant by tenant; the host I/O path,
    /// if any, is the last thread.
    pub fn new(tenants: Vec<CrawlTenant>, io: Option<HostIo>, horizon_ns: u64, seed: u64) -> CrawlWorkload {
        let mut streams = Vec::new();
        let mut first_thread = 0;
        for (ti, t) in tenants.iter().enumerate() {
            let n = (t.rate * t.period_ns as f64 / 1e9).round().max(1.0) as usize;
            for s in 0..n {
                streams.push(Stream {
                    tenant: ti,
                    thread: first_thread + s % t.vcpus.max(1),
                    phase_ns: t.period_ns * s as u64 / n as u64,
                    period_ns: t.period_ns,
                    next: 0,
                    tracker: IntervalTracker::default(),
                });
            }
            first_thread += t.vcpus.max(1);
        }
        let sends = streams
            .iter()
            .enumerate()
            .map(|(i, s)| Reverse((s.phase_ns, i)))
            .collect();
        let vcpu_threads = first_thread;
        let samplers = (0..vcpu_threads).map(|th| {
            let ti = tenant_of(&tenants, th);
            tenants[ti].work.sampler(seed ^ (th as u64).wrapping_mul(0x9e37_79b9))
        });
        CrawlWorkload {
            measures: vec![CrawlMeasures::default(); tenants.len()],
            samplers: samplers.collect(),
            tenants,
            streams,
            sends,
            answers: BinaryHeap::new(),
            threads: first_thread + usize::from(io.is_some()),
            horizon_ns,
            io,
            io_queue: BinaryHeap::new(),
        }
    }
}

fn tenant_of(tenants: &[CrawlTenant], thread: usize) -> usize {
    let mut first = 0;
    for (i, t) in tenants.iter().enumerate() {
        first += t.vcpus.max(1);
        if thread < first {
            return i;
        }
    }
    tenants.len() - 1
}

impl Workload for CrawlWorkload {
    fn threads(&self) -> usize {
        self.threads
    }

    fn next_arrival(&self) -> Option<u64> {
        let send = self.sends.peek().map(|r| r.0 .0).filter(|&t| t < self.horizon_ns);
        let answer = self.answers.peek().map(|r| r.0 .0);
        let io = self.io_queue.peek().map(|r| r.0 .0);
        [send, answer, io].into_iter().flatten().min()
    }

    fn arrive(&mut self, now: u64, push: &mut dyn FnMut(Item)) {
        while let Some(&Reverse((t, si))) = self.sends.peek() {
            if t > now || t >= self.horizon_ns {
                break;
            }
            self.sends.pop();
            let s = &mut self.streams[si];
            let k = s.next;
            s.next += 1;
            push(Item {
                thread: s.thread,
                release_ns: t,
                abs_deadline_ns: t + s.period_ns,
                priority: 0,
                cpu_ns: self.tenants[s.tenant].send_cost_ns,
                tag: tag(si, k, Kind::Send),
            });
            self.sends.push(Reverse((s.phase_ns + s.next * s.period_ns, si)));
        }
        while let Some(&Reverse((t, si, k))) = self.answers.peek() {
            if t > now {
                break;
            }
            self.answers.pop();
            let s = &self.streams[si];
            let work = self.samplers[s.thread].next_ns();
            push(Item {
                thread: s.thread,
                release_ns: t,
                abs_deadline_ns: t + s.period_ns,
                priority: 0,
                cpu_ns: work.max(1),
                tag: tag(si, k, Kind::Answer),
            });
        }
        if let Some(io) = self.io {
            let io_thread = self.threads - 1;
            while let Some(&Reverse((t, tg))) = self.io_queue.peek() {
                if t > now {
                    break;
                }
                self.io_queue.pop();
                push(Item {
                    thread: io_thread,
                    release_ns: t,
                    abs_deadline_ns: u64::MAX,
                    priority: 0,
                    cpu_ns: io.cost_per_packet_ns.max(1),
                    tag: tg,
                });
            }
        }
    }

    fn completed(&mut self, now: u64, item: &Item) {
        let (si, k, kind) = untag(item.tag);
        let s = &mut self.streams[si];
        let one_way = self.tenants[s.tenant].one_way_ns;
        match kind {
            Kind::Answer => {}
            Kind::Send => {
                let planned = s.phase_ns + k * s.period_ns;
                let m = &mut self.measures[s.tenant];
                m.polls += 1;
                m.send_lag.record(now.saturating_sub(planned));
                if self.io.is_some() {
                    self.io_queue.push(Reverse((now, tag(si, k, Kind::IoRequest))));
                } else {
                    let recv = now + one_way;
                    s.tracker.measured(k, recv, s.period_ns, &mut m.interval_error);
                    self.answers.push(Reverse((recv + one_way, si, k)));
                }
            }
            Kind::IoRequest => {
                // Forwarded: it reaches the gateway one way later, and the
                // answer is back at the host one way after that.
                let recv = now + one_way;
                let m = &mut self.measures[s.tenant];
                s.tracker.measured(k, recv, s.period_ns, &mut m.interval_error);
                self.io_queue
                    .push(Reverse((recv + one_way, tag(si, k, Kind::IoAnswer))));
            }
            Kind::IoAnswer => self.answers.push(Reverse((now, si, k))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::run;
    use crate::sched::Cfs;

    const MS: u64 = 1_000_000;

    fn tenant(tail: Option<f64>) -> CrawlTenant {
        CrawlTenant {
            vcpus: 1,
            rate: 500.0,
            period_ns: 1_000 * MS,
            work: WorkModel {
                mean_ns: 1_400_000,
                tail,
            },
            send_cost_ns: 10_000,
            one_way_ns: 10 * MS,
        }
    }

    /// Document 000's finding 3 as the lab measured it (doc-000-bursts,
    /// "alone": one vCPU at 500 polls/s, 1.4 ms per poll): a fixed cost
    /// keeps the interval error at a few ms (lab: p99.9 5.3 ms), the same
    /// mean drawn from a Pareto tail of shape 1.5 bursts to 100+ ms (lab:
    /// p99.9 131 ms). The simulator must show the same split. (It
    /// measures 0 and 145 ms: it has no host noise yet, the lab's few ms
    /// with fixed work are this VM's own stalls; calibration adds them.)
    #[test]
    fn bursty_work_alone_breaks_the_interval_error_as_in_the_lab() {
        let horizon = 30_000 * MS;
        let p999 = |tail| {
            let mut w = CrawlWorkload::new(vec![tenant(tail)], None, horizon, 3);
            let o = run(&mut w, 1, &mut Cfs::new(vec![1024]), horizon + 100 * MS);
            let m = &w.measures[0];
            assert!(m.polls >= 14_900, "{} polls", m.polls);
            assert!(o.busy_ns > 0);
            m.interval_error.percentile(99.9).unwrap()
        };
        let fixed = p999(None);
        let bursty = p999(Some(1.5));
        eprintln!(
            "simulated p99.9: fixed {} us, bursty {} us",
            fixed / 1000,
            bursty / 1000
        );
        assert!(fixed < 5 * MS, "fixed work: p99.9 {} us", fixed / 1000);
        assert!(bursty > 50 * MS, "bursty work: p99.9 {} us", bursty / 1000);
    }

    #[test]
    fn tags_round_trip() {
        for (s, k, a) in [
            (0, 0, Kind::Send),
            (12345, 987_654_321, Kind::Answer),
            (1 << 20, 1, Kind::IoRequest),
            (7, 3, Kind::IoAnswer),
        ] {
            assert_eq!(untag(tag(s, k, a)), (s, k, a));
        }
    }

    /// Every request and answer crosses the host I/O thread: it runs two
    /// packets per poll, and when tenants hog the CPUs under CFS it is
    /// delayed with them; at real-time priority over them (FIFO, I/O path
    /// first) the same tenants keep their interval error.
    #[test]
    fn the_host_io_path_is_a_thread_that_competes_for_the_cpus() {
        let horizon = 20_000 * MS;
        // 3 x 150 polls/s x 1.4 ms = 63 % of the CPU, plus the I/O path.
        let tenants: Vec<CrawlTenant> = (0..3)
            .map(|_| CrawlTenant {
                rate: 150.0,
                ..tenant(Some(1.5))
            })
            .collect();
        let io = HostIo {
            cost_per_packet_ns: 50_000,
        };
        let mut w = CrawlWorkload::new(tenants.clone(), Some(io), horizon, 5);
        assert_eq!(w.threads(), 4);
        let o = run(&mut w, 1, &mut Cfs::new(vec![1024; 4]), horizon + 1_000 * MS);
        let io_items = o.tasks[3].completed;
        let polls: u64 = w.measures.iter().map(|m| m.polls).sum();
        assert!(
            io_items + 3 * 150 >= 2 * polls,
            "{io_items} I/O items for {polls} polls"
        );
        let worst = |w: &CrawlWorkload| {
            w.measures
                .iter()
                .map(|m| m.interval_error.percentile(99.0).unwrap())
                .max()
                .unwrap()
        };
        let shared = worst(&w);
        // The same with the I/O path ahead of the tenants (a higher
        // priority than their 0).
        let mut w2 = CrawlWorkload::new(tenants, Some(io), horizon, 5);
        let o2 = run(&mut w2, 1, &mut IoFirst, horizon + 1_000 * MS);
        let polls2: u64 = w2.measures.iter().map(|m| m.polls).sum();
        assert!(o2.tasks[3].completed + 3 * 150 >= 2 * polls2);
        eprintln!(
            "worst tenant p99: I/O path under CFS {} us, first {} us",
            shared / 1000,
            worst(&w2) / 1000
        );
        assert!(worst(&w2) <= shared, "{} > {}", worst(&w2), shared);
    }

    /// FIFO with the host I/O thread (the last) first.
    struct IoFirst;
    impl crate::sched::Scheduler for IoFirst {
        fn name(&self) -> &'static str {
            "io-first"
        }
        fn order(&self, a: &crate::sched::Job, b: &crate::sched::Job) -> std::cmp::Ordering {
            b.task.eq(&3).cmp(&a.task.eq(&3)).then(a.queued_seq.cmp(&b.queued_seq))
        }
    }
}
