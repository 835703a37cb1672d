//! The late events a probe keeps for explanation: which thread, when the
//! event was planned and when it happened. A probe offers every event to a
//! [`WorstEvents`], which keeps the worst ones (of equal lateness, the
//! earliest planned) in a bounded heap allocated and touched before the
//! run (no allocation or page fault per event on the measurement path);
//! which of them count as late is decided at the end, against a threshold
//! the whole run's distribution gives (ontime-explain explains them).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde::{Deserialize, Serialize};

/// One probe event on CLOCK_MONOTONIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ProbeEvent {
    /// The thread that waited for it (the probe's own thread).
    pub tid: u32,
    pub planned_ns: u64,
    pub actual_ns: u64,
    /// A request's arrival at the gateway (a crawl's `late_arrivals`):
    /// when the probe sent it; `actual_ns` is then the gateway's kernel
    /// receive stamp less the path's nominal one-way delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_ns: Option<u64>,
    /// A request's answer (a crawl's `late_answers`): the gateway's own
    /// stamps of it; `actual_ns` is then the answer's arrival at the
    /// crawler less the round trip's nominal time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<GatewayStamps>,
    /// A datagram (a flow receiver's `late_events`): the kernel's receive
    /// stamp of it at the receiver, when it entered the receiver's network
    /// stack; `sent_ns` is then its send time on the receiver's clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub received_ns: Option<u64>,
}

/// When the gateway received a request and when it answered it, on its
/// clock (the host's, in the lab).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GatewayStamps {
    pub recv_ns: u64,
    pub answered_ns: u64,
}

impl ProbeEvent {
    pub fn lateness_ns(&self) -> u64 {
        self.actual_ns.saturating_sub(self.planned_ns)
    }
}

/// A kept event as the heap orders it: lateness, u64::MAX − planned (of
/// equal lateness the earlier planned ranks higher), actual, tid, sent,
/// the gateway's receive and answer stamps, a datagram's receive stamp
/// (u64::MAX: none).
type Key = (u64, u64, u64, u32, u64, u64, u64, u64);

/// The `capacity` worst events offered (ties: the earlier kept), and how
/// many were offered.
#[derive(Debug)]
pub struct WorstEvents {
    // Min-heap on lateness: the root is the mildest kept, the one a worse
    // newcomer replaces.
    heap: BinaryHeap<Reverse<Key>>,
    capacity: usize,
    offered: u64,
}

impl Default for WorstEvents {
    fn default() -> Self {
        WorstEvents::new(0)
    }
}

