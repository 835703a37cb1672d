//! Document 003's real-time channels, the arithmetic only: what a channel
//! asks for, how its packets carry their deadline in a 20-bit MPLS label,
//! and admission on one link (the relay's bottleneck): EDF schedulability
//! for deadline channels, the guaranteed-service bound for reservation
//! channels, existing channels first. The data path (tc-BPF stamping, the
//! receiver's check), the relay's scheduler and the controller build on it.
use serde::{Deserialize, Serialize};

/// How a channel is served (document 003).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChannelKind {
    /// Soft: EDF; best effort goes first while no deadline is at risk; a
    /// miss raises the channel's priority.
    Deadline,
    /// Hard: WFQ with a reserved rate R; admission by the delay bound; a
    /// miss raises R.
    Reservation,
}

/// What a tenant asks for: a flow (matched by addresses and an optional
/// destination port), its traffic (token bucket: rate r, burst b; largest
/// packet M; peak rate p) and its deadline (end to end, one way).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChannelSpec {
    pub kind: ChannelKind,
    /// Token rate r, bits per second.
    pub rate_bps: f64,
    /// Bucket depth b, bytes.
    pub burst_bytes: f64,
    /// Largest packet M, bytes (IP packet with the label).
    pub max_packet_bytes: f64,
    /// Peak rate p, bits per second (the sender's link, when not given).
    pub peak_bps: Option<f64>,
    /// Deadline, ns after the packet leaves the sender.
    pub deadline_ns: u64,
}

/// One link's constants for the bound (RFC 2212's error terms): `c_tot`
/// bytes and `d_tot` ns per hop, summed over the path; on the lab's one
/// bottleneck C = one largest packet (the packet in service when ours
/// arrives), D = the relay's fixed delay.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// Link rate, bits per second.
    pub rate_bps: f64,
    /// Largest packet any flow (best effort included) sends, bytes.
    pub mtu_bytes: f64,
    pub c_tot_bytes: f64,
    pub d_tot_ns: f64,
    /// Share of the link channels may reserve in all (the rest stays for
    /// best effort and control traffic), 0..1.
    pub max_share: f64,
}

/// Document 003's bound for a reservation channel with reserved rate R
/// (bits/s), ns: D = (b-M)/R * (p-R)/(p-r) + (M+Ctot)/R + Dtot, where the
/// first term applies while p > R (a peak faster than the reservation);
/// with p <= R it is (M+Ctot)/R + Dtot (RFC 2212).
pub fn reservation_bound_ns(spec: &ChannelSpec, link: &Link, reserved_bps: f64) -> f64 {
    let bits = 8.0;
    let (b, m) = (spec.burst_bytes * bits, spec.max_packet_bytes * bits);
    let r = spec.rate_bps;
    let p = spec.peak_bps.unwrap_or(link.rate_bps);
    let big_r = reserved_bps;
    let tail = (m + link.c_tot_bytes * bits) / big_r * 1e9 + link.d_tot_ns;
    if p > big_r && p > r {
        (b - m).max(0.0) / big_r * (p - big_r) / (p - r) * 1e9 + tail
    } else {
        tail
    }
}

/// The least reserved rate (bits/s, at least r) whose bound meets the
/// deadline, if one up to `limit_bps` does. The bound falls as R grows.
pub fn rate_for_deadline(spec: &ChannelSpec, link: &Link, limit_bps: f64) -> Option<f64> {
    let d = spec.deadline_ns as f64;
    let lo0 = spec.rate_bps.max(1.0);
    if lo0 > limit_bps || reservation_bound_ns(spec, link, limit_bps) > d {
        return None;
    }
    if reservation_bound_ns(spec, link, lo0) <= d {
        return Some(lo0);
    }
    let (mut lo, mut hi) = (lo0, limit_bps);
    for _ in 0..100 {
        let mid = (lo + hi) / 2.0;
        if reservation_bound_ns(spec, link, mid) <= d {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi)
}

/// An admitted channel: its spec and, for reservation channels, the rate
/// reserved for it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Admitted {
    pub id: u32,
    pub spec: ChannelSpec,
    pub reserved_bps: Option<f64>,
}

