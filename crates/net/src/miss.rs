//! Why a real-time channel's packet missed its deadline. The relay records
//! each channel frame's way through it ([`FramePath`]) into a bounded
//! [`PathLog`]; the controller follows the log ([`PathIndex`]), finds the
//! frame a receiver's check reported late (by its channel and IP id), and
//! splits the overrun into the parts of the path that made it
//! ([`explain_miss`]): they add up to the overrun exactly.
//!
//! The path, on CLOCK_MONOTONIC (the stamp, the relay and the check share
//! it): stamped at the sender's tc egress (deadline − the channel's
//! relative deadline) → received at the relay's socket (the kernel's stamp)
//! → read by a relay thread → eligible (the relay's fixed delay over) →
//! handed to the receiver's interface → checked by the receiver's XDP. Only
//! the fixed delay is nominal; every other stretch is excess, and the
//! excess beyond the budget's slack is the overrun. Slack is spent in path
//! order, so the overrun falls on the stretches where the frame was when
//! its time ran out. Within the wait at the link, the frames that went
//! ahead count before the relay's own lateness: the scheduler sends them
//! while the deadline is safe, so what runs past it is what it did not plan
//! (the relay thread late to hand the frame over).

use crate::discipline::LinkAhead;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// One channel frame's way through the host relay (CLOCK_MONOTONIC ns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FramePath {
    /// Its channel as the data path knows it.
    pub dscp: u8,
    pub ip_id: u16,
    /// The relay's socket received it (the kernel's stamp; the read when
    /// the kernel gave none).
    pub received_ns: u64,
    /// A relay thread read it.
    pub read_ns: u64,
    /// Its fixed delay was over: from here it could have left.
    pub eligible_ns: u64,
    /// The relay began handing it to the receiver's interface.
    pub handed_ns: u64,
    /// Link time other frames took while it waited eligible.
    pub ahead: LinkAhead,
}

/// Channel frames the relay's log holds (about 1.9 MB): the controller
/// reads it every 50 ms, so it covers that many frames per tick (some 650
/// Mbit/s of full-size channel frames) before a path is lost.
pub const PATH_LOG_FRAMES: usize = 1 << 15;

/// The relay's record of channel frames: a ring its threads append to and
/// the controller reads behind them. Sized once.
pub struct PathLog {
    ring: Mutex<PathRing>,
}

struct PathRing {
    buf: Vec<FramePath>,
    /// Paths ever appended; the newest is at `(written - 1) % len`.
    written: u64,
}

impl Default for PathLog {
    fn default() -> Self {
        PathLog::new(PATH_LOG_FRAMES)
    }
}

impl PathLog {
    pub fn new(frames: usize) -> PathLog {
        PathLog {
            ring: Mutex::new(PathRing {
                buf: vec![FramePath::default(); frames.max(1)],
                written: 0,
            }),
        }
    }

    /// Appends `pending` and empties it, unless a reader holds the log:
    /// a relay thread must not wait, so it keeps them for its next try.
    pub fn try_append(&self, pending: &mut Vec<FramePath>) {
        if pending.is_empty() {
            return;
        }
        let Ok(mut r) = self.ring.try_lock() else { return };
        for p in pending.drain(..) {
            let n = r.buf.len() as u64;
            let at = (r.written % n) as usize;
            r.buf[at] = p;
            r.written += 1;
        }
    }

    /// Copies the paths appended since `cursor` into `out` and moves the
    /// cursor on; returns how many the ring had overwritten unread.
    pub fn read_since(&self, cursor: &mut u64, out: &mut Vec<FramePath>) -> u64 {
        let r = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        let n = r.buf.len() as u64;
        let from = (*cursor).max(r.written.saturating_sub(n));
        let lost = from - *cursor;
        out.extend((from..r.written).map(|i| r.buf[(i % n) as usize]));
        *cursor = r.written;
        lost
    }
}

/// Paths the controller keeps to look misses up in: a miss is checked
/// within microseconds of its frame leaving the relay, and read within a
/// tick, so the last 65 536 frames are plenty.
const INDEX_FRAMES: usize = 1 << 16;

/// A frame found by its channel and IP id. IP ids wrap every 65 536
/// datagrams of a sender, so a path counts only when handed over within a
/// second before the check.
#[derive(Default)]
pub struct PathIndex {
    by_key: HashMap<(u8, u16), FramePath>,
    order: VecDeque<(u8, u16, u64)>,
    cursor: u64,
    scratch: Vec<FramePath>,
    /// Paths the relay's log overwrote before they were read.
    pub lost: u64,
}