impl WorstEvents {
    pub fn new(capacity: usize) -> WorstEvents {
        let mut heap = BinaryHeap::with_capacity(capacity);
        // Touch every page now, not on the measurement path.
        heap.extend(std::iter::repeat_n(Reverse((0, 0, 0, 0, 0, 0, 0, 0)), capacity));
        heap.clear();
        WorstEvents {
            heap,
            capacity,
            offered: 0,
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Events offered in all (kept or not).
    pub fn offered(&self) -> u64 {
        self.offered
    }

    #[inline]
    pub fn offer(&mut self, e: ProbeEvent) {
        if self.capacity == 0 {
            return;
        }
        self.offered += 1;
        // Of equal lateness the later planned is the smaller: it goes first.
        // A sent time of u64::MAX is none.
        let key = Reverse((
            e.lateness_ns(),
            u64::MAX - e.planned_ns,
            e.actual_ns,
            e.tid,
            e.sent_ns.unwrap_or(u64::MAX),
            e.gateway.map_or(u64::MAX, |g| g.recv_ns),
            e.gateway.map_or(u64::MAX, |g| g.answered_ns),
            e.received_ns.unwrap_or(u64::MAX),
        ));
        if self.heap.len() < self.capacity {
            self.heap.push(key);
        } else if self.heap.peek().is_some_and(|min| key.0 .0 > min.0 .0) {
            // Replacing the root in place: the heap never grows past its
            // capacity, so it never reallocates.
            if let Some(mut root) = self.heap.peek_mut() {
                *root = key;
            }
        }
    }

    /// Adds another thread's kept events to these (keeping this one's
    /// capacity).
    pub fn add(&mut self, other: &WorstEvents) {
        let offered = self.offered + other.offered;
        for &key in other.heap.iter() {
            self.offer(unkey(key));
        }
        self.offered = offered;
    }

    /// The kept events, worst first (ties: earlier planned first).
    pub fn into_worst_first(self) -> Vec<ProbeEvent> {
        let mut v: Vec<ProbeEvent> = self.heap.into_iter().map(unkey).collect();
        v.sort_by_key(|e| (Reverse(e.lateness_ns()), e.planned_ns));
        v
    }
    /// Moves the kept events into `out` (worst first) and starts over,
    /// keeping the heap's memory: a buffer handed back and forth between
    /// a probe thread and its collector. Returns how many were offered.
    pub fn drain_into(&mut self, out: &mut Vec<ProbeEvent>) -> u64 {
        let start = out.len();
        out.extend(self.heap.drain().map(unkey));
        out[start..].sort_by_key(|e| (Reverse(e.lateness_ns()), e.planned_ns));
        std::mem::take(&mut self.offered)
    }
}

fn unkey(Reverse((_, later, actual_ns, tid, sent, recv, answered, received)): Reverse<Key>) -> ProbeEvent {
    ProbeEvent {
        tid,
        planned_ns: u64::MAX - later,
        actual_ns,
        sent_ns: (sent != u64::MAX).then_some(sent),
        gateway: (recv != u64::MAX).then_some(GatewayStamps {
            recv_ns: recv,
            answered_ns: answered,
        }),
        received_ns: (received != u64::MAX).then_some(received),
    }
}

/// The late events of a run: the kept events later than a threshold, and
/// how many events of the whole run were.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateSet {
    /// Worst first; at most what the probe kept.
    pub events: Vec<ProbeEvent>,
    /// Events of the run later than the threshold (kept or not).
    pub late: u64,
    pub threshold_ns: u64,
    /// What chose the threshold, for the reader.
    pub threshold_from: String,
}

/// The requests of a crawl that arrived late at the gateway: each event's
/// `actual_ns` is the gateway's receive stamp less the path's nominal
/// one-way delay (`nominal_ns`), its `sent_ns` when it was sent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateArrivals {
    pub nominal_ns: u64,
    #[serde(flatten)]
    pub set: LateSet,
}

impl LateArrivals {
    /// The path as far as the arrivals know it: one way, no gateway.
    pub fn path(&self) -> PathNominal {
        PathNominal {
            one_way_ns: self.nominal_ns,
            gateway_ns: 0,
        }
    }
}

/// The path a crawl's requests take, as set up (the lab's): what a request
/// and its answer take when nothing holds them up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathNominal {
    /// Each way between the crawler and the gateway (the relay's delay).
    pub one_way_ns: u64,
    /// The gateway's fixed controller delay before it answers.
    pub gateway_ns: u64,
}

impl PathNominal {
    /// A request's round trip, sent to answered back.
    pub fn round_trip_ns(&self) -> u64 {
        self.one_way_ns.saturating_mul(2).saturating_add(self.gateway_ns)
    }
}

/// The requests of a crawl whose answers came back late: each event's
/// `actual_ns` is the answer's arrival less the round trip's nominal time
/// (`path`), with its sent time and the gateway's stamps.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateAnswers {
    pub path: PathNominal,
    #[serde(flatten)]
    pub set: LateSet,
}

impl LateSet {
    /// Late = later than `over` when given (a user's `--explain-over`, a
    /// lab scenario's tightest target), else than the run's p99.9
    /// (`all`: every event's lateness).
    pub fn choose(worst: WorstEvents, all: &crate::stats::LatencyHistogram, over: Option<u64>) -> LateSet {
        let (threshold_ns, threshold_from) = match over {
            Some(ns) => (
                ns,
                "the threshold given (--explain-over, or the scenario's target)".to_string(),
            ),
            None if crate::stats::supports(all.len(), 99.9) => {
                (all.percentile(99.9).unwrap_or(0), "p99.9 of the run".to_string())
            }
            // Fewer than 1000 events cannot support p99.9: the value at it
            // is the largest, so no event is late; say why.
            None => (
                all.max(),
                format!(
                    "p99.9 of the run, which {} events cannot support: give --explain-over",
                    all.len()
                ),
            ),
        };
        let events: Vec<ProbeEvent> = worst
            .into_worst_first()
            .into_iter()
            .filter(|e| e.lateness_ns() > threshold_ns)
            .collect();
        LateSet {
            late: all.count_above(threshold_ns).max(events.len() as u64),
            events,
            threshold_ns,
            threshold_from,
        }
    }
}