/// Why a channel was refused.
#[derive(Clone, Debug, PartialEq)]
pub enum Refusal {
    /// Not a usable request (the message says which field).
    Invalid(String),
    /// The channels' rates (reserved rates for reservation channels, token
    /// rates for deadline ones) would pass the share of the link they may use.
    Capacity { needed_bps: f64, available_bps: f64 },
    /// No reserved rate within the link's remaining capacity meets the
    /// deadline.
    Bound { bound_ns: f64, deadline_ns: u64 },
    /// The path's fixed delay alone reaches the deadline.
    FixedDelay { delay_ns: u64, deadline_ns: u64 },
    /// EDF could not meet every deadline channel's deadline with this one
    /// added: at `at_ns` after a busy period starts the demand passes the link.
    Edf {
        at_ns: u64,
        demand_bits: f64,
        supply_bits: f64,
    },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Invalid(m) => write!(f, "{m}"),
            Refusal::Capacity {
                needed_bps,
                available_bps,
            } => write!(
                f,
                "link capacity: the channels would need {:.3} Mbit/s, {:.3} Mbit/s may be reserved",
                needed_bps / 1e6,
                available_bps / 1e6
            ),
            Refusal::Bound { bound_ns, deadline_ns } => write!(
                f,
                "delay bound: even with the remaining capacity reserved the bound is {:.3} ms, over the deadline of {:.3} ms",
                bound_ns / 1e6,
                *deadline_ns as f64 / 1e6
            ),
            Refusal::FixedDelay { delay_ns, deadline_ns } => write!(
                f,
                "fixed delay: the path alone takes {:.3} ms, the deadline is {:.3} ms",
                *delay_ns as f64 / 1e6,
                *deadline_ns as f64 / 1e6
            ),
            Refusal::Edf {
                at_ns,
                demand_bits,
                supply_bits,
            } => write!(
                f,
                "EDF: {:.3} ms into a busy period the deadline channels need {:.0} bits sent, the link sends {:.0}",
                *at_ns as f64 / 1e6,
                demand_bits,
                supply_bits
            ),
        }
    }
}

/// Checks a request before admission: positive rates and sizes, a deadline.
pub fn validate(spec: &ChannelSpec) -> Result<(), Refusal> {
    let bad = |m: &str| Err(Refusal::Invalid(m.into()));
    if !(spec.rate_bps.is_finite() && spec.rate_bps > 0.0) {
        return bad("rate must be above 0");
    }
    if !(spec.burst_bytes.is_finite() && spec.burst_bytes >= spec.max_packet_bytes) {
        return bad("burst must be at least one largest packet");
    }
    if !(spec.max_packet_bytes.is_finite() && spec.max_packet_bytes >= 64.0 && spec.max_packet_bytes <= 65_535.0) {
        return bad("max_packet must be 64 to 65535 bytes");
    }
    if spec.deadline_ns == 0 {
        return bad("deadline must be above 0");
    }
    if spec.deadline_ns > MAX_DEADLINE_NS {
        return Err(Refusal::Invalid(format!(
            "deadline {:.3} s is more than the label carries: at most {:.3} s (half the label's {:.2} s wrap)",
            spec.deadline_ns as f64 / 1e9,
            MAX_DEADLINE_NS as f64 / 1e9,
            (LABEL_WRAP * LABEL_UNIT_NS) as f64 / 1e9
        )));
    }
    if let Some(p) = spec.peak_bps {
        if !(p.is_finite() && p >= spec.rate_bps) {
            return bad("peak rate must be at least the rate");
        }
    }
    Ok(())
}

/// The EDF test for deadline channels sharing a link with reserved rate
/// `reserved_bps` taken off the top (reservation channels go first):
/// for every t, the bits whose deadlines fall by t after a busy period
/// starts, sum over channels of (b + r (t - d))+ for t >= d, plus one
/// largest packet already in service, must not pass what the rest of the
/// link sends by t. The demand is piecewise linear with breaks at the
/// deadlines, so checking each deadline and the long-run rate suffices.
pub fn edf_check(deadline: &[&ChannelSpec], link: &Link, reserved_bps: f64) -> Result<(), Refusal> {
    let supply_rate = link.rate_bps - reserved_bps;
    let rates: f64 = deadline.iter().map(|s| s.rate_bps).sum();
    if rates > supply_rate {
        return Err(Refusal::Capacity {
            needed_bps: rates + reserved_bps,
            available_bps: link.rate_bps,
        });
    }
    let blocking = link.mtu_bytes * 8.0;
    // The link's fixed delay (Dtot) comes off every deadline: what is left
    // is the time the scheduler has.
    let fixed = link.d_tot_ns.max(0.0) as u64;
    if let Some(s) = deadline.iter().find(|s| s.deadline_ns <= fixed) {
        return Err(Refusal::FixedDelay {
            delay_ns: fixed,
            deadline_ns: s.deadline_ns,
        });
    }
    let deadline: Vec<ChannelSpec> = deadline
        .iter()
        .map(|s| ChannelSpec {
            deadline_ns: s.deadline_ns - fixed,
            ..(*s).clone()
        })
        .collect();
    // Earliest first, so a refusal names the first instant that fails.
    let mut points: Vec<u64> = deadline.iter().map(|s| s.deadline_ns).collect();
    points.sort_unstable();
    points.dedup();
    for t in points {
        let tf = t as f64 / 1e9;
        let demand: f64 = blocking
            + deadline
                .iter()
                .filter(|s| s.deadline_ns <= t)
                .map(|s| s.burst_bytes * 8.0 + s.rate_bps * (t - s.deadline_ns) as f64 / 1e9)
                .sum::<f64>();
        let supply = supply_rate * tf;
        if demand > supply {
            return Err(Refusal::Edf {
                at_ns: t,
                demand_bits: demand,
                supply_bits: supply,
            });
        }
    }
    Ok(())
}