impl PathIndex {
    /// Takes in what the relay logged since the last call.
    pub fn follow(&mut self, log: &PathLog) {
        self.scratch.clear();
        self.lost += log.read_since(&mut self.cursor, &mut self.scratch);
        for p in self.scratch.drain(..) {
            if self.order.len() == INDEX_FRAMES {
                if let Some((d, id, at)) = self.order.pop_front() {
                    if self.by_key.get(&(d, id)).is_some_and(|q| q.handed_ns == at) {
                        self.by_key.remove(&(d, id));
                    }
                }
            }
            self.order.push_back((p.dscp, p.ip_id, p.handed_ns));
            self.by_key.insert((p.dscp, p.ip_id), p);
        }
    }

    pub fn find(&self, dscp: u8, ip_id: u16, checked_ns: u64) -> Option<&FramePath> {
        self.by_key
            .get(&(dscp, ip_id))
            .filter(|p| p.handed_ns <= checked_ns && checked_ns - p.handed_ns < 1_000_000_000)
    }
}

/// A stretch of a missed packet's way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PathPart {
    /// Stamped, not yet at the host's interface: the sending tenant's side
    /// held it (its CPU, where the frame's transmit and receive softirq
    /// run).
    Sender,
    /// Received by the host (the kernel stamps a frame as the host-side
    /// interface takes it, before its receive softirq delivers it to the
    /// relay's socket), not yet read by the relay: that softirq's delay
    /// and the relay thread's; the relay's time line tells them apart
    /// (asleep until its own timer: the frame was not in its socket yet).
    RelayRead,
    /// Eligible, the link busy with best-effort frames.
    BehindBestEffort,
    /// Eligible, the link busy with its own channel's earlier frames (the
    /// channel sent more, or in larger bursts, than the link gives it).
    BehindOwnChannel,
    /// Eligible, the link busy with other channels' frames.
    BehindOtherChannels,
    /// Eligible with the link free: the relay's thread had not handed it
    /// over (it was not running, or woke late).
    RelayLate,
    /// Handed over by the relay, not yet checked: the receiver's side.
    Receiver,
    /// No record of the frame's way: the relay's log lost it, or it never
    /// crossed the relay.
    NotRecorded,
}

impl PathPart {
    /// In words, for reports.
    pub fn words(self) -> &'static str {
        match self {
            PathPart::Sender => "held on the sender's side",
            PathPart::RelayRead => "received by the host, not yet read by the relay",
            PathPart::BehindBestEffort => "queued behind best effort",
            PathPart::BehindOwnChannel => "queued behind its own channel",
            PathPart::BehindOtherChannels => "queued behind other channels",
            PathPart::RelayLate => "the relay late to send it",
            PathPart::Receiver => "on the receiver's side",
            PathPart::NotRecorded => "not recorded",
        }
    }
}

/// Part of a miss's overrun.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissPart {
    pub part: PathPart,
    pub ns: u64,
}

