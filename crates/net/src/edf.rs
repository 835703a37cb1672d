//! Document 003's scheduler at the bottleneck link: reservation channels
//! first (WFQ between them: self-clocked fair queueing on their reserved
//! rates), then deadline channels by earliest deadline, best effort last,
//! except that a best-effort frame goes ahead while no queued deadline is
//! at risk (the document's soft EDF). One link of a fixed rate; every frame
//! becomes eligible a fixed delay after it arrived (the WAN). Frames are
//! slot numbers into the relay's buffers; the queues are sized once, so
//! nothing is allocated per frame up to `capacity`.
//!
//! What the controller programs into this "switch" while it runs (reserved
//! rates, channels raised to priority on escalation) lives in a
//! [`SwitchTable`] shared with it and read per frame.
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

pub use crate::discipline::FrameClass;
use crate::discipline::{Discipline, LinkAhead, Queued};

/// Channels are numbered by their DSCP: at most 64.
pub const MAX_CHANNELS: usize = 64;

/// A frame's class from its bytes: an MPLS frame (EtherType 0x8847, one
/// label, IPv4 inside) is a channel's, numbered by its DSCP; TC 2 marks a
/// reservation channel, anything else a deadline channel whose deadline is
/// the label's (decoded against `now_ns`, the clock the stamp used). Every
/// other frame is best effort.
pub fn classify(frame: &[u8], now_ns: u64) -> FrameClass {
    let Some(&[t0, t1, m0, m1, m2, m3, v, tos]) = frame.get(12..20) else {
        return FrameClass::BestEffort;
    };
    if u16::from_be_bytes([t0, t1]) != 0x8847 || v >> 4 != 4 {
        return FrameClass::BestEffort;
    }
    let mpls = u32::from_be_bytes([m0, m1, m2, m3]);
    let (label, tc, bottom) = (mpls >> 12, (mpls >> 9) & 7, mpls & (1 << 8) != 0);
    let channel = tos >> 2;
    if !bottom || channel == 0 {
        return FrameClass::BestEffort;
    }
    if tc == 2 {
        return FrameClass::Reservation { channel };
    }
    match crate::channel::decode_deadline(label, now_ns) {
        Some(deadline_ns) => FrameClass::Deadline { channel, deadline_ns },
        None => FrameClass::BestEffort,
    }
}

/// The switch's per-DSCP programme, written by the controller while frames
/// flow: the rate reserved for each reservation channel (WFQ weights) and
/// whether a deadline channel was raised to priority (escalation: its
/// frames then go before other deadline frames and best effort never goes
/// ahead of them). Relaxed atomics: a change applies from the next frame.
pub struct SwitchTable {
    reserved_bps: [AtomicU64; MAX_CHANNELS],
    priority: [AtomicBool; MAX_CHANNELS],
    /// What the switch saw of each channel frame it forwarded, for the
    /// controller to explain a miss (`miss`).
    pub paths: crate::miss::PathLog,
}

impl SwitchTable {
    pub fn new() -> Arc<SwitchTable> {
        Arc::new(SwitchTable {
            reserved_bps: std::array::from_fn(|_| AtomicU64::new(0)),
            priority: std::array::from_fn(|_| AtomicBool::new(false)),
            paths: crate::miss::PathLog::default(),
        })
    }

    /// Sets (or, on escalation, raises) a reservation channel's rate.
    pub fn set_reservation(&self, channel: u8, bps: u64) {
        if let Some(r) = self.reserved_bps.get(channel as usize) {
            r.store(bps, Ordering::Relaxed);
        }
    }

    pub fn reservation(&self, channel: u8) -> u64 {
        self.reserved_bps
            .get(channel as usize)
            .map_or(0, |r| r.load(Ordering::Relaxed))
    }

    /// Raises (or lowers) a deadline channel to priority.
    pub fn set_priority(&self, channel: u8, on: bool) {
        if let Some(p) = self.priority.get(channel as usize) {
            p.store(on, Ordering::Relaxed);
        }
    }

    pub fn priority(&self, channel: u8) -> bool {
        self.priority
            .get(channel as usize)
            .is_some_and(|p| p.load(Ordering::Relaxed))
    }

    /// Forgets a removed channel.
    pub fn clear(&self, channel: u8) {
        self.set_reservation(channel, 0);
        self.set_priority(channel, false);
    }
}