/// Admits `spec` on `link` next to `existing` (which always keep what they
/// have), or says why not. A reservation channel gets the least rate that
/// meets its deadline.
pub fn admit(existing: &[Admitted], spec: &ChannelSpec, link: &Link, id: u32) -> Result<Admitted, Refusal> {
    validate(spec)?;
    let limit = link.rate_bps * link.max_share;
    let reserved: f64 = existing.iter().filter_map(|a| a.reserved_bps).sum();
    let deadline_rates: f64 = existing
        .iter()
        .filter(|a| a.spec.kind == ChannelKind::Deadline)
        .map(|a| a.spec.rate_bps)
        .sum();
    let mut reserved_bps = None;
    match spec.kind {
        ChannelKind::Reservation => {
            let room = limit - reserved - deadline_rates;
            if spec.rate_bps > room {
                return Err(Refusal::Capacity {
                    needed_bps: reserved + deadline_rates + spec.rate_bps,
                    available_bps: limit,
                });
            }
            let Some(r) = rate_for_deadline(spec, link, room) else {
                return Err(Refusal::Bound {
                    bound_ns: reservation_bound_ns(spec, link, room.max(1.0)),
                    deadline_ns: spec.deadline_ns,
                });
            };
            reserved_bps = Some(r);
        }
        ChannelKind::Deadline => {
            if reserved + deadline_rates + spec.rate_bps > limit {
                return Err(Refusal::Capacity {
                    needed_bps: reserved + deadline_rates + spec.rate_bps,
                    available_bps: limit,
                });
            }
        }
    }
    let mut deadline: Vec<&ChannelSpec> = existing
        .iter()
        .filter(|a| a.spec.kind == ChannelKind::Deadline)
        .map(|a| &a.spec)
        .collect();
    if spec.kind == ChannelKind::Deadline {
        deadline.push(spec);
    }
    edf_check(&deadline, link, reserved + reserved_bps.unwrap_or(0.0))?;
    Ok(Admitted {
        id,
        spec: spec.clone(),
        reserved_bps,
    })
}

/// The deadline in an MPLS label: a clock both ends share (CLOCK_REALTIME
/// kept in step by PTP between hosts; one host's CLOCK_MONOTONIC in the
/// lab) in units of [`LABEL_UNIT_NS`], modulo [`LABEL_WRAP`], plus 16
/// (labels 0-15 are reserved). A receiver takes the instant nearest its own
/// clock with that residue, so deadlines decode unambiguously while they
/// lie within half a wrap (5.24 s) of the receiver's now.
pub const LABEL_UNIT_NS: u64 = 10_000;
/// Label values usable for deadlines: 2^20 - 16.
pub const LABEL_WRAP: u64 = (1 << 20) - 16;
/// The longest deadline a label carries unambiguously: a packet checked
/// before its deadline decodes to the nearest instant only within half a
/// wrap of the receiver's now.
pub const MAX_DEADLINE_NS: u64 = LABEL_WRAP / 2 * LABEL_UNIT_NS;

pub fn encode_deadline(deadline_ns: u64) -> u32 {
    (16 + (deadline_ns / LABEL_UNIT_NS) % LABEL_WRAP) as u32
}

