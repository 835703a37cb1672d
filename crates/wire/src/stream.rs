//! TCP byte streams put back together from captured segments, in sequence
//! order per direction, so a request split over segments is decoded whole
//! and one segment holding several requests yields each. A message is
//! stamped with the frame that carried its first byte.
//!
//! A decoder that has read a message's head may skip its body, however
//! long, without holding it. A segment already seen (a retransmission) is
//! skipped, an overlapping one trimmed. A gap (a segment the capture missed, or a stream first
//! seen in the middle) drops what was held and starts again at the new
//! segment: decoders resynchronise at the next message boundary they
//! recognise. Memory is bounded: at most [`MAX_FLOWS`] directions are
//! followed and at most [`MAX_HELD`] bytes of an incomplete message held
//! per direction (more is not a poll: it is dropped).

use std::collections::HashMap;
use std::net::SocketAddr;

/// Directions (source, destination) followed at most; past it, all are
/// forgotten and followed afresh.
pub const MAX_FLOWS: usize = 65_536;
/// Bytes of an incomplete message held per direction at most.
pub const MAX_HELD: usize = 8_192;
/// Bytes held over all directions at most: past it a direction's
/// incomplete message is dropped rather than held.
pub const MAX_HELD_TOTAL: usize = 16 << 20;

/// What a decoder made of the bytes it was given.
pub enum Decoded {
    /// The first n bytes were whole messages; the rest is the start of
    /// one still incomplete. Past the bytes given, n skips that many more
    /// of the stream (the rest of a body).
    Consumed(usize),
    /// The bytes are not this protocol's (out of step): drop them all.
    OutOfStep,
}

/// A TCP segment's control flags that bound a connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    /// A connection's first segment: its sequence number starts afresh.
    pub syn: bool,
    /// Its last (FIN) or an abort (RST): the direction is forgotten.
    pub end: bool,
}

#[derive(Default)]
struct Flow {
    /// The sequence number of the next byte expected.
    next: u32,
    /// An incomplete message's bytes so far, and the stamp of its first.
    held: Vec<u8>,
    held_ns: u64,
    /// Bytes still to skip (a body whose head was decoded).
    skip: usize,
}

/// Every followed direction's state.
#[derive(Default)]
pub struct Streams {
    flows: HashMap<(SocketAddr, SocketAddr), Flow>,
    /// Bytes held over all directions.
    held_total: usize,
    /// Gaps in a followed stream (segments the capture did not see).
    pub gaps: u64,
    /// Bytes dropped: held past [`MAX_HELD`], or out of step.
    pub dropped_bytes: u64,
}

/// What became of a segment's place in its stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Continuity {
    /// It followed what came before (or began the stream).
    InOrder,
    /// Bytes before it were not seen: what was in flight on the
    /// connection is no longer known.
    AfterGap,
}

impl Streams {
    /// A segment of `src` -> `dst` starting at sequence number `seq`,
    /// stamped `ns`: calls `decode(bytes, first_ns)` with the bytes now in
    /// order and not yet decoded (held ones first), `first_ns` the stamp
    /// of the first of them (a message after the first in them began in
    /// this segment); keeps what it leaves for the next segment.
    #[allow(clippy::too_many_arguments)]
    pub fn segment(
        &mut self,
        src: SocketAddr,
        dst: SocketAddr,
        seq: u32,
        flags: Flags,
        ns: u64,
        payload: &[u8],
        decode: impl FnMut(&[u8], u64) -> Decoded,
    ) -> Continuity {
        let key = (src, dst);
        if flags.syn {
            // A new connection on this address pair: its data starts after
            // the SYN's own sequence number.
            self.forget(key);
            self.flows.insert(
                key,
                Flow {
                    next: seq.wrapping_add(1),
                    ..Flow::default()
                },
            );
            if payload.is_empty() {
                return Continuity::InOrder;
            }
        }
        let continuity = self.place(key, seq.wrapping_add(u32::from(flags.syn)), ns, payload, decode);
        if flags.end {
            self.forget(key);
        }
        continuity
    }

    /// Drops a direction and what it held.
    fn forget(&mut self, key: (SocketAddr, SocketAddr)) {
        if let Some(f) = self.flows.remove(&key) {
            self.held_total -= f.held.len();
        }
    }

