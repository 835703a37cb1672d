//! Scheduling disciplines: which queued frame leaves next, and when. The
//! relay owns the frame buffers; a discipline orders their slot numbers, so
//! no discipline copies or allocates per frame.
//!
//! [`DelayLine`] is the WAN of the lab: every frame leaves a fixed delay
//! after it arrived, behind the frames ahead of it on a rate-limited link.
//! Document 003's EDF and WFQ are the `edf` module's `ChannelScheduler`.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A frame waiting in a discipline. `slot` indexes the relay's buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Queued {
    pub slot: usize,
    /// When the relay read it (CLOCK_MONOTONIC ns).
    pub arrived_ns: u64,
    pub len: usize,
    /// Interface index it leaves by.
    pub egress: i32,
    /// Its real-time channel, if the sender stamped one (document 003);
    /// best effort unless the discipline [`Discipline::classifies`].
    pub class: FrameClass,
    /// Set when it leaves, for a channel's frame under a discipline that
    /// classifies: what the link carried while it waited eligible.
    pub ahead: LinkAhead,
}

/// Link time other frames took while a channel frame waited eligible
/// (its fixed delay over, not yet sent), by whose frames they were: what
/// its wait at the link was made of (`miss::explain_miss`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct LinkAhead {
    pub best_effort_ns: u64,
    /// Its own channel's earlier frames.
    pub own_channel_ns: u64,
    pub other_channels_ns: u64,
}

/// What a frame is, as the stamp (tc-BPF on the sender's side) marked it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FrameClass {
    #[default]
    BestEffort,
    /// A deadline channel's frame with its absolute deadline (CLOCK_MONOTONIC ns).
    Deadline { channel: u8, deadline_ns: u64 },
    /// A reservation channel's frame.
    Reservation { channel: u8 },
}

impl FrameClass {
    /// Its channel (its DSCP); None for best effort.
    pub fn channel(self) -> Option<u8> {
        match self {
            FrameClass::Deadline { channel, .. } | FrameClass::Reservation { channel } => Some(channel),
            FrameClass::BestEffort => None,
        }
    }
}

/// The order and time at which queued frames leave.
pub trait Discipline: Send {
    /// Whether it orders frames by their [`FrameClass`]; the relay reads
    /// the class from each frame's bytes only then.
    fn classifies(&self) -> bool {
        false
    }
    /// Takes a frame that arrived at `queued.arrived_ns`, or gives it back
    /// when its queue is full (the relay frees its buffer and counts a drop).
    fn enqueue(&mut self, queued: Queued) -> Result<(), Queued>;
    /// The earliest time [`Discipline::dequeue`] can return a frame, if any
    /// is queued.
    fn next_release_ns(&self) -> Option<u64>;
    /// The next frame due at or before `now_ns`, if any.
    fn dequeue(&mut self, now_ns: u64) -> Option<Queued>;
    /// Frames queued.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Fixed one-way delay, then an optional rate limit per egress link.
pub struct DelayLine {
    delay_ns: u64,
    rate_bps: Option<u64>,
    /// (release time, arrival order, frame): arrival order keeps FIFO among
    /// equal release times.
    heap: BinaryHeap<Reverse<(u64, u64, QueuedKey)>>,
    /// When each egress link finishes sending what it was given (rate limit).
    busy_until: Vec<(i32, u64)>,
    seq: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct QueuedKey {
    slot: usize,
    arrived_ns: u64,
    len: usize,
    egress: i32,
}

impl DelayLine {
    /// `capacity` frames can be queued without the heap growing.
    pub fn new(delay_ns: u64, rate_bps: Option<u64>, capacity: usize) -> DelayLine {
        DelayLine {
            delay_ns,
            rate_bps,
            heap: BinaryHeap::with_capacity(capacity),
            busy_until: Vec::with_capacity(16),
            seq: 0,
        }
    }

    fn link_busy_until(&mut self, egress: i32) -> &mut u64 {
        let i = match self.busy_until.iter().position(|(e, _)| *e == egress) {
            Some(i) => i,
            None => {
                self.busy_until.push((egress, 0));
                self.busy_until.len() - 1
            }
        };
        &mut self.busy_until[i].1
    }
}

impl Discipline for DelayLine {
    fn enqueue(&mut self, q: Queued) -> Result<(), Queued> {
        let mut release = q.arrived_ns + self.delay_ns;
        if let Some(rate) = self.rate_bps {
            let busy = self.link_busy_until(q.egress);
            release = release.max(*busy);
            *busy = release + (q.len as u64 * 8 * 1_000_000_000) / rate.max(1);
        }
        self.seq += 1;
        let key = QueuedKey {
            slot: q.slot,
            arrived_ns: q.arrived_ns,
            len: q.len,
            egress: q.egress,
        };
        self.heap.push(Reverse((release, self.seq, key)));
        Ok(())
    }

    fn next_release_ns(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((t, _, _))| *t)
    }

    fn dequeue(&mut self, now_ns: u64) -> Option<Queued> {
        match self.heap.peek() {
            Some(Reverse((t, _, _))) if *t <= now_ns => {}
            _ => return None,
        }
        let Reverse((_, _, k)) = self.heap.pop()?;
        Some(Queued {
            slot: k.slot,
            arrived_ns: k.arrived_ns,
            len: k.len,
            egress: k.egress,
            // It does not classify: every frame is best effort.
            class: FrameClass::BestEffort,
            ahead: LinkAhead::default(),
        })
    }

    fn len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(slot: usize, arrived_ns: u64, len: usize, egress: i32) -> Queued {
        Queued {
            slot,
            arrived_ns,
            len,
            egress,
            class: Default::default(),
            ahead: Default::default(),
        }
    }

    #[test]
    fn a_frame_leaves_exactly_the_delay_after_it_arrived() {
        let mut d = DelayLine::new(10_000_000, None, 8);
        d.enqueue(q(0, 1_000, 100, 1)).unwrap();
        assert_eq!(d.next_release_ns(), Some(10_001_000));
        assert_eq!(d.dequeue(10_000_999), None);
        assert_eq!(d.dequeue(10_001_000).map(|f| f.slot), Some(0));
        assert!(d.is_empty());
    }

    #[test]
    fn frames_with_the_same_release_leave_in_arrival_order() {
        let mut d = DelayLine::new(0, None, 8);
        for s in [5, 2, 7] {
            d.enqueue(q(s, 100, 60, 1)).unwrap();
        }
        let order: Vec<usize> = std::iter::from_fn(|| d.dequeue(100)).map(|f| f.slot).collect();
        assert_eq!(order, vec![5, 2, 7]);
    }

    #[test]
    fn a_rate_limited_link_serialises_frames_but_links_are_independent() {
        // 1000 bytes at 8 Mbit/s take 1 ms on the wire.
        let mut d = DelayLine::new(0, Some(8_000_000), 8);
        d.enqueue(q(0, 0, 1000, 1)).unwrap();
        d.enqueue(q(1, 0, 1000, 1)).unwrap();
        d.enqueue(q(2, 0, 1000, 2)).unwrap();
        let mut out = Vec::new();
        for now in [0, 999_999, 1_000_000] {
            while let Some(f) = d.dequeue(now) {
                out.push((now, f.slot));
            }
        }
        assert_eq!(out, vec![(0, 0), (0, 2), (1_000_000, 1)]);
    }
}