/// The deadline a label carries, as the instant nearest `now_ns`; None for
/// a reserved label value (0-15) or one beyond 20 bits.
pub fn decode_deadline(label: u32, now_ns: u64) -> Option<u64> {
    if !(16..1 << 20).contains(&label) {
        return None;
    }
    let residue = (label - 16) as i64;
    let now_units = (now_ns / LABEL_UNIT_NS) as i64;
    let wrap = LABEL_WRAP as i64;
    let base = now_units - now_units.rem_euclid(wrap);
    // Candidates in this wrap and its neighbours; take the nearest.
    let best = [base - wrap, base, base + wrap]
        .into_iter()
        .map(|b| b + residue)
        .filter(|u| *u >= 0)
        .min_by_key(|u| (u - now_units).abs())?;
    Some(best as u64 * LABEL_UNIT_NS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link() -> Link {
        Link {
            rate_bps: 100e6,
            mtu_bytes: 1500.0,
            c_tot_bytes: 1500.0,
            d_tot_ns: 0.0,
            max_share: 0.9,
        }
    }

    fn flow(kind: ChannelKind, mbit: f64, burst: f64, deadline_ms: u64) -> ChannelSpec {
        ChannelSpec {
            kind,
            rate_bps: mbit * 1e6,
            burst_bytes: burst,
            max_packet_bytes: 1500.0,
            peak_bps: Some(100e6),
            deadline_ns: deadline_ms * 1_000_000,
        }
    }

    #[test]
    fn the_bound_matches_a_hand_computation() {
        // b = 15000 B, M = 1500 B, r = 2 Mbit/s, p = 100 Mbit/s, R = 4 Mbit/s,
        // Ctot = 1500 B, Dtot = 0:
        // (120000 - 12000)/4e6 * (100e6 - 4e6)/(100e6 - 2e6) + (12000 + 12000)/4e6
        // = 0.027 * 0.979592 + 0.006 = 0.0324490 s.
        let s = flow(ChannelKind::Reservation, 2.0, 15000.0, 50);
        let d = reservation_bound_ns(&s, &link(), 4e6);
        assert!((d - 32_448_979.6).abs() < 1.0, "{d}");
        // p <= R: only (M + Ctot)/R + Dtot = 24000 bits / 100e6 = 240 us.
        let d = reservation_bound_ns(&s, &link(), 100e6);
        assert!((d - 240_000.0).abs() < 1e-6, "{d}");
        // With Dtot the relay's 10 ms added as is.
        let l = Link {
            d_tot_ns: 10e6,
            ..link()
        };
        assert!((reservation_bound_ns(&s, &l, 100e6) - 10_240_000.0).abs() < 1e-6);
    }

    #[test]
    fn the_least_rate_meeting_a_deadline_is_found() {
        let s = flow(ChannelKind::Reservation, 2.0, 15000.0, 10);
        let r = rate_for_deadline(&s, &link(), 90e6).unwrap();
        let d = reservation_bound_ns(&s, &link(), r);
        assert!(d <= 10e6 && d > 10e6 * 0.999, "R {r}: bound {d}");
        // A loose deadline needs only the token rate.
        let loose = flow(ChannelKind::Reservation, 2.0, 15000.0, 1000);
        assert_eq!(rate_for_deadline(&loose, &link(), 90e6), Some(2e6));
        // Impossible within 1 Mbit/s.
        assert_eq!(rate_for_deadline(&s, &link(), 1e6), None);
    }

    #[test]
    fn admission_keeps_existing_channels_and_says_why() {
        let l = link();
        // Document 003's flows A and B scaled: 2 Mbit/s, 5 and 10 ms.
        let a = admit(&[], &flow(ChannelKind::Deadline, 2.0, 3000.0, 5), &l, 1).unwrap();
        let b = admit(
            std::slice::from_ref(&a),
            &flow(ChannelKind::Deadline, 2.0, 3000.0, 10),
            &l,
            2,
        )
        .unwrap();
        let have = vec![a, b];
        // 80 Mbit/s more passes the 90 % share.
        let big = flow(ChannelKind::Deadline, 88.0, 3000.0, 20);
        match admit(&have, &big, &l, 3) {
            Err(Refusal::Capacity {
                needed_bps,
                available_bps,
            }) => {
                assert_eq!(needed_bps, 92e6);
                assert_eq!(available_bps, 90e6);
            }
            other => panic!("{other:?}"),
        }
        // A burst that cannot leave by its deadline: 1 MB in 1 ms at 100 Mbit/s.
        let bursty = flow(ChannelKind::Deadline, 1.0, 1_000_000.0, 1);
        assert!(matches!(
            admit(&have, &bursty, &l, 3),
            Err(Refusal::Edf { at_ns: 1_000_000, .. })
        ));
        // A reservation channel gets the least rate meeting its bound.
        let res = admit(&have, &flow(ChannelKind::Reservation, 2.0, 15000.0, 10), &l, 3).unwrap();
        let r = res.reserved_bps.unwrap();
        assert!(r > 2e6 && reservation_bound_ns(&res.spec, &l, r) <= 10e6);
        assert!(Refusal::Capacity {
            needed_bps: 92e6,
            available_bps: 90e6
        }
        .to_string()
        .contains("92.000 Mbit/s"));
    }

    #[test]
    fn the_edf_test_counts_the_packet_in_service() {
        // One channel: 1500 B burst, deadline 240 us on 100 Mbit/s: demand
        // at 240 us = 12000 (burst) + 12000 (a best-effort packet already
        // sending) = 24000 bits = supply 100e6 * 240e-6: just fits.
        let l = link();
        let s = ChannelSpec {
            burst_bytes: 1500.0,
            deadline_ns: 240_000,
            ..flow(ChannelKind::Deadline, 1.0, 1500.0, 1)
        };
        assert!(edf_check(&[&s], &l, 0.0).is_ok());
        let tighter = ChannelSpec {
            deadline_ns: 239_000,
            ..s.clone()
        };
        assert!(edf_check(&[&tighter], &l, 0.0).is_err());
    }

    #[test]
    fn bad_requests_are_named() {
        let mut s = flow(ChannelKind::Deadline, 2.0, 3000.0, 5);
        s.rate_bps = -1.0;
        assert_eq!(validate(&s), Err(Refusal::Invalid("rate must be above 0".into())));
        let mut s = flow(ChannelKind::Deadline, 2.0, 3000.0, 5);
        s.deadline_ns = 0;
        assert!(matches!(validate(&s), Err(Refusal::Invalid(m)) if m.contains("deadline")));
        // Beyond half the label's wrap the receiver would decode another instant.
        for d in [MAX_DEADLINE_NS + 1, 10_000_000_000, u64::MAX] {
            s.deadline_ns = d;
            let e = validate(&s).unwrap_err().to_string();
            assert!(e.contains("at most 5.243 s"), "{e}");
        }
        s.deadline_ns = MAX_DEADLINE_NS;
        assert!(validate(&s).is_ok());
    }

    #[test]
    fn labels_carry_deadlines_across_the_wrap() {
        let wrap_ns = LABEL_WRAP * LABEL_UNIT_NS;
        for now in [
            0u64,
            5_000_000_000,
            wrap_ns - 1_000_000,
            wrap_ns + 3,
            123 * wrap_ns + 77_777_777,
        ] {
            for ahead in [0u64, 10_000, 5_000_000, 2_000_000_000] {
                let d = now + ahead;
                let l = encode_deadline(d);
                assert!((16..1 << 20).contains(&l));
                let back = decode_deadline(l, now).unwrap();
                assert_eq!(back, d / LABEL_UNIT_NS * LABEL_UNIT_NS, "now {now} ahead {ahead}");
            }
            // A deadline already past (a late packet) decodes as past.
            if now >= 3_000_000 {
                let back = decode_deadline(encode_deadline(now - 3_000_000), now).unwrap();
                assert!(back < now);
            }
        }
        assert_eq!(decode_deadline(3, 0), None, "reserved label");
        assert_eq!(decode_deadline(1 << 20, 0), None);
    }

    #[test]
    fn the_fixed_delay_comes_off_every_deadline() {
        let link = Link {
            rate_bps: 100e6,
            mtu_bytes: 1500.0,
            c_tot_bytes: 1500.0,
            d_tot_ns: 2_000_000.0,
            max_share: 0.9,
        };
        let mut s = ChannelSpec {
            kind: ChannelKind::Deadline,
            rate_bps: 1e6,
            burst_bytes: 1500.0,
            max_packet_bytes: 1500.0,
            peak_bps: None,
            deadline_ns: 2_000_000,
        };
        assert_eq!(
            admit(&[], &s, &link, 1),
            Err(Refusal::FixedDelay {
                delay_ns: 2_000_000,
                deadline_ns: 2_000_000
            })
        );
        // 2.2 ms leaves 200 us: one MTU in service plus the 1500-byte burst
        // take 240 us at 100 Mbit/s: refused; 2.3 ms leaves 300 us: admitted.
        s.deadline_ns = 2_200_000;
        assert!(matches!(admit(&[], &s, &link, 1), Err(Refusal::Edf { .. })));
        s.deadline_ns = 2_300_000;
        assert!(admit(&[], &s, &link, 1).is_ok());
    }
}