    fn place(
        &mut self,
        key: (SocketAddr, SocketAddr),
        seq: u32,
        ns: u64,
        payload: &[u8],
        mut decode: impl FnMut(&[u8], u64) -> Decoded,
    ) -> Continuity {
        if payload.is_empty() {
            return Continuity::InOrder;
        }
        if self.flows.len() >= MAX_FLOWS && !self.flows.contains_key(&key) {
            self.flows.clear();
            self.held_total = 0;
        }
        let flow = self.flows.entry(key).or_insert_with(|| Flow {
            next: seq,
            ..Flow::default()
        });
        let ahead = seq.wrapping_sub(flow.next) as i32;
        let end = seq.wrapping_add(payload.len() as u32);
        let mut continuity = Continuity::InOrder;
        let payload = if ahead < 0 {
            // Bytes already seen: a retransmission, whole or overlapping.
            let seen = ahead.unsigned_abs() as usize;
            if seen >= payload.len() {
                return continuity;
            }
            &payload[seen..]
        } else {
            if ahead > 0 {
                continuity = Continuity::AfterGap;
                self.gaps += 1;
                self.dropped_bytes += flow.held.len() as u64;
                self.held_total -= flow.held.len();
                flow.held = Vec::new();
                flow.skip = 0;
            }
            payload
        };
        flow.next = end;
        let skipped = flow.skip.min(payload.len());
        flow.skip -= skipped;
        let payload = &payload[skipped..];
        if payload.is_empty() {
            return continuity;
        }
        let mut rest: &[u8] = &[];
        let before = flow.held.len();
        if !flow.held.is_empty() {
            flow.held.extend_from_slice(payload);
            match decode(&flow.held, flow.held_ns) {
                Decoded::Consumed(n) => {
                    flow.skip = n.saturating_sub(flow.held.len());
                    flow.held.drain(..n.min(flow.held.len()));
                    // What is left began in this segment, unless nothing
                    // was consumed (the held message is still incomplete).
                    if n > 0 {
                        flow.held_ns = ns;
                    }
                    self.held_total = self.held_total - before + flow.held.len();
                    if flow.held.len() > MAX_HELD || self.held_total > MAX_HELD_TOTAL {
                        self.dropped_bytes += flow.held.len() as u64;
                        self.held_total -= flow.held.len();
                        flow.held = Vec::new();
                    } else if flow.held.capacity() > 2 * MAX_HELD {
                        // A long segment appended once keeps no memory.
                        flow.held.shrink_to(MAX_HELD);
                    }
                    return continuity;
                }
                Decoded::OutOfStep => {
                    // What was held was not the start of a message: the
                    // new bytes alone may be.
                    self.dropped_bytes += before as u64;
                    self.held_total -= before;
                    flow.held = Vec::new();
                }
            }
        }
        match decode(payload, ns) {
            Decoded::Consumed(n) => {
                flow.skip = n.saturating_sub(payload.len());
                rest = &payload[n.min(payload.len())..];
            }
            Decoded::OutOfStep => self.dropped_bytes += payload.len() as u64,
        }
        if rest.len() > MAX_HELD || self.held_total + rest.len() > MAX_HELD_TOTAL {
            self.dropped_bytes += rest.len() as u64;
        } else if !rest.is_empty() {
            flow.held.extend_from_slice(rest);
            flow.held_ns = ns;
            self.held_total += rest.len();
        }
        continuity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Messages of this test are lines ending in '\n'.
    fn lines(got: &mut Vec<(String, u64)>) -> impl FnMut(&[u8], u64) -> Decoded + '_ {
        move |b, ns| {
            let mut used = 0;
            while let Some(end) = b[used..].iter().position(|&c| c == b'\n') {
                got.push((String::from_utf8_lossy(&b[used..used + end]).into(), ns));
                used += end + 1;
            }
            Decoded::Consumed(used)
        }
    }

    const NONE: Flags = Flags { syn: false, end: false };

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn split_and_joined_messages_are_decoded_whole_with_their_first_stamp() {
        let (a, b) = (addr(1), addr(2));
        let mut s = Streams::default();
        let mut got = Vec::new();
        s.segment(a, b, 100, NONE, 1, b"one\ntw", lines(&mut got));
        s.segment(a, b, 106, NONE, 2, b"o\nthr", lines(&mut got));
        // A retransmission of bytes seen, then one overlapping them.
        s.segment(a, b, 106, NONE, 3, b"o\nthr", lines(&mut got));
        s.segment(a, b, 109, NONE, 4, b"hree\n", lines(&mut got));
        assert_eq!(got, vec![("one".into(), 1), ("two".into(), 1), ("three".into(), 2)]);
        assert_eq!((s.gaps, s.dropped_bytes), (0, 0));
    }