/// Splits a miss's overrun (`checked_ns` − `deadline_ns`) into the parts of
/// its `path` that made it (see the module's comment), into `out` (cleared),
/// largest first; they add up to the overrun. `relative_ns`: the channel's
/// relative deadline. No path: all of it is [`PathPart::NotRecorded`].
pub fn explain_miss(
    path: Option<&FramePath>,
    deadline_ns: u64,
    relative_ns: u64,
    checked_ns: u64,
    out: &mut Vec<MissPart>,
) {
    out.clear();
    let overrun = checked_ns.saturating_sub(deadline_ns);
    if overrun == 0 {
        return;
    }
    let Some(p) = path else {
        out.push(MissPart {
            part: PathPart::NotRecorded,
            ns: overrun,
        });
        return;
    };
    let stamped = deadline_ns.saturating_sub(relative_ns);
    // Each stamp no earlier than the one before (the label keeps the
    // deadline to 10 us; a kernel stamp may trail the read by a hair).
    let received = p.received_ns.max(stamped);
    let read = p.read_ns.max(received);
    let eligible = p.eligible_ns.max(read);
    let handed = p.handed_ns.max(eligible);
    let checked = checked_ns.max(handed);
    let wait = handed - eligible;
    let a = &p.ahead;
    let ahead_sum = a.best_effort_ns + a.own_channel_ns + a.other_channels_ns;
    // Frames handed over early (the link's transmit queue) may be counted
    // for more than the wait they caused.
    let scale = |ns: u64| {
        if ahead_sum > wait {
            (ns as u128 * wait as u128 / ahead_sum as u128) as u64
        } else {
            ns
        }
    };
    let (mut be, mut own, mut other) = (
        scale(a.best_effort_ns),
        scale(a.own_channel_ns),
        scale(a.other_channels_ns),
    );
    if ahead_sum > wait {
        // What the scaling rounded off goes to the largest, so that none
        // of the wait reads as the relay's.
        let rest = wait - be - own - other;
        let largest = if be >= own && be >= other {
            &mut be
        } else if own >= other {
            &mut own
        } else {
            &mut other
        };
        *largest += rest;
    }
    let stretches = [
        (PathPart::Sender, received - stamped),
        (PathPart::RelayRead, read - received),
        (PathPart::BehindBestEffort, be),
        (PathPart::BehindOwnChannel, own),
        (PathPart::BehindOtherChannels, other),
        (PathPart::RelayLate, wait - be - own - other),
        (PathPart::Receiver, checked - handed),
    ];
    let mut slack = relative_ns.saturating_sub(eligible - read);
    let mut left = overrun;
    for (part, ns) in stretches {
        let spent = ns.min(slack);
        slack -= spent;
        let charged = (ns - spent).min(left);
        left -= charged;
        if charged > 0 {
            out.push(MissPart { part, ns: charged });
        }
    }
    if left > 0 {
        // The stamps the label truncates account for at most 10 us.
        out.push(MissPart {
            part: PathPart::NotRecorded,
            ns: left,
        });
    }
    out.sort_by(|x, y| y.ns.cmp(&x.ns).then(x.part.cmp(&y.part)));
}

/// A channel's misses and what their overruns were made of, summed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MissCauses {
    /// The channel's id.
    pub channel: u64,
    pub from: String,
    pub misses: u64,
    /// Misses whose frame the relay's log held.
    pub with_path: u64,
    pub overrun_ns: u64,
    /// The overruns' parts summed, largest first.
    pub parts: Vec<MissPart>,
    /// The largest overruns, each with its parts (at most [`WORST_MISSES`]).
    pub worst: Vec<ExplainedMiss>,
}

/// Misses kept per channel with their parts.
pub const WORST_MISSES: usize = 20;

/// One miss with its parts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExplainedMiss {
    /// When the receiver's check ran (CLOCK_MONOTONIC ns).
    pub checked_ns: u64,
    pub overrun_ns: u64,
    pub ip_id: u16,
    pub parts: Vec<MissPart>,
    /// The frame's way through the relay, where its log held it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<FramePath>,
}

impl ExplainedMiss {
    /// The stretches its overrun put on the relay's thread (CLOCK_MONOTONIC
    /// ns, [from, to)): the charged end of the wait to be read and of the
    /// wait to be handed over with the link free (slack is spent first,
    /// so the overrun is each stretch's end).
    pub fn relay_stretches(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.path.iter().flat_map(move |p| {
            self.parts.iter().filter_map(move |m| {
                let end = match m.part {
                    PathPart::RelayRead => p.read_ns,
                    PathPart::RelayLate => p.handed_ns.max(p.eligible_ns),
                    _ => return None,
                };
                Some((end.saturating_sub(m.ns), end))
            })
        })
    }
}

impl MissCauses {
    pub fn new(channel: u64, from: &str) -> MissCauses {
        MissCauses {
            channel,
            from: from.to_string(),
            ..MissCauses::default()
        }
    }

    /// Counts a miss and its parts in.
    pub fn add(&mut self, checked_ns: u64, ip_id: u16, path: Option<&FramePath>, parts: &[MissPart]) {
        let overrun: u64 = parts.iter().map(|p| p.ns).sum();
        self.misses += 1;
        self.with_path += u64::from(path.is_some());
        self.overrun_ns += overrun;
        self.sum_parts(parts);
        let smallest = self.worst.iter().map(|w| w.overrun_ns).min().unwrap_or(0);
        if self.worst.len() < WORST_MISSES || overrun > smallest {
            if self.worst.len() == WORST_MISSES {
                if let Some(i) = self.worst.iter().position(|w| w.overrun_ns == smallest) {
                    self.worst.swap_remove(i);
                }
            }
            self.worst.push(ExplainedMiss {
                checked_ns,
                overrun_ns: overrun,
                ip_id,
                parts: parts.to_vec(),
                path: path.copied(),
            });
            self.worst.sort_by_key(|w| std::cmp::Reverse(w.overrun_ns));
        }
    }