/// Counters a report reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EdfStats {
    /// Frames sent: best effort, deadline, reservation.
    pub sent: [u64; 3],
    /// Bytes sent, in the same order.
    #[serde(default)]
    pub sent_bytes: [u64; 3],
    /// Deadline frames that left the link after their deadline.
    pub late: u64,
    /// Best-effort frames sent ahead of waiting deadline frames (slack allowed it).
    pub best_effort_ahead: u64,
    /// Best-effort frames dropped because the best-effort buffer was full.
    #[serde(default)]
    pub best_effort_dropped: u64,
    /// Channel frames dropped because their channel's buffer was full.
    #[serde(default)]
    pub channel_dropped: u64,
}

impl EdfStats {
    pub fn add(&mut self, o: &EdfStats) {
        for k in 0..3 {
            self.sent[k] += o.sent[k];
            self.sent_bytes[k] += o.sent_bytes[k];
        }
        self.late += o.late;
        self.best_effort_ahead += o.best_effort_ahead;
        self.best_effort_dropped += o.best_effort_dropped;
        self.channel_dropped += o.channel_dropped;
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Frame {
    slot: usize,
    arrived_ns: u64,
    len: usize,
    egress: i32,
    /// The link's service counters when a channel frame became eligible.
    mark: ServedMark,
}

/// Link time served so far (frames handed over, by their wire time), as
/// a channel frame found it at eligibility: the difference at its own turn
/// is what went ahead of it ([`LinkAhead`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
struct ServedMark {
    total_ns: u64,
    best_effort_ns: u64,
    own_channel_ns: u64,
}

/// Wire time handed to the link, in all, to best effort and per channel.
struct Served {
    total_ns: u64,
    best_effort_ns: u64,
    channel_ns: [u64; MAX_CHANNELS],
    /// The last frame handed over: 0 best effort, else its channel.
    last: u8,
}

impl Frame {
    fn of(q: &Queued) -> Frame {
        Frame {
            slot: q.slot,
            arrived_ns: q.arrived_ns,
            len: q.len,
            egress: q.egress,
            mark: ServedMark::default(),
        }
    }

    fn queued(self, class: FrameClass, ahead: LinkAhead) -> Queued {
        Queued {
            slot: self.slot,
            arrived_ns: self.arrived_ns,
            len: self.len,
            egress: self.egress,
            class,
            ahead,
        }
    }
}

/// A channel's slot in per-channel arrays.
fn channel_index(channel: u8) -> usize {
    (channel as usize).min(MAX_CHANNELS - 1)
}

/// (0 for a channel raised to priority else 1, deadline, seq, frame, channel).
type EdfKey = (u8, u64, u64, Frame, u8);

pub struct ChannelScheduler {
    rate_bps: u64,
    delay_ns: u64,
    /// Frames not yet eligible (arrived less than `delay_ns` ago), in arrival order.
    waiting: VecDeque<(Frame, FrameClass)>,
    edf: BinaryHeap<Reverse<EdfKey>>,
    /// (virtual finish tag, seq) -> frame.
    wfq: BinaryHeap<Reverse<(u64, u64, Frame, u8)>>,
    best_effort: VecDeque<Frame>,
    best_effort_bytes: u64,
    /// The buffer (a switch port's) of best effort and of each channel:
    /// frames beyond it are dropped, so a channel that sends more than it
    /// declared fills its own queue, not the others'.
    best_effort_limit_bytes: u64,
    channel_bytes: [u64; MAX_CHANNELS],
    /// Reserved rates (0: none set, served at 1 bit/s) and priorities.
    table: Arc<SwitchTable>,
    /// Share of a deadline frame's budget (deadline - arrival) best effort
    /// may not eat into: 0 is document 003's soft EDF (best effort ahead
    /// while the deadline itself is safe).
    guard: f64,
    /// How far ahead of the link a frame may be handed over (a NIC's
    /// transmit queue): the relay thread wakes late, and without it the
    /// link would idle for every late wake-up.
    tx_ahead_ns: u64,
    /// Last finish tag per channel, and the tag of the frame last served
    /// (SCFQ's virtual clock); a frame's tag advances by its wire time at
    /// its channel's reserved rate.
    last_tag: [u64; MAX_CHANNELS],
    virtual_now: u64,
    /// Wire time of the deadline frames queued (eligible), ns.
    deadline_backlog_ns: u64,
    busy_until: u64,
    served: Served,
    seq: u64,
    pub stats: EdfStats,
}

impl ChannelScheduler {
    /// A link of `rate_bps` after a fixed `delay_ns`, room for `capacity`
    /// frames, a best-effort buffer of `best_effort_limit_bytes` (None:
    /// only `capacity` bounds it) and the controller's `table`.
    pub fn new(
        rate_bps: u64,
        delay_ns: u64,
        capacity: usize,
        best_effort_limit_bytes: Option<u64>,
        table: Arc<SwitchTable>,
    ) -> ChannelScheduler {
        ChannelScheduler {
            rate_bps: rate_bps.max(1),
            delay_ns,
            waiting: VecDeque::with_capacity(capacity),
            edf: BinaryHeap::with_capacity(capacity),
            wfq: BinaryHeap::with_capacity(capacity),
            best_effort: VecDeque::with_capacity(capacity),
            best_effort_bytes: 0,
            best_effort_limit_bytes: best_effort_limit_bytes.unwrap_or(u64::MAX),
            channel_bytes: [0; MAX_CHANNELS],
            table,
            guard: 0.0,
            tx_ahead_ns: 0,
            last_tag: [0; MAX_CHANNELS],
            virtual_now: 0,
            deadline_backlog_ns: 0,
            busy_until: 0,
            served: Served {
                total_ns: 0,
                best_effort_ns: 0,
                channel_ns: [0; MAX_CHANNELS],
                last: 0,
            },
            seq: 0,
            stats: EdfStats::default(),
        }
    }

    /// Keeps `share` (0..1) of every deadline frame's budget from best
    /// effort (see `guard`).
    pub fn with_guard(mut self, share: f64) -> ChannelScheduler {
        self.guard = share.clamp(0.0, 1.0);
        self
    }

    /// Lets frames be handed over up to `ns` before the link is free (the
    /// relay uses two largest frames' wire time).
    pub fn with_tx_queue(mut self, ns: u64) -> ChannelScheduler {
        self.tx_ahead_ns = ns;
        self
    }

    /// Wire time of a largest frame (1518 bytes) on this link.
    pub fn mtu_wire_ns(&self) -> u64 {
        self.wire_ns(1518)
    }

    fn wire_ns(&self, len: usize) -> u64 {
        len as u64 * 8 * 1_000_000_000 / self.rate_bps
    }

    /// The link's service counters for a channel frame eligible at
    /// `eligible_ns`: what is still on the wire then counts as gone ahead
    /// of it, charged to whose frame it was.
    fn mark(&self, channel: u8, eligible_ns: u64) -> ServedMark {
        let s = &self.served;
        let on_wire = self.busy_until.saturating_sub(eligible_ns);
        let own = s.channel_ns[channel_index(channel)];
        ServedMark {
            total_ns: s.total_ns.saturating_sub(on_wire),
            best_effort_ns: s.best_effort_ns.saturating_sub(if s.last == 0 { on_wire } else { 0 }),
            own_channel_ns: own.saturating_sub(if s.last == channel { on_wire } else { 0 }),
        }
    }

    /// Moves frames whose delay has passed into their class queues.
    fn admit_eligible(&mut self, now_ns: u64) {
        while let Some(&(mut f, class)) = self.waiting.front() {
            if f.arrived_ns + self.delay_ns > now_ns {
                break;
            }
            self.waiting.pop_front();
            if let Some(channel) = class.channel() {
                // Nothing was handed over since it became eligible: every
                // hand-over admits first.
                f.mark = self.mark(channel, f.arrived_ns + self.delay_ns);
            }
            self.seq += 1;
            match class {
                FrameClass::BestEffort => self.best_effort.push_back(f),
                FrameClass::Deadline { channel, deadline_ns } => {
                    self.deadline_backlog_ns += self.wire_ns(f.len);
                    let rank = if self.table.priority(channel) { 0 } else { 1 };
                    self.edf.push(Reverse((rank, deadline_ns, self.seq, f, channel)));
                }
                FrameClass::Reservation { channel } => {
                    let c = (channel as usize).min(MAX_CHANNELS - 1);
                    let rate = self.table.reservation(c as u8).max(1);
                    // Tag in ns of service at the channel's own rate.
                    let start = self.last_tag[c].max(self.virtual_now);
                    let tag = start + f.len as u64 * 8 * 1_000_000_000 / rate;
                    self.last_tag[c] = tag;
                    self.wfq.push(Reverse((tag, self.seq, f, channel)));
                }
            }
        }
    }

    fn send(&mut self, f: Frame, class: FrameClass, now_ns: u64) -> Queued {
        let mut ahead = LinkAhead::default();
        // 0: best effort (no channel has DSCP 0).
        let channel = class.channel().unwrap_or(0);
        if channel != 0 {
            let held = &mut self.channel_bytes[channel_index(channel)];
            *held = held.saturating_sub(f.len as u64);
            let s = &self.served;
            let total = s.total_ns.saturating_sub(f.mark.total_ns);
            let best_effort = s.best_effort_ns.saturating_sub(f.mark.best_effort_ns).min(total);
            let own = s.channel_ns[channel_index(channel)]
                .saturating_sub(f.mark.own_channel_ns)
                .min(total - best_effort);
            ahead = LinkAhead {
                best_effort_ns: best_effort,
                own_channel_ns: own,
                other_channels_ns: total - best_effort - own,
            };
        }
        let start = now_ns.max(self.busy_until);
        let wire = self.wire_ns(f.len);
        self.busy_until = start + wire;
        let s = &mut self.served;
        s.total_ns += wire;
        if channel == 0 {
            s.best_effort_ns += wire;
        } else {
            s.channel_ns[channel_index(channel)] += wire;
        }
        s.last = channel;
        let k = match class {
            FrameClass::BestEffort => 0,
            FrameClass::Deadline { deadline_ns, .. } => {
                if self.busy_until > deadline_ns {
                    self.stats.late += 1;
                }
                1
            }
            FrameClass::Reservation { .. } => 2,
        };
        self.stats.sent[k] += 1;
        self.stats.sent_bytes[k] += f.len as u64;
        f.queued(class, ahead)
    }
}

impl Discipline for ChannelScheduler {
    fn classifies(&self) -> bool {
        true
    }

    fn enqueue(&mut self, q: Queued) -> Result<(), Queued> {
        // Tail drop, as a switch port's buffer does; counted at arrival
        // so the delay line in front does not hide the queue.
        let limit = self.best_effort_limit_bytes;
        let len = q.len as u64;
        match q.class {
            FrameClass::BestEffort => {
                if self.best_effort_bytes + len > limit {
                    self.stats.best_effort_dropped += 1;
                    return Err(q);
                }
                self.best_effort_bytes += len;
            }
            FrameClass::Deadline { channel, .. } | FrameClass::Reservation { channel } => {
                let held = &mut self.channel_bytes[channel_index(channel)];
                if *held + len > limit {
                    self.stats.channel_dropped += 1;
                    return Err(q);
                }
                *held += len;
            }
        }
        self.waiting.push_back((Frame::of(&q), q.class));
        Ok(())
    }

    fn next_release_ns(&self) -> Option<u64> {
        let queued = !self.edf.is_empty() || !self.wfq.is_empty() || !self.best_effort.is_empty();
        let eligible_at = if queued {
            Some(0)
        } else {
            self.waiting.front().map(|(f, _)| f.arrived_ns + self.delay_ns)
        };
        eligible_at.map(|t| t.max(self.busy_until.saturating_sub(self.tx_ahead_ns)))
    }

    fn dequeue(&mut self, now_ns: u64) -> Option<Queued> {
        if self.busy_until > now_ns + self.tx_ahead_ns {
            return None;
        }
        self.admit_eligible(now_ns);
        if let Some(Reverse((tag, _, f, channel))) = self.wfq.pop() {
            self.virtual_now = tag;
            return Some(self.send(f, FrameClass::Reservation { channel }, now_ns));
        }
        let guard = self.guard;
        let earliest = self
            .edf
            .peek()
            .map(|Reverse((rank, d, _, f, _))| (*rank, d - (guard * d.saturating_sub(f.arrived_ns) as f64) as u64));
        if let Some(&b) = self.best_effort.front() {
            // Best effort first while every queued deadline frame would
            // still leave in time behind it (all of them, in EDF order,
            // finish by the earliest deadline: a safe test), never ahead of
            // a channel raised to priority.
            let starts = now_ns.max(self.busy_until);
            let safe = earliest
                .is_none_or(|(rank, d)| rank > 0 && starts + self.wire_ns(b.len) + self.deadline_backlog_ns <= d);
            if safe {
                self.best_effort.pop_front();
                self.best_effort_bytes -= b.len as u64;
                if earliest.is_some() {
                    self.stats.best_effort_ahead += 1;
                }
                return Some(self.send(b, FrameClass::BestEffort, now_ns));
            }
        }
        let Reverse((_, deadline_ns, _, f, channel)) = self.edf.pop()?;
        self.deadline_backlog_ns = self.deadline_backlog_ns.saturating_sub(self.wire_ns(f.len));
        Some(self.send(f, FrameClass::Deadline { channel, deadline_ns }, now_ns))
    }

    fn len(&self) -> usize {
        self.waiting.len() + self.edf.len() + self.wfq.len() + self.best_effort.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1000-byte frames on 8 Mbit/s: 1 ms each on the wire.
    const MS: u64 = 1_000_000;

    fn q(slot: usize, arrived_ns: u64, class: FrameClass) -> Queued {
        Queued {
            slot,
            arrived_ns,
            len: 1000,
            egress: 1,
            class,
            ahead: LinkAhead::default(),
        }
    }

    fn sched(delay_ns: u64, capacity: usize) -> ChannelScheduler {
        ChannelScheduler::new(8_000_000, delay_ns, capacity, None, SwitchTable::new())
    }

    fn dl(channel: u8, deadline_ns: u64) -> FrameClass {
        FrameClass::Deadline { channel, deadline_ns }
    }

    /// Drains at the link's pace; (time sent, slot).
    fn drain(s: &mut ChannelScheduler) -> Vec<(u64, usize)> {
        let mut out = Vec::new();
        while let Some(t) = s.next_release_ns() {
            let f = s.dequeue(t).expect("due at its release");
            out.push((t, f.slot));
        }
        out
    }

    #[test]
    fn a_channel_frame_learns_whose_frames_the_link_carried_while_it_waited() {
        let mut s = sched(0, 8);
        // Best effort goes first (every deadline stays safe behind it),
        // then channel 1's two frames, then channel 2's.
        s.enqueue(q(0, 0, FrameClass::BestEffort)).unwrap();
        s.enqueue(q(1, 0, dl(1, 10 * MS))).unwrap();
        s.enqueue(q(2, 0, dl(1, 10 * MS + 1))).unwrap();
        s.enqueue(q(3, 0, dl(2, 20 * MS))).unwrap();
        let mut ahead = Vec::new();
        while let Some(t) = s.next_release_ns() {
            let f = s.dequeue(t).expect("due at its release");
            ahead.push((f.slot, f.ahead));
        }
        let la = |best_effort_ns, own_channel_ns, other_channels_ns| LinkAhead {
            best_effort_ns,
            own_channel_ns,
            other_channels_ns,
        };
        assert_eq!(
            ahead,
            vec![
                (0, la(0, 0, 0)),
                (1, la(MS, 0, 0)),
                (2, la(MS, MS, 0)),
                (3, la(MS, 0, 2 * MS)),
            ]
        );
        // One eligible while a best-effort frame is still on the wire
        // counts the rest of that frame as ahead of it.
        s.enqueue(q(4, 10 * MS, FrameClass::BestEffort)).unwrap();
        assert_eq!(s.dequeue(10 * MS).map(|f| f.slot), Some(4));
        s.enqueue(q(5, 10 * MS + MS / 4, dl(1, 30 * MS))).unwrap();
        let f = s.dequeue(11 * MS).expect("the link is free");
        assert_eq!((f.slot, f.ahead), (5, la(3 * MS / 4, 0, 0)));
    }

    #[test]
    fn frames_are_classified_by_their_label_and_dscp() {
        let now = 5_000_000_000u64;
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&0x8847u16.to_be_bytes());
        let label = crate::channel::encode_deadline(now + 7_000_000);
        let mpls = (label << 12) | (1 << 9) | (1 << 8) | 64;
        f[14..18].copy_from_slice(&mpls.to_be_bytes());
        f[18] = 0x45;
        f[19] = 5 << 2;
        assert_eq!(
            classify(&f, now),
            FrameClass::Deadline {
                channel: 5,
                deadline_ns: now + 7_000_000
            }
        );
        let res = (label << 12) | (2 << 9) | (1 << 8) | 64;
        f[14..18].copy_from_slice(&res.to_be_bytes());
        assert_eq!(classify(&f, now), FrameClass::Reservation { channel: 5 });
        // Not bottom of stack, plain IPv4, or too short: best effort.
        f[14..18].copy_from_slice(&((label << 12) | 64).to_be_bytes());
        assert_eq!(classify(&f, now), FrameClass::BestEffort);
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        assert_eq!(classify(&f, now), FrameClass::BestEffort);
        assert_eq!(classify(&f[..15], now), FrameClass::BestEffort);
    }

    #[test]
    fn deadline_frames_leave_in_deadline_order() {
        let mut s = sched(0, 16);
        s.enqueue(q(0, 0, dl(1, 9 * MS))).unwrap();
        s.enqueue(q(1, 0, dl(2, 3 * MS))).unwrap();
        s.enqueue(q(2, 0, dl(1, 6 * MS))).unwrap();
        let order: Vec<usize> = drain(&mut s).into_iter().map(|(_, slot)| slot).collect();
        assert_eq!(order, vec![1, 2, 0]);
        assert_eq!(s.stats.late, 0);
    }

    #[test]
    fn best_effort_goes_first_only_while_no_deadline_is_at_risk() {
        // Deadline frame due at 3 ms; two best-effort frames queued before it.
        let mut s = sched(0, 16);
        s.enqueue(q(10, 0, FrameClass::BestEffort)).unwrap();
        s.enqueue(q(11, 0, FrameClass::BestEffort)).unwrap();
        s.enqueue(q(1, 0, dl(1, 3 * MS))).unwrap();
        // 0 ms: BE (ends 1 ms, deadline frame would end 2 ms <= 3): BE.
        // 1 ms: BE again would push the deadline frame to 3 ms: still in
        // time, so BE. 2 ms: the deadline frame.
        assert_eq!(drain(&mut s), vec![(0, 10), (MS, 11), (2 * MS, 1)]);
        assert_eq!(s.stats.best_effort_ahead, 2);
        assert_eq!(s.stats.late, 0);

        // With the deadline at 2 ms only one BE frame fits ahead.
        let mut s = sched(0, 16);
        s.enqueue(q(10, 0, FrameClass::BestEffort)).unwrap();
        s.enqueue(q(11, 0, FrameClass::BestEffort)).unwrap();
        s.enqueue(q(1, 0, dl(1, 2 * MS))).unwrap();
        assert_eq!(drain(&mut s), vec![(0, 10), (MS, 1), (2 * MS, 11)]);
        assert_eq!(s.stats.late, 0);
    }

    #[test]
    fn a_channel_raised_to_priority_goes_first_and_best_effort_waits() {
        let mut s = sched(0, 16);
        s.table.set_priority(2, true);
        s.enqueue(q(10, 0, FrameClass::BestEffort)).unwrap();
        s.enqueue(q(1, 0, dl(1, 3 * MS))).unwrap();
        s.enqueue(q(2, 0, dl(2, 9 * MS))).unwrap();
        // Channel 2's later deadline goes first, and best effort does not
        // go ahead of it although its slack would allow (without priority
        // the order is 10, 1, 2); behind it slack lets best effort ahead of
        // channel 1 again.
        let order: Vec<usize> = drain(&mut s).into_iter().map(|(_, slot)| slot).collect();
        assert_eq!(order, vec![2, 10, 1]);
        let mut s = sched(0, 16);
        s.enqueue(q(10, 0, FrameClass::BestEffort)).unwrap();
        s.enqueue(q(1, 0, dl(1, 3 * MS))).unwrap();
        s.enqueue(q(2, 0, dl(2, 9 * MS))).unwrap();
        let order: Vec<usize> = drain(&mut s).into_iter().map(|(_, slot)| slot).collect();
        assert_eq!(order, vec![10, 1, 2]);
    }

    #[test]
    fn each_class_fills_its_own_buffer() {
        let mut s = ChannelScheduler::new(8_000_000, 0, 16, Some(2500), SwitchTable::new());
        s.enqueue(q(10, 0, FrameClass::BestEffort)).unwrap();
        s.enqueue(q(11, 0, FrameClass::BestEffort)).unwrap();
        assert!(s.enqueue(q(12, 0, FrameClass::BestEffort)).is_err());
        // Channel 1 floods its own buffer; channel 2 still gets in.
        s.enqueue(q(1, 0, dl(1, 9 * MS))).unwrap();
        s.enqueue(q(2, 0, dl(1, 9 * MS))).unwrap();
        assert!(s.enqueue(q(3, 0, dl(1, 9 * MS))).is_err());
        s.enqueue(q(4, 0, dl(2, 9 * MS))).unwrap();
        assert_eq!((s.stats.best_effort_dropped, s.stats.channel_dropped), (1, 1));
        assert_eq!(drain(&mut s).len(), 5);
        // Sent frames free the buffer.
        s.enqueue(q(12, 0, FrameClass::BestEffort)).unwrap();
    }

    #[test]
    fn a_guard_keeps_part_of_the_budget_from_best_effort() {
        // Deadline 4 ms after arrival; a guard of half keeps 2 ms: one BE
        // frame fits ahead (deadline frame done by 2 ms), not two.
        let mut s = sched(0, 16).with_guard(0.5);
        s.enqueue(q(10, 0, FrameClass::BestEffort)).unwrap();
        s.enqueue(q(11, 0, FrameClass::BestEffort)).unwrap();
        s.enqueue(q(1, 0, dl(1, 4 * MS))).unwrap();
        assert_eq!(drain(&mut s), vec![(0, 10), (MS, 1), (2 * MS, 11)]);
    }

    #[test]
    fn a_transmit_queue_keeps_the_link_busy_through_late_wake_ups() {
        // Two frames of 1 ms each; the relay looks again only at 1.5 ms.
        // Without a queue the second frame leaves at 1.5 ms (0.5 ms idle);
        // with 1 ms of queue it was handed over at 0 and ends at 2 ms.
        let mut s = sched(0, 16).with_tx_queue(MS);
        s.enqueue(q(0, 0, FrameClass::BestEffort)).unwrap();
        s.enqueue(q(1, 0, FrameClass::BestEffort)).unwrap();
        assert!(s.dequeue(0).is_some());
        assert!(s.dequeue(0).is_some(), "the second frame goes into the queue");
        assert_eq!(s.busy_until, 2 * MS);
        let mut s = sched(0, 16);
        s.enqueue(q(0, 0, FrameClass::BestEffort)).unwrap();
        s.enqueue(q(1, 0, FrameClass::BestEffort)).unwrap();
        assert!(s.dequeue(0).is_some());
        assert!(s.dequeue(0).is_none());
        assert!(s.dequeue(3 * MS / 2).is_some());
        assert_eq!(s.busy_until, 5 * MS / 2);
    }

    #[test]
    fn a_missed_deadline_is_counted() {
        let mut s = sched(0, 16);
        s.enqueue(q(0, 0, dl(1, MS / 2))).unwrap();
        drain(&mut s);
        assert_eq!(s.stats.late, 1);
    }

    #[test]
    fn reservations_go_first_and_share_by_their_rates() {
        let mut s = sched(0, 64);
        s.table.set_reservation(1, 3_000_000);
        s.table.set_reservation(2, 1_000_000);
        s.enqueue(q(100, 0, dl(5, 100 * MS))).unwrap();
        for i in 0..8 {
            s.enqueue(q(i, 0, FrameClass::Reservation { channel: 1 })).unwrap();
            s.enqueue(q(10 + i, 0, FrameClass::Reservation { channel: 2 })).unwrap();
        }
        let order: Vec<usize> = drain(&mut s).into_iter().map(|(_, slot)| slot).collect();
        // Of the first 8 frames, channel 1 (3x the rate) sends 6, channel 2 sends 2.
        let first: Vec<&usize> = order.iter().take(8).collect();
        assert_eq!(first.iter().filter(|&&&x| x < 10).count(), 6, "{order:?}");
        // The deadline frame comes after every reservation frame.
        assert_eq!(*order.last().unwrap(), 100);
    }

    #[test]
    fn frames_wait_for_the_delay_and_the_link() {
        let mut s = sched(10 * MS, 16);
        s.enqueue(q(0, 0, FrameClass::BestEffort)).unwrap();
        s.enqueue(q(1, 0, FrameClass::BestEffort)).unwrap();
        assert_eq!(s.next_release_ns(), Some(10 * MS));
        assert_eq!(s.dequeue(10 * MS - 1), None);
        assert_eq!(drain(&mut s), vec![(10 * MS, 0), (11 * MS, 1)]);
        assert!(s.is_empty());
    }
}