    #[test]
    fn a_gap_drops_the_held_bytes_and_starts_again() {
        let (a, b) = (addr(1), addr(2));
        let mut s = Streams::default();
        let mut got = Vec::new();
        s.segment(a, b, u32::MAX - 1, NONE, 1, b"hal", lines(&mut got));
        // Sequence numbers wrap; 10 bytes after the expected one: a gap.
        s.segment(a, b, 11, NONE, 2, b"next\n", lines(&mut got));
        assert_eq!(got, vec![("next".into(), 2)]);
        assert_eq!((s.gaps, s.dropped_bytes), (1, 3));
    }

    /// A decoder that reads a length and skips that many bytes, held or
    /// in segments to come.
    #[test]
    fn a_body_is_skipped_across_segments() {
        let (a, b) = (addr(1), addr(2));
        let mut s = Streams::default();
        let mut heads = Vec::new();
        // Messages: a digit n, then n bytes of body.
        let mut decode = |b: &[u8], ns: u64| {
            let mut used = 0;
            while let Some(&d) = b.get(used) {
                heads.push(ns);
                used += 1 + (d - b'0') as usize;
            }
            Decoded::Consumed(used)
        };
        s.segment(a, b, 0, NONE, 1, b"9abc", &mut decode);
        s.segment(a, b, 4, NONE, 2, b"def", &mut decode);
        s.segment(a, b, 7, NONE, 3, b"ghi2xy0", &mut decode);
        assert_eq!(heads, vec![1, 3, 3]);
        assert_eq!((s.gaps, s.dropped_bytes), (0, 0));
    }

    /// A new connection on the same addresses starts its own sequence;
    /// one ended is forgotten; held garbage does not take the next good
    /// message with it.
    #[test]
    fn connections_start_and_end_with_their_flags() {
        let (a, b) = (addr(1), addr(2));
        let mut s = Streams::default();
        let mut got = Vec::new();
        s.segment(a, b, 500, NONE, 1, b"one\n", lines(&mut got));
        s.segment(a, b, 504, Flags { syn: false, end: true }, 2, b"", lines(&mut got));
        // The same four-tuple again, its sequence far behind the last.
        let syn = Flags { syn: true, end: false };
        s.segment(a, b, 100, syn, 3, b"", lines(&mut got));
        s.segment(a, b, 101, NONE, 4, b"two\n", lines(&mut got));
        assert_eq!(got, vec![("one".into(), 1), ("two".into(), 4)]);
        assert_eq!((s.gaps, s.dropped_bytes), (0, 0));
        // Held bytes that turn out not to be a message (a tail after a
        // whole one): the new segment is decoded alone.
        let mut seen = Vec::new();
        let mut strict = |b: &[u8], ns: u64| {
            let mut used = 0;
            while used < b.len() {
                if b[used] != b'M' {
                    return if used == 0 {
                        Decoded::OutOfStep
                    } else {
                        Decoded::Consumed(used)
                    };
                }
                let Some(end) = b[used..].iter().position(|&c| c == b'\n') else {
                    break;
                };
                seen.push((String::from_utf8_lossy(&b[used..used + end]).to_string(), ns));
                used += end + 1;
            }
            Decoded::Consumed(used)
        };
        s.segment(a, b, 105, NONE, 5, b"Mhalf", &mut strict);
        s.segment(a, b, 110, NONE, 6, b"\nxx", &mut strict);
        s.segment(a, b, 113, NONE, 7, b"Mnext\n", &mut strict);
        assert_eq!(seen, vec![("Mhalf".to_string(), 5), ("Mnext".to_string(), 7)]);
        assert_eq!(s.dropped_bytes, 2, "the held 'xx' dropped");
    }

    #[test]
    fn held_bytes_are_bounded() {
        let (a, b) = (addr(1), addr(2));
        let mut s = Streams::default();
        let mut got = Vec::new();
        let big = vec![b'x'; 1000];
        let mut seq = 0u32;
        for i in 0..10 {
            s.segment(a, b, seq, NONE, i, &big, lines(&mut got));
            seq += 1000;
        }
        assert!(got.is_empty());
        assert_eq!(s.dropped_bytes, 9000, "held up to MAX_HELD, then dropped");
    }
}