    fn sum_parts(&mut self, parts: &[MissPart]) {
        for p in parts {
            match self.parts.iter_mut().find(|q| q.part == p.part) {
                Some(q) => q.ns += p.ns,
                None => self.parts.push(*p),
            }
        }
        self.parts.sort_by(|x, y| y.ns.cmp(&x.ns).then(x.part.cmp(&y.part)));
    }

    /// Adds another run's misses of the same channel (the worst kept).
    pub fn merge(&mut self, other: &MissCauses) {
        self.misses += other.misses;
        self.with_path += other.with_path;
        self.overrun_ns += other.overrun_ns;
        self.sum_parts(&other.parts);
        self.worst.extend(other.worst.iter().cloned());
        self.worst.sort_by_key(|w| std::cmp::Reverse(w.overrun_ns));
        self.worst.truncate(WORST_MISSES);
    }

    /// "31 misses, 4.200 ms late in all: 78 % queued behind best effort,
    /// 20 % the relay late to send it, 0.4 % not recorded": parts under
    /// 0.5 % are left out, except what was not recorded.
    pub fn sentence(&self) -> String {
        let mut s = format!(
            "{} misses, {} late in all",
            self.misses,
            ontime_core::duration::format_ns(self.overrun_ns)
        );
        let total = self.overrun_ns.max(1) as f64;
        let mut first = true;
        for p in &self.parts {
            let share = 100.0 * p.ns as f64 / total;
            if share < 0.5 && p.part != PathPart::NotRecorded {
                continue;
            }
            s.push_str(if first { ": " } else { ", " });
            first = false;
            if share < 1.0 {
                s.push_str(&format!("{share:.1} % {}", p.part.words()));
            } else {
                s.push_str(&format!("{share:.0} % {}", p.part.words()));
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const US: u64 = 1_000;

    /// A frame of channel 3 stamped at 100 ms with a 5 ms deadline, read
    /// at once, eligible 1 ms later (the relay's delay).
    fn path(handed_ns: u64, ahead: LinkAhead) -> FramePath {
        FramePath {
            dscp: 3,
            ip_id: 7,
            received_ns: 100 * MS + 10 * US,
            read_ns: 100 * MS + 20 * US,
            eligible_ns: 101 * MS + 20 * US,
            handed_ns,
            ahead,
        }
    }

    fn parts(p: Option<&FramePath>, checked: u64) -> Vec<MissPart> {
        let mut out = Vec::new();
        explain_miss(p, 105 * MS, 5 * MS, checked, &mut out);
        let sum: u64 = out.iter().map(|p| p.ns).sum();
        assert_eq!(sum, checked - 105 * MS, "{out:?}");
        out
    }

    #[test]
    fn a_frame_queued_behind_best_effort_then_handed_late_blames_the_relay() {
        // 3.9 ms behind best effort (within the budget), then 1.5 ms with
        // the link free before the relay handed it over.
        let p = path(
            106 * MS + 420 * US,
            LinkAhead {
                best_effort_ns: 3_900 * US,
                ..LinkAhead::default()
            },
        );
        let out = parts(Some(&p), 106 * MS + 450 * US);
        assert_eq!(out[0].part, PathPart::RelayLate, "{out:?}");
        // 1.5 ms late to hand over less the 80 us of slack left.
        assert_eq!(out[0].ns, 1_420 * US, "{out:?}");
        assert!(out.iter().all(|p| p.part != PathPart::BehindBestEffort), "{out:?}");
    }

    #[test]
    fn a_channel_over_its_share_waits_behind_its_own_frames() {
        // 15 ms of its own frames ahead: past its deadline by 11 ms.
        let p = path(
            116 * MS + 20 * US,
            LinkAhead {
                own_channel_ns: 14_800 * US,
                best_effort_ns: 200 * US,
                ..LinkAhead::default()
            },
        );
        let out = parts(Some(&p), 116 * MS + 40 * US);
        assert_eq!(out[0].part, PathPart::BehindOwnChannel, "{out:?}");
        assert!(out[0].ns > 10 * MS, "{out:?}");
    }

    #[test]
    fn a_late_sender_and_a_slow_receiver_are_named() {
        // Received by the relay 4.5 ms after its stamp, then on time
        // through the relay, checked 1 ms after it left.
        let p = FramePath {
            dscp: 3,
            ip_id: 7,
            received_ns: 104 * MS + 500 * US,
            read_ns: 104 * MS + 500 * US,
            eligible_ns: 105 * MS + 500 * US,
            handed_ns: 105 * MS + 500 * US,
            ahead: LinkAhead::default(),
        };
        let out = parts(Some(&p), 106 * MS + 500 * US);
        // 1 ms slack (5 ms budget less 1 ms delay) less 4.5 ms: 0.5 ms the sender's, then 1 ms the receiver's.
        assert_eq!(
            out,
            vec![
                MissPart {
                    part: PathPart::Receiver,
                    ns: MS
                },
                MissPart {
                    part: PathPart::Sender,
                    ns: 500 * US
                },
            ]
        );
    }

    #[test]
    fn a_frame_the_log_lost_is_not_recorded() {
        assert_eq!(
            parts(None, 107 * MS),
            vec![MissPart {
                part: PathPart::NotRecorded,
                ns: 2 * MS
            }]
        );
    }

    #[test]
    fn more_ahead_than_the_wait_is_scaled_to_it() {
        // Frames handed over early count 8 ms of link for a 6 ms wait.
        let p = path(
            107 * MS + 20 * US,
            LinkAhead {
                best_effort_ns: 4 * MS,
                other_channels_ns: 4 * MS,
                ..LinkAhead::default()
            },
        );
        let out = parts(Some(&p), 107 * MS + 20 * US);
        assert!(out.iter().all(|p| p.part != PathPart::RelayLate), "{out:?}");
        // Nor by a nanosecond of rounding.
        let p = path(
            107 * MS + 20 * US,
            LinkAhead {
                best_effort_ns: 4 * MS + 1,
                own_channel_ns: 4 * MS + 1,
                other_channels_ns: 4 * MS + 1,
            },
        );
        let out = parts(Some(&p), 107 * MS + 20 * US);
        assert!(out.iter().all(|p| p.part != PathPart::RelayLate), "{out:?}");
    }

    #[test]
    fn the_log_and_the_index_find_a_frame_and_count_what_was_lost() {
        let log = PathLog::new(4);
        let mut pending: Vec<FramePath> = (0..6u16)
            .map(|i| FramePath {
                dscp: 1,
                ip_id: i,
                handed_ns: 10 * MS + u64::from(i),
                ..FramePath::default()
            })
            .collect();
        log.try_append(&mut pending);
        assert!(pending.is_empty());
        let mut index = PathIndex::default();
        index.follow(&log);
        assert_eq!(index.lost, 2);
        assert!(index.find(1, 1, 11 * MS).is_none(), "overwritten");
        assert_eq!(index.find(1, 5, 11 * MS).map(|p| p.ip_id), Some(5));
        assert!(index.find(1, 5, 10 * MS).is_none(), "checked before it was handed over");
        assert!(index.find(1, 5, 2_000 * MS).is_none(), "an IP id from another wrap");
    }

    #[test]
    fn causes_keep_the_worst_misses_and_sum_the_parts() {
        let mut c = MissCauses::new(3, "t0");
        for i in 0..30u64 {
            let parts = [
                MissPart {
                    part: PathPart::BehindOwnChannel,
                    ns: i * MS,
                },
                MissPart {
                    part: PathPart::RelayLate,
                    ns: MS,
                },
            ];
            c.add(i, i as u16, Some(&FramePath::default()), &parts);
        }
        assert_eq!(c.misses, 30);
        assert_eq!(c.worst.len(), WORST_MISSES);
        assert_eq!(c.worst[0].overrun_ns, 30 * MS);
        assert_eq!(c.parts[0].part, PathPart::BehindOwnChannel);
        assert_eq!(c.overrun_ns, c.parts.iter().map(|p| p.ns).sum::<u64>());
        assert!(c.sentence().starts_with("30 misses"), "{}", c.sentence());
    }

    #[test]
    fn the_relays_stretches_are_the_charged_ends_of_its_waits() {
        let p = path(106 * MS + 420 * US, LinkAhead::default());
        let mut c = MissCauses::new(3, "t0");
        let parts = [
            MissPart {
                part: PathPart::RelayLate,
                ns: MS,
            },
            MissPart {
                part: PathPart::RelayRead,
                ns: 5 * US,
            },
            MissPart {
                part: PathPart::Receiver,
                ns: 30 * US,
            },
        ];
        c.add(106 * MS + 450 * US, 7, Some(&p), &parts);
        let got: Vec<(u64, u64)> = c.worst[0].relay_stretches().collect();
        assert_eq!(
            got,
            vec![
                (105 * MS + 420 * US, 106 * MS + 420 * US),
                (100 * MS + 15 * US, 100 * MS + 20 * US)
            ]
        );
    }
}