/// Events kept per probe thread and interval in a late log: the worst of
/// an interval's late events, the rest counted.
pub const LATE_LOG_PER_THREAD: usize = 64;

/// One interval of a probe's planned time as its late log streams it
/// (`ontime cyclic --late-log`): one JSON line per interval, written once
/// every probe thread has moved past it, so a reader that has seen the
/// interval ending at `to_ns` knows every late event planned before it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateInterval {
    /// Planned times in [from_ns, to_ns), CLOCK_MONOTONIC.
    pub from_ns: u64,
    pub to_ns: u64,
    /// Events later than this are late.
    pub threshold_ns: u64,
    /// The interval's late events (kept or not).
    pub late: u64,
    /// The worst of them, worst first: at most [`LATE_LOG_PER_THREAD`]
    /// per probe thread.
    pub events: Vec<ProbeEvent>,
}

/// The longest line a late log reader takes: an interval of 64 threads'
/// kept events is under 300 KiB.
pub const MAX_LATE_LINE_BYTES: usize = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(planned: u64, late: u64) -> ProbeEvent {
        ProbeEvent {
            tid: 7,
            planned_ns: planned,
            actual_ns: planned + late,
            sent_ns: None,
            gateway: None,
            received_ns: None,
        }
    }

    #[test]
    fn keeps_the_worst_within_its_capacity() {
        let mut w = WorstEvents::new(3);
        for (i, late) in [5, 1, 9, 3, 7, 2, 9].into_iter().enumerate() {
            w.offer(ev(i as u64 * 100, late));
        }
        assert_eq!(w.offered(), 7);
        assert_eq!(w.heap.capacity(), 3, "never grew");
        let kept: Vec<u64> = w.into_worst_first().iter().map(|e| e.lateness_ns()).collect();
        assert_eq!(kept, vec![9, 9, 7]);
    }

    #[test]
    fn merging_threads_keeps_the_worst_of_both_and_counts_all() {
        let mut a = WorstEvents::new(2);
        let mut b = WorstEvents::new(2);
        [4, 8].into_iter().for_each(|l| a.offer(ev(l, l)));
        [6, 1, 2].into_iter().for_each(|l| b.offer(ev(l, l)));
        a.add(&b);
        assert_eq!(a.offered(), 5);
        let kept: Vec<u64> = a.into_worst_first().iter().map(|e| e.lateness_ns()).collect();
        assert_eq!(kept, vec![8, 6]);
    }

    #[test]
    fn too_few_events_for_p999_make_none_late_and_say_so() {
        let mut all = crate::stats::LatencyHistogram::new();
        let mut w = WorstEvents::new(10);
        for late in [1_000, 2_000, 90_000] {
            all.record(late);
            w.offer(ev(late, late));
        }
        let set = LateSet::choose(w, &all, None);
        assert!(set.events.is_empty() && set.late == 0, "{set:?}");
        assert!(set.threshold_from.contains("--explain-over"), "{}", set.threshold_from);
        let mut w = WorstEvents::new(10);
        [1_000, 90_000].into_iter().for_each(|l| w.offer(ev(l, l)));
        let set = LateSet::choose(w, &all, Some(50_000));
        assert_eq!(set.events.len(), 1);
        assert_eq!(set.late, 1);
    }

    #[test]
    fn of_equal_lateness_the_earliest_planned_is_kept() {
        let mut w = WorstEvents::new(1);
        w.offer(ev(100, 5));
        w.offer(ev(200, 5));
        assert_eq!(w.into_worst_first()[0].planned_ns, 100);
    }

    #[test]
    fn capacity_zero_keeps_nothing_and_costs_nothing() {
        let mut w = WorstEvents::new(0);
        w.offer(ev(0, 10));
        assert!(w.into_worst_first().is_empty());
    }

    #[test]
    fn a_drained_buffer_starts_over_with_its_memory() {
        let mut w = WorstEvents::new(2);
        [3, 9, 5].into_iter().for_each(|l| w.offer(ev(l * 10, l)));
        let mut out = Vec::new();
        assert_eq!(w.drain_into(&mut out), 3);
        assert_eq!(out.iter().map(|e| e.lateness_ns()).collect::<Vec<_>>(), vec![9, 5]);
        assert_eq!((w.offered(), w.heap.capacity()), (0, 2));
        w.offer(ev(1, 1));
        assert_eq!(w.drain_into(&mut out), 1);
        assert_eq!(out.len(), 3);
    }
}
