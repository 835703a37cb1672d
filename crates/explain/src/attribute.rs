//! Splits one late event's lateness, [planned, actual) of a probe thread,
//! into causes read off a [`Timeline`] (the rules are docs/explain.md's,
//! "How a late event is decomposed"). The probe's spans over the interval
//! are walked in time order and each stretch gets exactly one cause, so
//! the segments tile the interval and add up to the lateness; time the
//! time line cannot account for is unexplained.
//!
//! - running on CPU c: interrupt time on c is interrupts, the rest own work;
//! - queued on CPU c: interrupt time on c is interrupts; behind a thread,
//!   waited for a CPU (split by occupant, with the time another allowed
//!   CPU idled), or throttled for a real-time probe behind a non-real-time
//!   occupant past [`RT_PREEMPT_GRACE_NS`]; on an idle c, a late timer
//!   (idle exit); behind an unknown occupant, unexplained;
//! - asleep: uninterruptibly, blocked on I/O; in the sleep it began before
//!   its planned time, a late timer; in a sleep begun after it, blocked on
//!   its waker (a thread, or an interrupt); the wake-up that ends the sleep
//!   names the culprit;
//! - unknown (before its first event, after a lost one), dead, or outside
//!   the time line: unexplained.
//!
//! A request's arrival at the gateway ([`explain_arrival`]) adds the host
//! I/O path: the time its frame was held past its due time, read off the
//! relay thread's time line.
//!
//! Explaining allocates nothing but the explanation's segments
//! ([`explain_into`] reuses them).

use crate::cause::{BlockedOn, Cause, Explanation, Gap, Irq, Late, Segment, Side, Who, UNKNOWN_TID};
use crate::timeline::{Probe, Slice, Span, State, Timeline, IDLE_TID};
use ontime_core::late::{GatewayStamps, PathNominal};

/// A real-time thread woken onto a CPU running a fair task (or idle)
/// preempts it within microseconds; queued longer than this behind one,
/// its class was throttled (RT throttling: no RT runtime left).
pub const RT_PREEMPT_GRACE_NS: u64 = 50_000;

/// The causes of `probe`'s lateness from `planned_ns` to `actual_ns`
/// (CLOCK_MONOTONIC, as the recording stamps events). An event on time or
/// early has no segments.
pub fn explain(tl: &Timeline, probe: &Probe, planned_ns: u64, actual_ns: u64) -> Explanation {
    let mut x = Explanation::default();
    explain_into(tl, probe, planned_ns, actual_ns, &mut x);
    x
}

/// [`explain`] into `out`, reusing its vector (a flight recorder
/// explaining event after event).
pub fn explain_into(tl: &Timeline, probe: &Probe, planned_ns: u64, actual_ns: u64, out: &mut Explanation) {
    out.reset(probe.tid, planned_ns, actual_ns);
    let spans = &tl.lines[probe.line].spans;
    tl.line_walk(probe.line, planned_ns, actual_ns, |a, e, span| match span {
        Some(i) => classify(tl, probe, spans, i, planned_ns, a, e, out),
        None => out.push(a, e, tl.side, Cause::Unexplained { why: Gap::NotRecorded }),
    });
}

/// A request's arrival at the gateway, late by (arrived − planned) beyond
/// the host I/O path's nominal one-way delay (`nominal_ns`: the relay's
/// setting); `actual_ns` is arrived − nominal (as a crawl keeps it). [planned, sent) is the probe's send lag, explained on its own
/// time line as [`explain`] does. The rest, (arrived − sent) − nominal, is
/// the frame held in the path past when it was due to leave (sent +
/// nominal): each stretch of [due, arrived) is read off the relay thread's
/// time line (`relay`; None: not recorded) and placed nominal earlier, so
/// the segments tile [planned, actual):
///
/// - the relay running: busy with other frames, [`BlockedOn::RelayQueue`]
///   naming it;
/// - the relay queued on CPU c: interrupts on c, else waiting for c behind
///   its occupant (the frame waited because the relay did);
/// - the relay asleep: it held the frame without running (stopped, or its
///   timer late), [`BlockedOn::RelayWait`] naming it;
/// - unknown: unexplained.
///
/// In the send lag, a stretch the probe slept past its planned time with
/// the poll due (blocked on a waker) is the relay's too, read at the same
/// time: a crawler that cannot send is short of a connection, and its
/// connections cross the relay.
pub fn explain_arrival(
    tl: &Timeline,
    probe: &Probe,
    relay: Option<&Probe>,
    planned_ns: u64,
    sent_ns: u64,
    actual_ns: u64,
    nominal_ns: u64,
) -> Explanation {
    let actual = actual_ns.max(planned_ns);
    let sent = sent_ns.clamp(planned_ns, actual);
    let send_lag = explain(tl, probe, planned_ns, sent);
    let mut out = Explanation::default();
    out.reset(probe.tid, planned_ns, actual);
    let side = tl.side;
    let not_recorded = Cause::Unexplained { why: Gap::NotRecorded };
    // The send lag: a crawler asleep past its planned time with a poll
    // due could not send it, for want of a connection, and its
    // connections cross the relay: those stretches are the relay's.
    let short_of_connection = |c: &Cause| {
        matches!(
            c,
            Cause::Blocked {
                on: BlockedOn::Interrupt | BlockedOn::Thread,
                ..
            }
        )
    };
    read_waits_off_relay(tl, &send_lag, relay, 0, short_of_connection, None, &mut out);
    let Some(relay) = relay else {
        out.push(sent, actual, side, not_recorded);
        return out;
    };
    // The frame due out at sent + nominal: each stretch of [due, arrived)
    // placed nominal earlier.
    relay_walk(tl, relay, sent + nominal_ns, actual + nominal_ns, nominal_ns, &mut out);
    out
}

/// A request's answer, back late by (back − planned) beyond the path's
/// nominal round trip (`path`); `actual_ns` is back − that round trip (as
/// a crawl keeps it), `gateway` the gateway's receive and answer stamps.
/// The lateness is the legs' excesses in order, so the segments tile
/// [planned, actual):
///
/// - to the gateway: the arrival, as [`explain_arrival`] explains it, up to
///   receive − one way;
/// - the gateway: (answered − received) beyond its controller delay,
///   [`BlockedOn::Gateway`] (its own stamps: what it did meanwhile is not
///   recorded here);
/// - the way back: the rest, the stretch of the same length that ends
///   when the answer was back, on the probe's time line: the probe asleep
///   (its answer not in) is the relay's, read off its time line as on the
///   way out; the probe queued or running is its own causes (it had the
///   answer and had not got to it).
#[allow(clippy::too_many_arguments)]
pub fn explain_answer(
    tl: &Timeline,
    probe: &Probe,
    relay: Option<&Probe>,
    planned_ns: u64,
    sent_ns: u64,
    gateway: GatewayStamps,
    actual_ns: u64,
    path: PathNominal,
) -> Explanation {
    let actual = actual_ns.max(planned_ns);
    let arrived = gateway
        .recv_ns
        .saturating_sub(path.one_way_ns)
        .clamp(planned_ns, actual);
    let mut out = explain_arrival(tl, probe, relay, planned_ns, sent_ns, arrived, path.one_way_ns);
    out.actual_ns = actual;
    let held = gateway
        .answered_ns
        .saturating_sub(gateway.recv_ns)
        .saturating_sub(path.gateway_ns)
        .min(actual - arrived);
    let gateway_cause = Cause::Blocked {
        on: BlockedOn::Gateway,
        by: Who::Unknown,
        cpu: None,
        irq: None,
    };
    out.push(arrived, arrived + held, tl.side, gateway_cause);
    let from = arrived + held;
    if from >= actual {
        return out;
    }
    // The way back: the last (actual − from) before the answer was back.
    let shift = path.round_trip_ns();
    let (back_from, back) = (from + shift, actual + shift);
    let own = explain(tl, probe, back_from, back);
    let awaiting_answer = |c: &Cause| {
        matches!(
            c,
            Cause::Blocked {
                on: BlockedOn::Interrupt | BlockedOn::Thread,
                ..
            } | Cause::LateTimer { how: Late::Timer, .. }
        )
    };
    // Asleep for its answer is no cause of the probe's own: unrecorded
    // without the relay's time line.
    let unrecorded = Cause::Unexplained { why: Gap::NotRecorded };
    read_waits_off_relay(tl, &own, relay, shift, awaiting_answer, Some(unrecorded), &mut out);
    out
}

/// `own`'s segments, the probe's own time line `shift` later than the
/// stretch they explain, into `out` placed `shift` earlier: those in which
/// the probe waited on the network (`waiting`) are the relay's, read off
/// its time line ([`relay_walk`]); without it they stay as they are, or
/// become `unrecorded` when given. Any other stands.
fn read_waits_off_relay(
    tl: &Timeline,
    own: &Explanation,
    relay: Option<&Probe>,
    shift: u64,
    waiting: impl Fn(&Cause) -> bool,
    unrecorded: Option<Cause>,
    out: &mut Explanation,
) {
    for seg in &own.segments {
        let (a, e) = (seg.start_ns - shift, seg.end_ns - shift);
        match relay {
            Some(r) if waiting(&seg.cause) => relay_walk(tl, r, seg.start_ns, seg.end_ns, shift, out),
            None if waiting(&seg.cause) => out.push(a, e, seg.side, unrecorded.unwrap_or(seg.cause)),
            _ => out.push(a, e, seg.side, seg.cause),
        }
    }
}

/// A guest probe's explanation (`guest`, on the guest's time line placed
/// on the host's clock) split by the host's: each stretch in which the
/// guest's scheduler had the probe running, queued (behind a guest
/// thread, or on an idle vCPU), in interrupts, throttled or late in its
/// timer on guest CPU c is read off the host time line of c's vCPU
/// thread (`vcpu_of(c)`), as [`explain`] reads a probe's (a guest thread
/// the guest saw run across a stretch ran only while its vCPU did): the vCPU
/// thread queued on a host CPU is waiting for it behind the host's
/// occupant (or its interrupts), asleep is the host's wake-up of it (late
/// timer, or its waker, whose own stretch is read the same way when the
/// host watched it: a TCG vCPU's timers come from QEMU's main loop), each
/// told on the host's side; the vCPU thread
/// running, or not recorded, leaves the guest's cause (docs/explain.md,
/// "Guest and host"). A guest's blocked stretches stand. The segments
/// still tile the lateness.
///
/// With the guest's time line (`guest_tl`), a late timer's stretches where
/// the guest's CPU idled and its TCG vCPU thread ran on the host are split
/// by the thread's stack samples into `emulation` and the guest's cause.
pub fn split_by_host(
    guest: &Explanation,
    host: &Timeline,
    guest_tl: Option<&Timeline>,
    vcpu_of: impl Fn(u16) -> Option<Probe>,
) -> Explanation {
    split_by_host_as(guest, host, guest_tl, vcpu_of, false)
}

/// [`split_by_host`] for a guest thread waiting for messages (a flow's
/// receiver): its stretches asleep with the message not in, woken from an
/// interrupt on guest CPU c, are read off c's vCPU thread too. The vCPU
/// queued on the host (behind its occupant, on an idle CPU, or stolen)
/// or asleep in the host's kernel held the delivery up there; asleep
/// interruptibly (halted), whoever woke it, the guest's cause stands:
/// the message had not reached the guest.
pub fn split_by_host_waiting(
    guest: &Explanation,
    host: &Timeline,
    guest_tl: Option<&Timeline>,
    vcpu_of: impl Fn(u16) -> Option<Probe>,
) -> Explanation {
    split_by_host_as(guest, host, guest_tl, vcpu_of, true)
}

fn split_by_host_as(
    guest: &Explanation,
    host: &Timeline,
    guest_tl: Option<&Timeline>,
    vcpu_of: impl Fn(u16) -> Option<Probe>,
    waiting: bool,
) -> Explanation {
    let mut out = Explanation::default();
    out.reset(guest.tid, guest.planned_ns, guest.actual_ns);
    for seg in &guest.segments {
        // Whatever the guest's scheduler says ran on guest CPU c ran only
        // while c's vCPU thread did.
        let cpu = match seg.cause {
            Cause::OwnWork { cpu }
            | Cause::LateTimer { cpu: Some(cpu), .. }
            | Cause::WaitedForCpu { cpu, .. }
            | Cause::Interrupts { cpu, .. }
            | Cause::Throttled { cpu, .. }
            | Cause::Stolen { cpu }
                if seg.side == crate::cause::Side::Guest =>
            {
                Some(cpu)
            }
            Cause::Blocked {
                on: BlockedOn::Interrupt,
                cpu: Some(cpu),
                ..
            } if waiting && seg.side == crate::cause::Side::Guest => Some(cpu),
            _ => None,
        };
        let Some(vcpu) = cpu.and_then(&vcpu_of) else {
            out.push(seg.start_ns, seg.end_ns, seg.side, seg.cause);
            continue;
        };
        // A receiver's wait for a message not in yet: where the vCPU slept,
        // whoever woke it (QEMU's main loop waiting at its tap, a sibling
        // vCPU's IPI) does not say where the message was: not followed.
        let awaiting = matches!(
            seg.cause,
            Cause::Blocked {
                on: BlockedOn::Interrupt,
                ..
            }
        );
        let on_host = explain(host, &vcpu, seg.start_ns, seg.end_ns);
        for h in &on_host.segments {
            if !awaiting && via_waker(host, &vcpu, h, &mut out) {
                continue;
            }
            match (h.cause, seg.cause) {
                // The guest's CPU had nothing to run and its vCPU thread
                // ran on the host: QEMU's own work where its samples say
                // so (emulation), the guest's code elsewhere.
                (
                    Cause::OwnWork { cpu },
                    Cause::LateTimer {
                        cpu: Some(guest_cpu), ..
                    },
                ) => match guest_tl {
                    Some(g) => g.cpu_walk(guest_cpu, h.start_ns, h.end_ns, |p, q, slice, irq| {
                        if slice.tid == IDLE_TID && irq.is_none() {
                            emulation_split(host, vcpu.tid, cpu, (p, q), seg, &mut out)
                        } else {
                            out.push(p, q, seg.side, seg.cause)
                        }
                    }),
                    None => out.push(h.start_ns, h.end_ns, seg.side, seg.cause),
                },
                // The vCPU ran the guest, or the host does not say: the
                // guest's cause stands.
                (Cause::OwnWork { .. } | Cause::Unexplained { .. }, _) => {
                    out.push(h.start_ns, h.end_ns, seg.side, seg.cause)
                }
                // A message not in yet while the vCPU slept interruptibly
                // (halted, or woken by another thread): it had not reached
                // the guest. Asleep in the host's kernel (D state) or
                // queued on an idle CPU stays the host's.
                (
                    Cause::LateTimer { how: Late::Timer, .. }
                    | Cause::Blocked {
                        on: BlockedOn::Interrupt | BlockedOn::Thread,
                        ..
                    },
                    Cause::Blocked {
                        on: BlockedOn::Interrupt,
                        ..
                    },
                ) => out.push(h.start_ns, h.end_ns, seg.side, seg.cause),
                // The guest had the probe running and its vCPU thread
                // slept on the host: blocked there (QEMU's lock, the
                // host's scheduling), its waker named; not a timer.
                (Cause::LateTimer { by, cpu, .. }, Cause::OwnWork { .. }) => out.push(
                    h.start_ns,
                    h.end_ns,
                    h.side,
                    Cause::Blocked {
                        on: BlockedOn::Thread,
                        by,
                        cpu,
                        irq: None,
                    },
                ),
                _ => out.push(h.start_ns, h.end_ns, h.side, h.cause),
            }
        }
    }
    out
}

/// A TCG vCPU thread running on host CPU `cpu` over [a, e) while the
/// guest's CPU idled (`guest`, a late timer): each of its stack samples
/// stands for the sampling period before it, `emulation` where it was in
/// QEMU's own code, the guest's cause where it ran translated guest code;
/// time no sample covers keeps the guest's cause.
fn emulation_split(host: &Timeline, vcpu: u32, cpu: u16, (a, e): (u64, u64), guest: &Segment, out: &mut Explanation) {
    let Some(samples) = host.vcpu_samples(vcpu) else {
        out.push(a, e, guest.side, guest.cause);
        return;
    };
    let emulation = Cause::Emulation { cpu, vcpu };
    let mut at = a;
    let first = samples.at.partition_point(|&(t, _)| t <= a);
    for &(t, qemu) in &samples.at[first..] {
        let p = t.saturating_sub(samples.period_ns).max(at);
        if p >= e {
            break;
        }
        let q = t.min(e);
        out.push(at, p, guest.side, guest.cause);
        if qemu {
            out.push(p, q, Side::Host, emulation);
        } else {
            out.push(p, q, guest.side, guest.cause);
        }
        at = q.max(at);
        if t >= e {
            break;
        }
    }
    out.push(at, e, guest.side, guest.cause);
}

/// A vCPU thread's stretch `h` on the host, asleep until another
/// recorded thread of the host woke it (a TCG vCPU's timers come from
/// QEMU's main loop), told as that thread's own stretch: its running is
/// the vCPU waiting on its work. False, with nothing pushed, when no other
/// thread woke it.
fn via_waker(host: &Timeline, vcpu: &Probe, h: &Segment, out: &mut Explanation) -> bool {
    let waker = match h.cause {
        Cause::LateTimer {
            how: Late::Timer,
            by: Who::Thread(w),
            ..
        }
        | Cause::Blocked {
            on: BlockedOn::Thread,
            by: Who::Thread(w),
            ..
        } if w != vcpu.tid => host.probe(w).ok(),
        _ => None,
    };
    let Some(w) = waker else {
        return false;
    };
    for ws in &explain(host, &w, h.start_ns, h.end_ns).segments {
        let cause = match ws.cause {
            Cause::OwnWork { cpu } => Cause::Blocked {
                on: BlockedOn::Thread,
                by: Who::Thread(w.tid),
                cpu: Some(cpu),
                irq: None,
            },
            c => c,
        };
        out.push(ws.start_ns, ws.end_ns, ws.side, cause);
    }
    true
}

/// A crawl's kept event on the path: an answer where it carries the
/// gateway's stamps ([`explain_answer`]), else an arrival
/// ([`explain_arrival`]); None without a sent time.
pub fn explain_on_path(
    tl: &Timeline,
    probe: &Probe,
    relay: Option<&Probe>,
    e: &ontime_core::late::ProbeEvent,
    path: PathNominal,
) -> Option<Explanation> {
    let sent = e.sent_ns?;
    Some(match e.gateway {
        Some(g) => explain_answer(tl, probe, relay, e.planned_ns, sent, g, e.actual_ns, path),
        None => explain_arrival(tl, probe, relay, e.planned_ns, sent, e.actual_ns, path.one_way_ns),
    })
}

/// A datagram late at its receiver (`receiver`, a thread waiting for
/// messages): `planned_ns` is its send time plus the flow's deadline,
/// `actual_ns` the receiver's return from recv, `received_ns` the kernel's
/// receive stamp of it at the receiver. Its path, in order: the sender,
/// from its stamp (`sent_ns`) until the datagram left the sending thread
/// (the thread's next sleep; `sender` None: at once); the host relay,
/// from there to the receive stamp, of which `nominal_ns` (the relay's
/// set delay) is the path's own; the receiver, from the stamp to its
/// return. Every stretch but the nominal delay is excess. The slack
/// (what the deadline leaves of it) is spent in path order, so the
/// lateness falls on the stretches where the datagram was when its time
/// ran out, each read off the time line of the thread that held it and
/// laid end to end, so the segments tile [planned, actual):
///
/// - the sender running, [`BlockedOn::Sender`] naming it (the send call,
///   with the softirq that carries the frame on); queued, waiting for its
///   CPU behind the occupant; interrupts; steal;
/// - the relay, as for an arrival ([`explain_arrival`]; None: not
///   recorded); without the sender's time line the datagram may not have
///   reached it, so its sleep is unexplained rather than its hold;
/// - the receiver: its own time line, as [`explain`] reads it (woken late
///   by a deferred softirq, queued behind whom, running).
///
/// A deadline shorter than the nominal delay leaves lateness no stretch
/// accounts for: unexplained, first.
#[allow(clippy::too_many_arguments)]
pub fn explain_datagram(
    tl: &Timeline,
    receiver: &Probe,
    sender: Option<&Probe>,
    relay: Option<&Probe>,
    planned_ns: u64,
    sent_ns: u64,
    received_ns: u64,
    actual_ns: u64,
    nominal_ns: u64,
) -> Explanation {
    let actual = actual_ns.max(planned_ns);
    let sent = sent_ns.min(planned_ns);
    let received = received_ns.clamp(sent, actual);
    // It left the sender by the time the relay, holding it its delay,
    // could have handed it on.
    let latest_left = received.saturating_sub(nominal_ns).max(sent);
    let left = sender.map_or(sent, |s| first_asleep(tl, s, sent, latest_left));
    let pieces = [
        (Holder::Sender, sent, left),
        (Holder::Relay, (left + nominal_ns).min(received), received),
        (Holder::Receiver, received, actual),
    ];
    let lateness = actual - planned_ns;
    let excess: u64 = pieces.iter().map(|&(_, a, e)| e - a).sum();
    let mut out = Explanation::default();
    out.reset(receiver.tid, planned_ns, actual);
    let mut cursor = planned_ns;
    if excess < lateness {
        cursor += lateness - excess;
        out.push(
            planned_ns,
            cursor,
            tl.side,
            Cause::Unexplained { why: Gap::NotRecorded },
        );
    }
    let mut slack = excess.saturating_sub(lateness);
    let mut part = Explanation::default();
    for (holder, a, e) in pieces {
        let skip = slack.min(e - a);
        slack -= skip;
        let a = a + skip;
        if a >= e {
            continue;
        }
        part.reset(receiver.tid, a, e);
        match (holder, sender, relay) {
            (Holder::Sender, Some(s), _) => {
                holder_walk(tl, s, (BlockedOn::Sender, Some(BlockedOn::Sender)), a, e, 0, &mut part)
            }
            (Holder::Relay, Some(_), Some(r)) => relay_walk(tl, r, a, e, 0, &mut part),
            // Without the sender's time line the datagram may not have
            // reached the relay yet: the relay asleep is not known to
            // have held it.
            (Holder::Relay, None, Some(r)) => holder_walk(tl, r, (BlockedOn::RelayQueue, None), a, e, 0, &mut part),
            (Holder::Receiver, _, _) => explain_into(tl, receiver, a, e, &mut part),
            _ => part.push(a, e, tl.side, Cause::Unexplained { why: Gap::NotRecorded }),
        }
        for seg in &part.segments {
            let len = seg.end_ns - seg.start_ns;
            out.push(cursor, cursor + len, seg.side, seg.cause);
            cursor += len;
        }
    }
    out
}

/// Who held a datagram on its way.
#[derive(Clone, Copy)]
enum Holder {
    Sender,
    Relay,
    Receiver,
}

/// The first moment in [a, e) `t` was asleep or gone (it had handed its
/// datagram to the kernel); `e` when it never was.
fn first_asleep(tl: &Timeline, t: &Probe, a: u64, e: u64) -> u64 {
    let spans = &tl.lines[t.line].spans;
    let mut first = None;
    tl.line_walk(t.line, a, e, |p, _, span| {
        let off = span.is_some_and(|i| matches!(spans[i].state, State::Asleep { .. } | State::Dead));
        if off && first.is_none() {
            first = Some(p);
        }
    });
    first.unwrap_or(e)
}

/// The relay thread's states over [a, e) (its clock) as causes of the
/// stretch `shift` earlier: running, busy with other frames; queued,
/// waiting for its CPU behind the occupant (or interrupts); asleep,
/// holding the frame; unknown, unexplained.
fn relay_walk(tl: &Timeline, relay: &Probe, a: u64, e: u64, shift: u64, out: &mut Explanation) {
    holder_walk(
        tl,
        relay,
        (BlockedOn::RelayQueue, Some(BlockedOn::RelayWait)),
        a,
        e,
        shift,
        out,
    )
}

/// The states over [a, e) of a thread that held a packet (`holder`: the
/// relay, a datagram's sender) as causes of the stretch `shift` earlier:
/// running is `on.0`, asleep `on.1` (None: unexplained, when whether it
/// held the packet asleep is not known), each naming it; queued is
/// waiting for its CPU behind the occupant (or interrupts); the
/// hypervisor's steal where it ran or waited; unknown, unexplained.
fn holder_walk(
    tl: &Timeline,
    holder: &Probe,
    on: (BlockedOn, Option<BlockedOn>),
    a: u64,
    e: u64,
    shift: u64,
    out: &mut Explanation,
) {
    let side = tl.side;
    // While the holder ran or waited on `cpu`, the time the hypervisor
    // beneath took that CPU held the frame: steal, as for the probe.
    let mut put_on = |cpu: Option<u16>, p: u64, q: u64, cause: Cause| match cpu {
        Some(cpu) => tl.stolen_walk(cpu, p, q, |p, q, stolen| {
            out.push(
                p - shift,
                q - shift,
                side,
                if stolen { Cause::Stolen { cpu } } else { cause },
            )
        }),
        None => out.push(p - shift, q - shift, side, cause),
    };
    let spans = &tl.lines[holder.line].spans;
    let by = Who::Thread(holder.tid);
    tl.line_walk(holder.line, a, e, |a, end, span| {
        let Some(i) = span else {
            put_on(None, a, end, Cause::Unexplained { why: Gap::NotRecorded });
            return;
        };
        match spans[i].state {
            State::Running { cpu } => put_on(
                Some(cpu),
                a,
                end,
                Cause::Blocked {
                    on: on.0,
                    by,
                    cpu: Some(cpu),
                    irq: None,
                },
            ),
            State::Queued { cpu, .. } => tl.cpu_walk(cpu, a, end, |p, q, slice, irq| {
                let cause = match irq {
                    Some(irq) => Cause::Interrupts { cpu, irq },
                    None if slice.tid == UNKNOWN_TID || slice.tid == holder.tid => Cause::Unexplained {
                        why: Gap::UnknownOccupant,
                    },
                    None => Cause::WaitedForCpu {
                        cpu,
                        behind: Who::from_tid(slice.tid),
                        idle_elsewhere_ns: 0,
                    },
                };
                put_on(Some(cpu), p, q, cause);
            }),
            State::Asleep { .. } => put_on(
                None,
                a,
                end,
                match on.1 {
                    Some(on) => Cause::Blocked {
                        on,
                        by,
                        cpu: None,
                        irq: None,
                    },
                    None => Cause::Unexplained { why: Gap::NotRecorded },
                },
            ),
            State::Unknown => put_on(None, a, end, Cause::Unexplained { why: Gap::MissingEvent }),
            State::Dead => put_on(None, a, end, Cause::Unexplained { why: Gap::NotRecorded }),
        }
    });
}

/// The causes of [a, e), all within span `i` of the probe's spans.
#[allow(clippy::too_many_arguments)]
fn classify(
    tl: &Timeline,
    probe: &Probe,
    spans: &[Span],
    i: usize,
    planned: u64,
    a: u64,
    e: u64,
    out: &mut Explanation,
) {
    let side = tl.side;
    let span = spans[i];
    match span.state {
        State::Unknown => {
            let why = if i == 0 { Gap::NotRecorded } else { Gap::MissingEvent };
            // Lost events or none at all: a CPU taken from the machine
            // records nothing. The CPU it was last seen on tells.
            let cpu = spans[..i].iter().rev().take(4).find_map(|s| match s.state {
                State::Running { cpu } | State::Queued { cpu, .. } => Some(cpu),
                _ => None,
            });
            push_on(tl, cpu, a, e, Cause::Unexplained { why }, out);
        }
        State::Dead => out.push(a, e, side, Cause::Unexplained { why: Gap::NotRecorded }),
        State::Running { cpu } => tl.cpu_walk(cpu, a, e, |p, q, _, irq| {
            let cause = match irq {
                Some(irq) => Cause::Interrupts { cpu, irq },
                None => Cause::OwnWork { cpu },
            };
            push_on(tl, Some(cpu), p, q, cause, out);
        }),
        State::Queued { cpu, since, rt, .. } => tl.cpu_walk(cpu, a, e, |p, q, slice, irq| {
            if let Some(irq) = irq {
                push_on(tl, Some(cpu), p, q, Cause::Interrupts { cpu, irq }, out);
                return;
            }
            if slice.tid == UNKNOWN_TID || slice.tid == probe.tid {
                // Queued behind itself: the time lines disagree, an event
                // went missing.
                let why = if slice.tid == UNKNOWN_TID {
                    Gap::UnknownOccupant
                } else {
                    Gap::MissingEvent
                };
                push_on(tl, Some(cpu), p, q, Cause::Unexplained { why }, out);
                return;
            }
            let behind = Who::from_tid(slice.tid);
            // Only throttling keeps a real-time thread queued behind a
            // non-real-time occupant past a wake-up preemption.
            let throttled_from = if rt && !slice.rt {
                since.saturating_add(RT_PREEMPT_GRACE_NS)
            } else {
                u64::MAX
            };
            let mid = throttled_from.clamp(p, q);
            if p < mid {
                // Each piece the hypervisor left the CPU its own idle time
                // elsewhere.
                push_on_with(tl, Some(cpu), p, mid, |a, e| queued(tl, probe, cpu, slice, a, e), out);
            }
            if mid < q {
                let budget = Who::from_tid(tl.rt_budget_user(cpu, mid));
                push_on(tl, Some(cpu), mid, q, Cause::Throttled { cpu, behind, budget }, out);
            }
        }),
        State::Asleep { blocked } => {
            let wake = match spans.get(i + 1).map(|s| s.state) {
                Some(State::Queued { wake: Some(w), .. }) => Some(w),
                _ => None,
            };
            let by = wake.map_or(Who::Unknown, |w| Who::from_tid(w.by));
            let cpu = wake.map(|w| w.cpu);
            // A wake-up inside an interrupt handler's run came from it, not
            // from the thread it interrupted.
            let irq = match (wake, spans.get(i + 1)) {
                (Some(w), Some(next)) => tl.irq_at(w.cpu, next.start),
                _ => None,
            };
            let cause = if blocked {
                Cause::Blocked {
                    on: BlockedOn::Io,
                    by,
                    cpu,
                    irq,
                }
            } else if !probe.on_message && (span.start <= planned || irq.is_some_and(Irq::is_timer)) {
                // A probe sleeps until its planned time on a timer: still
                // asleep past it in that sleep, the timer was late. So is
                // a sleep that began after it and that a timer interrupt
                // ended: a sleep woken before its time (a TCG guest's
                // timer, early by its clock) sleeps again in the kernel,
                // and only its timer ends it. The thread a timer's
                // interrupt came in on did not wake it.
                Cause::LateTimer {
                    how: Late::Timer,
                    by: match (irq, by) {
                        (Some(_), Who::Thread(_)) => Who::Unknown,
                        _ => by,
                    },
                    cpu,
                }
            } else if wake.is_some() {
                let on = match (irq, by) {
                    (None, Who::Thread(_)) => BlockedOn::Thread,
                    _ => BlockedOn::Interrupt,
                };
                let by = if irq.is_some() { Who::Unknown } else { by };
                Cause::Blocked { on, by, cpu, irq }
            } else {
                // Asleep to the end of the time line: what it waited for
                // is not recorded.
                Cause::Unexplained { why: Gap::NotRecorded }
            };
            match cause {
                // Its timer is due on the CPU it slept on: taken away, that
                // CPU could fire none.
                Cause::LateTimer { cpu, .. } => push_on(tl, cpu, a, e, cause, out),
                _ => out.push(a, e, side, cause),
            }
        }
    }
}

/// Pushes [a, e) as `cause`, but the time the hypervisor beneath the
/// recorded machine took `cpu` from it as [`Cause::Stolen`]: nothing ran
/// on that CPU then, whatever its last events said.
fn push_on(tl: &Timeline, cpu: Option<u16>, a: u64, e: u64, cause: Cause, out: &mut Explanation) {
    push_on_with(tl, cpu, a, e, |_, _| cause, out);
}

/// [`push_on`] with the cause of each piece not stolen made for it.
fn push_on_with(
    tl: &Timeline,
    cpu: Option<u16>,
    a: u64,
    e: u64,
    cause: impl Fn(u64, u64) -> Cause,
    out: &mut Explanation,
) {
    let Some(cpu) = cpu else {
        out.push(a, e, tl.side, cause(a, e));
        return;
    };
    tl.stolen_walk(cpu, a, e, |p, q, stolen| {
        out.push(p, q, tl.side, if stolen { Cause::Stolen { cpu } } else { cause(p, q) })
    });
}

/// Queued on `cpu` during [p, q) behind `slice`'s occupant, not throttled.
fn queued(tl: &Timeline, probe: &Probe, cpu: u16, slice: Slice, p: u64, q: u64) -> Cause {
    match Who::from_tid(slice.tid) {
        // The CPU it is queued on idles: that CPU is to blame.
        Who::Idle => Cause::LateTimer {
            how: Late::IdleExit,
            by: Who::Idle,
            cpu: Some(cpu),
        },
        behind => Cause::WaitedForCpu {
            cpu,
            behind,
            idle_elsewhere_ns: tl.idle_elsewhere(probe, cpu, p, q),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cause::{CauseKind, Irq, Side};
    use crate::timeline::TimelineBuilder;
    use ontime_recording::event::{kind, Event, F_NEXT_RT, F_PREV_RT, F_PREV_RUNNABLE, TASK_UNINTERRUPTIBLE};

    const MS: u64 = 1_000_000;
    const US: u64 = 1_000;
    /// Where the recordings start.
    const T0: u64 = 1_000 * MS;
    /// Interruptible sleep, as sched_switch reports it.
    const SLEEPING: u32 = 1;

    const PROBE: u32 = 100;
    const HOG: u32 = 200;
    const OTHER: u32 = 300;
    const WAKER: u32 = 400;
    const RELAY: u32 = 500;
    const SENDER: u32 = 600;

    fn at(ms: u64) -> u64 {
        T0 + ms * MS
    }

    /// An explanation's segments as (start, end, side, cause).
    fn segments(x: &Explanation) -> Vec<(u64, u64, Side, Cause)> {
        x.segments
            .iter()
            .map(|s| (s.start_ns, s.end_ns, s.side, s.cause))
            .collect()
    }

    fn switch(ts: u64, cpu: u16, prev: u32, next: u32, state: u32, flags: u8) -> Event {
        Event {
            ts,
            a: prev,
            b: next,
            c: state,
            cpu,
            kind: kind::SWITCH,
            flags,
        }
    }

    /// `prev` leaves `cpu` still runnable (preempted).
    fn preempt(ts: u64, cpu: u16, prev: u32, next: u32) -> Event {
        switch(ts, cpu, prev, next, 0, F_PREV_RUNNABLE)
    }

    /// `prev` leaves `cpu` to sleep.
    fn sleep(ts: u64, cpu: u16, prev: u32, next: u32) -> Event {
        switch(ts, cpu, prev, next, SLEEPING, 0)
    }

    /// `tid` woken onto `target` by `by`, recorded on `on`.
    fn wake(ts: u64, on: u16, tid: u32, by: u32, target: u32) -> Event {
        Event {
            ts,
            a: tid,
            b: by,
            c: target,
            cpu: on,
            kind: kind::WAKEUP,
            flags: 0,
        }
    }

    fn irq(ts: u64, cpu: u16, kind: u8, a: u32) -> Event {
        Event {
            ts,
            a,
            b: 0,
            c: 0,
            cpu,
            kind,
            flags: 0,
        }
    }

    fn timeline(cpus: usize, events: &[Event], end: u64) -> Timeline {
        let mut b = TimelineBuilder::new(T0, cpus);
        b.watch(PROBE);
        b.watch(RELAY);
        b.watch(SENDER);
        let mut sorted = events.to_vec();
        sorted.sort_by_key(|e| e.ts);
        for e in &sorted {
            b.feed(e);
        }
        b.finish(end)
    }

    /// The segments tile [planned, actual) and add up to the lateness.
    /// PROBE's event planned at `planned`, done at `actual`, explained on
    /// `tl`; its segments checked to tile the lateness.
    fn explained(tl: &Timeline, planned: u64, actual: u64) -> Explanation {
        let x = explain(tl, &tl.probe(PROBE).unwrap(), planned, actual);
        assert_tiles(&x);
        x
    }

    fn assert_tiles(x: &Explanation) {
        let mut t = x.planned_ns;
        for s in &x.segments {
            assert_eq!(s.start_ns, t, "a gap or overlap before {s:?} in {x:#?}");
            assert!(s.end_ns > s.start_ns, "an empty segment {s:?}");
            t = s.end_ns;
        }
        if x.actual_ns > x.planned_ns {
            assert_eq!(t, x.actual_ns, "segments stop short in {x:#?}");
        } else {
            assert!(x.segments.is_empty());
        }
        assert_eq!(x.by_kind().iter().sum::<u64>(), x.lateness_ns());
    }

    /// The relay running on CPU 1, busy with other frames.
    fn relay_busy_on_cpu1() -> Cause {
        Cause::Blocked {
            on: BlockedOn::RelayQueue,
            by: Who::Thread(RELAY),
            cpu: Some(1),
            irq: None,
        }
    }

    fn causes(x: &Explanation) -> Vec<(u64, u64, Cause)> {
        x.segments.iter().map(|s| (s.start_ns, s.end_ns, s.cause)).collect()
    }

    /// A relay carrying a frame on a vCPU the hypervisor took for 5 ms of
    /// it: the frame waited for the steal, not for the relay's queue.
    #[test]
    fn a_relay_on_a_stolen_cpu_held_the_frame_for_the_steal() {
        let events = [
            wake(at(0), 0, PROBE, 0, 0),
            switch(at(0), 0, 0, PROBE, 0, 0),
            steal(at(0), 1, 1),
            switch(at(0) + 500 * US, 1, 0, RELAY, 0, 0),
            sleep(at(1), 0, PROBE, 0),
            steal(at(30), 1, 1 + 5 * MS),
            sleep(at(30), 1, RELAY, 0),
        ];
        let tl = timeline(2, &events, at(200));
        let (probe, relay) = (tl.probe(PROBE).unwrap(), tl.probe(RELAY).unwrap());
        let x = explain_arrival(&tl, &probe, Some(&relay), at(0), at(1), at(20), 10 * MS);
        assert_tiles(&x);
        let (queue, got) = (relay_busy_on_cpu1(), causes(&x));
        assert_eq!(
            got,
            vec![
                (at(0), at(1), Cause::OwnWork { cpu: 0 }),
                (at(1), at(15), queue),
                (at(15), at(20), Cause::Stolen { cpu: 1 }),
            ]
        );
    }

    /// A request sent 1 ms late to a relay that then stopped for 139 ms
    /// past the frame's due time: 1 ms of the probe's own work, then the
    /// relay holding the frame asleep, then the relay running it out,
    /// each named, placed the relay's 10 ms nominal delay earlier.
    #[test]
    fn a_stopped_relay_is_named_for_the_frame_it_held() {
        let events = [
            wake(at(0), 0, PROBE, 0, 0),
            switch(at(0), 0, 0, PROBE, 0, 0),
            sleep(at(1), 0, PROBE, 0),
            switch(at(0) + 500 * US, 1, 0, RELAY, 0, 0),
            sleep(at(2), 1, RELAY, 0),
            wake(at(150), 1, RELAY, 0, 1),
            switch(at(150), 1, 0, RELAY, 0, 0),
            sleep(at(151), 1, RELAY, 0),
        ];
        let tl = timeline(2, &events, at(200));
        let (probe, relay) = (tl.probe(PROBE).unwrap(), tl.probe(RELAY).unwrap());
        let x = explain_arrival(&tl, &probe, Some(&relay), at(0), at(1), at(140) + 500 * US, 10 * MS);
        assert_tiles(&x);
        assert_eq!(x.lateness_ns(), 140 * MS + 500 * US);
        let wait = Cause::Blocked {
            on: BlockedOn::RelayWait,
            by: Who::Thread(RELAY),
            cpu: None,
            irq: None,
        };
        let (queue, got) = (relay_busy_on_cpu1(), causes(&x));
        assert_eq!(
            got,
            vec![
                (at(0), at(1), Cause::OwnWork { cpu: 0 }),
                (at(1), at(140), wait),
                (at(140), at(140) + 500 * US, queue),
            ]
        );
    }

    /// A request answered 200 ms late by a stalled gateway: 1 ms of the
    /// probe's own work before it went out, the 200 ms the gateway held it
    /// (from its stamps), then on the way back 2 ms of the relay carrying
    /// it and 7 ms of the probe, woken, queued behind a hog; placed the
    /// round trip (10 ms each way) earlier.
    #[test]
    fn a_stalled_gateway_is_named_for_the_answer_it_held() {
        let events = [
            wake(at(0), 0, PROBE, 0, 0),
            switch(at(0), 0, 0, PROBE, 0, 0),
            sleep(at(1), 0, PROBE, 0),
            switch(at(215), 0, 0, HOG, 0, 0),
            switch(at(0) + 500 * US, 1, 0, RELAY, 0, 0),
            sleep(at(2), 1, RELAY, 0),
            wake(at(221), 1, RELAY, 0, 1),
            switch(at(221), 1, 0, RELAY, 0, 0),
            wake(at(223), 1, PROBE, RELAY, 0),
            sleep(at(223) + 100 * US, 1, RELAY, 0),
            preempt(at(230), 0, HOG, PROBE),
        ];
        let tl = timeline(2, &events, at(300));
        let (probe, relay) = (tl.probe(PROBE).unwrap(), tl.probe(RELAY).unwrap());
        let path = PathNominal {
            one_way_ns: 10 * MS,
            gateway_ns: 0,
        };
        let stamps = GatewayStamps {
            recv_ns: at(11),
            answered_ns: at(211),
        };
        let x = explain_answer(&tl, &probe, Some(&relay), at(0), at(1), stamps, at(210), path);
        assert_tiles(&x);
        let got: Vec<(u64, u64, Cause)> = x.segments.iter().map(|s| (s.start_ns, s.end_ns, s.cause)).collect();
        assert_eq!(
            got,
            vec![
                (at(0), at(1), Cause::OwnWork { cpu: 0 }),
                (
                    at(1),
                    at(201),
                    Cause::Blocked {
                        on: BlockedOn::Gateway,
                        by: Who::Unknown,
                        cpu: None,
                        irq: None
                    }
                ),
                (
                    at(201),
                    at(203),
                    Cause::Blocked {
                        on: BlockedOn::RelayQueue,
                        by: Who::Thread(RELAY),
                        cpu: Some(1),
                        irq: None
                    }
                ),
                (
                    at(203),
                    at(210),
                    // CPU 1 idled once the relay slept.
                    Cause::WaitedForCpu {
                        cpu: 0,
                        behind: Who::Thread(HOG),
                        idle_elsewhere_ns: 6_900 * US
                    }
                ),
            ]
        );
        // Without the relay's time line the way back is not recorded, the
        // gateway's part still is (its stamps).
        let x = explain_answer(&tl, &probe, None, at(0), at(1), stamps, at(210), path);
        assert_tiles(&x);
        assert_eq!(x.ns_of(CauseKind::Blocked), 200 * MS);
    }

    /// A guest probe queued 10 ms behind a guest thread, then running
    /// 20 ms while its vCPU thread waited 15 ms on the host behind a hog:
    /// the guest's wait stands, of its "running" 5 ms is its own work and
    /// 15 ms waiting for host CPU 1 behind the hog, on the host's side.
    #[test]
    fn a_guest_probe_whose_vcpu_waited_on_the_host_names_the_host_hog() {
        const VCPU: u32 = 600;
        const GUEST_HOG: u32 = 900;
        let mut b = TimelineBuilder::new(T0, 2);
        b.watch(VCPU);
        for e in [
            wake(at(0), 1, VCPU, 0, 1),
            switch(at(0), 1, 0, VCPU, 0, 0),
            preempt(at(15), 1, VCPU, HOG),
            preempt(at(30), 1, HOG, VCPU),
        ] {
            b.feed(&e);
        }
        let host = b.finish(at(40));
        let mut guest = Explanation::default();
        guest.reset(PROBE, at(0), at(30));
        let behind_guest_hog = Cause::WaitedForCpu {
            cpu: 0,
            behind: Who::Thread(GUEST_HOG),
            idle_elsewhere_ns: 0,
        };
        guest.push(at(0), at(10), Side::Guest, behind_guest_hog);
        guest.push(at(10), at(30), Side::Guest, Cause::OwnWork { cpu: 0 });
        let x = split_by_host(&guest, &host, None, |cpu| (cpu == 0).then(|| host.probe(VCPU).unwrap()));
        assert_tiles(&x);
        let got = segments(&x);
        assert_eq!(
            got,
            vec![
                (at(0), at(10), Side::Guest, behind_guest_hog),
                (at(10), at(15), Side::Guest, Cause::OwnWork { cpu: 0 }),
                (
                    at(15),
                    at(30),
                    Side::Host,
                    Cause::WaitedForCpu {
                        cpu: 1,
                        behind: Who::Thread(HOG),
                        idle_elsewhere_ns: 0
                    }
                ),
            ]
        );
    }

    /// A guest receiver asleep 20 ms with its datagram not in, woken from
    /// NET_RX on guest CPU 0, whose vCPU thread waited 15 ms of it on the
    /// host behind a hog: read as a receiver, those 15 ms are the host's
    /// wait and the rest the guest's; read as a timer's probe, the
    /// guest's blocked stretch stands whole.
    #[test]
    fn a_guest_receivers_wait_is_the_hosts_where_its_vcpu_was_queued() {
        const VCPU: u32 = 600;
        let mut b = TimelineBuilder::new(T0, 2);
        b.watch(VCPU);
        for e in [
            wake(at(0), 1, VCPU, 0, 1),
            switch(at(0), 1, 0, HOG, 0, 0),
            preempt(at(15), 1, HOG, VCPU),
        ] {
            b.feed(&e);
        }
        let host = b.finish(at(40));
        let mut guest = Explanation::default();
        guest.reset(PROBE, at(0), at(20));
        let not_in = Cause::Blocked {
            on: BlockedOn::Interrupt,
            by: Who::Unknown,
            cpu: Some(0),
            irq: Some(Irq::Soft(3)),
        };
        guest.push(at(0), at(20), Side::Guest, not_in);
        let vcpu = |cpu| (cpu == 0).then(|| host.probe(VCPU).unwrap());
        let x = split_by_host_waiting(&guest, &host, None, vcpu);
        assert_tiles(&x);
        assert_eq!(
            segments(&x),
            vec![
                (
                    at(0),
                    at(15),
                    Side::Host,
                    Cause::WaitedForCpu {
                        cpu: 1,
                        behind: Who::Thread(HOG),
                        idle_elsewhere_ns: 0
                    }
                ),
                (at(15), at(20), Side::Guest, not_in),
            ]
        );
        let x = split_by_host(&guest, &host, None, vcpu);
        assert_eq!(segments(&x), vec![(at(0), at(20), Side::Guest, not_in)]);

        // The vCPU halted 10 ms, then woken by QEMU's main loop, then 10 ms
        // in the host's kernel (D state): the first is the guest's (not
        // in yet), the second the host's.
        const MAIN_LOOP: u32 = 700;
        let mut b = TimelineBuilder::new(T0, 2);
        b.watch(VCPU);
        b.watch(MAIN_LOOP);
        for e in [
            wake(at(0), 1, VCPU, 0, 1),
            switch(at(0), 1, 0, VCPU, 0, 0),
            switch(at(0) + 100 * US, 1, VCPU, 0, SLEEPING, 0),
            wake(at(10), 0, VCPU, MAIN_LOOP, 1),
            switch(at(10), 1, 0, VCPU, 0, 0),
            switch(at(10) + 100 * US, 1, VCPU, 0, TASK_UNINTERRUPTIBLE, 0),
            wake(at(20), 0, VCPU, OTHER, 1),
            switch(at(20), 1, 0, VCPU, 0, 0),
        ] {
            b.feed(&e);
        }
        let host = b.finish(at(40));
        let mut guest = Explanation::default();
        guest.reset(PROBE, at(1), at(20));
        guest.push(at(1), at(20), Side::Guest, not_in);
        let vcpu = |cpu| (cpu == 0).then(|| host.probe(VCPU).unwrap());
        let x = split_by_host_waiting(&guest, &host, None, vcpu);
        assert_tiles(&x);
        let got = segments(&x);
        assert_eq!((got[0].2, got[0].3), (Side::Guest, not_in), "{got:?}");
        assert!(got[0].1 - got[0].0 >= 9 * MS, "{got:?}");
        let in_d: u64 = got
            .iter()
            .filter(|s| s.2 == Side::Host && matches!(s.3, Cause::Blocked { on: BlockedOn::Io, .. }))
            .map(|s| s.1 - s.0)
            .sum();
        assert!(in_d >= 9 * MS, "{got:?}");
    }

    /// A guest's timer late 40 ms; its CPU idled for the first 35 ms, then
    /// ran a guest thread; its TCG vCPU thread ran on host CPU 1
    /// throughout, sampled every 1 ms in QEMU's own code for the first
    /// 30 ms and in translated guest code after: the first 30 ms are
    /// emulation (the host's), the rest the guest's late timer (its code,
    /// then a guest thread to run, whatever the samples say). Without the
    /// guest's time line, or without samples, the guest's cause stands.
    #[test]
    fn a_tcg_vcpu_running_qemus_code_while_the_guest_idles_is_emulation() {
        const VCPU: u32 = 600;
        const GUEST_THREAD: u32 = 900;
        // The host: the vCPU thread runs throughout; `in_qemu(i)`: its
        // sample at i ms was in QEMU's own code (None: no samples).
        let build = |in_qemu: Option<fn(u64) -> bool>| {
            let mut b = TimelineBuilder::new(T0, 2);
            b.watch(VCPU);
            b.feed(&switch(at(0), 1, 0, VCPU, 0, 0));
            if let Some(q) = in_qemu {
                b.vcpu_samples(VCPU, MS, (1..=40).map(|i| (at(i), q(i))).collect());
            }
            b.finish(at(50))
        };
        let mut g = TimelineBuilder::new(T0, 1).side(Side::Guest);
        g.feed(&switch(at(0), 0, 0, 0, 0, 0));
        g.feed(&switch(at(35), 0, 0, GUEST_THREAD, 0, 0));
        let guest_tl = g.finish(at(50));
        let late_timer = Cause::LateTimer {
            how: Late::Timer,
            by: Who::Idle,
            cpu: Some(0),
        };
        let mut guest = Explanation::default();
        guest.reset(PROBE, at(0), at(40));
        guest.push(at(0), at(40), Side::Guest, late_timer);
        let host = build(Some(|i| i <= 30));
        let split = |host: &Timeline, tl: Option<&Timeline>| {
            split_by_host(&guest, host, tl, |cpu| (cpu == 0).then(|| host.probe(VCPU).unwrap()))
        };
        let x = split(&host, Some(&guest_tl));
        assert_tiles(&x);
        let got = segments(&x);
        assert_eq!(
            got,
            vec![
                (at(0), at(30), Side::Host, Cause::Emulation { cpu: 1, vcpu: VCPU }),
                (at(30), at(40), Side::Guest, late_timer),
            ]
        );
        // QEMU's code while the guest ran a thread is TCG running it.
        let all_qemu = build(Some(|_| true));
        let x = split(&all_qemu, Some(&guest_tl));
        assert_eq!(x.ns_of(CauseKind::Emulation), 35 * MS, "only while the guest idled");
        assert_eq!(
            split(&host, None).ns_of(CauseKind::LateTimer),
            40 * MS,
            "no guest time line"
        );
        assert_eq!(
            split(&build(None), Some(&guest_tl)).ns_of(CauseKind::LateTimer),
            40 * MS,
            "no samples"
        );
    }

    /// A halted guest's timer late by 31 ms: its vCPU thread slept on the
    /// host until QEMU's main loop woke it, and the main loop had waited
    /// 30 ms for host CPU 1 behind a hog, then ran 1 ms: the hog, then
    /// the main loop's work, on the host's side.
    #[test]
    fn a_halted_vcpu_woken_late_by_qemus_main_loop_names_what_held_the_loop() {
        const VCPU: u32 = 600;
        const MAINLOOP: u32 = 601;
        let mut b = TimelineBuilder::new(T0, 2);
        b.watch(VCPU);
        b.watch(MAINLOOP);
        for e in [
            switch(at(0), 1, 0, VCPU, 0, 0),
            sleep(at(1), 1, VCPU, HOG),
            wake(at(10), 1, MAINLOOP, 0, 1),
            preempt(at(40), 1, HOG, MAINLOOP),
            wake(at(41), 1, VCPU, MAINLOOP, 1),
            sleep(at(41), 1, MAINLOOP, VCPU),
        ] {
            b.feed(&e);
        }
        let host = b.finish(at(50));
        let mut guest = Explanation::default();
        guest.reset(PROBE, at(10), at(41));
        let late_timer = Cause::LateTimer {
            how: Late::Timer,
            by: Who::Idle,
            cpu: Some(0),
        };
        guest.push(at(10), at(41), Side::Guest, late_timer);
        let x = split_by_host(&guest, &host, None, |cpu| (cpu == 0).then(|| host.probe(VCPU).unwrap()));
        assert_tiles(&x);
        let got = segments(&x);
        assert_eq!(
            got,
            vec![
                (
                    at(10),
                    at(40),
                    Side::Host,
                    Cause::WaitedForCpu {
                        cpu: 1,
                        behind: Who::Thread(HOG),
                        idle_elsewhere_ns: 0
                    }
                ),
                (
                    at(40),
                    at(41),
                    Side::Host,
                    Cause::Blocked {
                        on: BlockedOn::Thread,
                        by: Who::Thread(MAINLOOP),
                        cpu: Some(1),
                        irq: None
                    }
                ),
            ]
        );
    }

    /// A crawler that slept past its planned time with the poll due (no
    /// connection to send it on) waited on the relay: that stretch of its
    /// send lag is read off the relay's time line at the same time.
    #[test]
    fn a_send_held_up_by_a_stopped_relay_is_the_relays() {
        let events = [
            wake(at(0), 0, PROBE, 0, 0),
            switch(at(0), 0, 0, PROBE, 0, 0),
            sleep(at(1), 0, PROBE, 0),
            wake(at(50), 0, PROBE, 0, 0),
            switch(at(50), 0, 0, PROBE, 0, 0),
            sleep(at(51), 0, PROBE, 0),
            sleep(at(0) + 100 * US, 1, RELAY, 0),
            wake(at(45), 1, RELAY, 0, 1),
            switch(at(45), 1, 0, RELAY, 0, 0),
            sleep(at(46), 1, RELAY, 0),
        ];
        let tl = timeline(2, &events, at(100));
        let (probe, relay) = (tl.probe(PROBE).unwrap(), tl.probe(RELAY).unwrap());
        let x = explain_arrival(&tl, &probe, Some(&relay), at(0), at(50), at(50), 10 * MS);
        assert_tiles(&x);
        let got: Vec<(u64, u64, BlockedOn)> = x
            .segments
            .iter()
            .filter_map(|s| match s.cause {
                Cause::Blocked { on, by, .. } => {
                    assert_eq!(by, Who::Thread(RELAY));
                    Some((s.start_ns, s.end_ns, on))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (at(1), at(45), BlockedOn::RelayWait),
                (at(45), at(46), BlockedOn::RelayQueue),
                (at(46), at(50), BlockedOn::RelayWait),
            ]
        );
        assert_eq!(x.segments[0].cause, Cause::OwnWork { cpu: 0 });
    }

    /// A datagram sent at 0 with a 10 ms deadline over a relay that holds
    /// frames 2 ms: its sender queued behind a hog until 12 ms and sent it
    /// by 12.1 ms; the relay, asleep (stopped) until 30 ms, carried it
    /// until 30.2 ms; its receiver, woken then, waited behind another
    /// thread until 35 ms. The 8 ms of slack go to the sender's first 8
    /// ms; the 25 ms of lateness are the rest of each stretch in path
    /// order, each named.
    #[test]
    fn a_late_datagram_is_told_along_its_path() {
        let events = [
            wake(at(0), 0, SENDER, 0, 0),
            switch(at(0), 0, 0, SENDER, 0, 0),
            preempt(at(0) + 100 * US, 0, SENDER, HOG),
            preempt(at(12), 0, HOG, SENDER),
            sleep(at(12) + 100 * US, 0, SENDER, 0),
            switch(at(0) + 500 * US, 1, 0, RELAY, 0, 0),
            sleep(at(1), 1, RELAY, 0),
            wake(at(30), 1, RELAY, 0, 1),
            switch(at(30), 1, 0, RELAY, 0, 0),
            sleep(at(30) + 200 * US, 1, RELAY, 0),
            switch(at(0), 2, 0, PROBE, 0, 0),
            sleep(at(1), 2, PROBE, OTHER),
            wake(at(30) + 200 * US, 1, PROBE, RELAY, 2),
            preempt(at(35), 2, OTHER, PROBE),
        ];
        let tl = timeline(3, &events, at(50));
        let receiver = tl.probe(PROBE).unwrap().on_messages().on_cpus(&[2]).unwrap();
        let (sender, relay) = (tl.probe(SENDER).unwrap(), tl.probe(RELAY).unwrap());
        let received = at(30) + 200 * US;
        let x = explain_datagram(
            &tl,
            &receiver,
            Some(&sender),
            Some(&relay),
            at(10),
            at(0),
            received,
            at(35),
            2 * MS,
        );
        assert_tiles(&x);
        let sending = Cause::Blocked {
            on: BlockedOn::Sender,
            by: Who::Thread(SENDER),
            cpu: Some(0),
            irq: None,
        };
        let held = Cause::Blocked {
            on: BlockedOn::RelayWait,
            by: Who::Thread(RELAY),
            cpu: None,
            irq: None,
        };
        let behind = |cpu, tid| Cause::WaitedForCpu {
            cpu,
            behind: Who::Thread(tid),
            idle_elsewhere_ns: 0,
        };
        assert_eq!(
            causes(&x),
            vec![
                (at(10), at(14), behind(0, HOG)),
                (at(14), at(14) + 100 * US, sending),
                (at(14) + 100 * US, at(30), held),
                (at(30), received, relay_busy_on_cpu1()),
                (received, at(35), behind(2, OTHER)),
            ]
        );
        // Without the sender's time line the datagram is taken to have left
        // at its stamp: where the relay slept it may have been the sender's
        // still, so that is unexplained, not the relay's hold.
        let x = explain_datagram(
            &tl,
            &receiver,
            None,
            Some(&relay),
            at(10),
            at(0),
            received,
            at(35),
            2 * MS,
        );
        assert_tiles(&x);
        assert_eq!(x.ns_of(CauseKind::WaitedForCpu), 4 * MS + 800 * US, "{x:#?}");
        assert_eq!(x.ns_of(CauseKind::Unexplained), 20 * MS, "{x:#?}");
        let held = |c: &(u64, u64, Cause)| {
            matches!(
                c.2,
                Cause::Blocked {
                    on: BlockedOn::RelayWait,
                    ..
                }
            )
        };
        assert!(!causes(&x).iter().any(held), "{x:#?}");
        // A deadline shorter than the relay's delay: what no stretch
        // accounts for is unexplained, first.
        let x = explain_datagram(
            &tl,
            &receiver,
            Some(&sender),
            Some(&relay),
            at(1),
            at(0),
            received,
            at(35),
            2 * MS,
        );
        assert_tiles(&x);
        assert_eq!(
            x.segments[0].cause,
            Cause::Unexplained { why: Gap::NotRecorded },
            "{x:#?}"
        );
        assert_eq!(x.segments[0].len_ns(), MS, "{x:#?}");
    }

    /// The relay woken at the frame's due time onto a CPU a hog holds:
    /// the frame waited behind the hog, the relay's wait.
    #[test]
    fn a_relay_queued_behind_a_hog_names_the_hog() {
        let events = [
            sleep(at(0), 0, PROBE, 0),
            switch(at(0), 1, 0, HOG, 0, 0),
            wake(at(10), 1, RELAY, HOG, 1),
            preempt(at(40), 1, HOG, RELAY),
            sleep(at(40) + 200 * US, 1, RELAY, HOG),
        ];
        let tl = timeline(2, &events, at(100));
        let (probe, relay) = (tl.probe(PROBE).unwrap(), tl.probe(RELAY).unwrap());
        let x = explain_arrival(&tl, &probe, Some(&relay), at(0), at(0), at(30) + 200 * US, 10 * MS);
        assert_tiles(&x);
        let kinds: Vec<(u64, CauseKind)> = x.segments.iter().map(|s| (s.len_ns(), s.cause.kind())).collect();
        assert_eq!(
            kinds,
            vec![(30 * MS, CauseKind::WaitedForCpu), (200 * US, CauseKind::Blocked)]
        );
        assert_eq!(x.segments[0].cause.culprit(PROBE).0, Some(Who::Thread(HOG)));
        // No relay recorded: the path's part is unexplained, never guessed.
        let x = explain_arrival(&tl, &probe, None, at(0), at(0), at(30), 10 * MS);
        assert_tiles(&x);
        assert_eq!(
            x.by_kind()[CauseKind::ALL
                .iter()
                .position(|k| *k == CauseKind::Unexplained)
                .unwrap()],
            30 * MS
        );
    }

    /// CPU 1 busy with another thread throughout, so no CPU idles.
    fn cpu1_busy() -> Vec<Event> {
        vec![switch(T0, 1, 0, OTHER, 0, 0)]
    }

    /// The probe runs on CPU 0 for 1 ms and goes to sleep; a FIFO hog takes
    /// CPU 0 at 2 ms.
    fn probe_asleep_then_hog() -> Vec<Event> {
        let mut ev = cpu1_busy();
        ev.extend([
            switch(T0, 0, 0, PROBE, 0, 0),
            sleep(at(1), 0, PROBE, 0),
            switch(at(2), 0, 0, HOG, 0, F_NEXT_RT),
        ]);
        ev
    }

    #[test]
    fn behind_a_fifo_hog_it_waited_for_the_cpu() {
        let mut ev = probe_asleep_then_hog();
        ev.extend([wake(at(10), 0, PROBE, 0, 0), preempt(at(40), 0, HOG, PROBE)]);
        let tl = timeline(2, &ev, at(50));
        let x = explained(&tl, at(10), at(40));
        assert_eq!(x.segments.len(), 1, "{x:#?}");
        assert_eq!(
            x.segments[0].cause,
            Cause::WaitedForCpu {
                cpu: 0,
                behind: Who::Thread(HOG),
                idle_elsewhere_ns: 0
            }
        );
        assert_eq!(x.ns_of(CauseKind::WaitedForCpu), 30 * MS);
    }

    /// A host that hides its own agent's events: the CPU switched to the
    /// agent at 8 ms and the next switch seen (at 12 ms) is from another
    /// thread, so 8-12 ms is dark; the probe's wake-up (planned at 10 ms)
    /// is not seen. It came in the dark stretch: its time there is
    /// unexplained, and from 12 ms the probe waited behind what ran.
    #[test]
    fn a_wake_up_lost_in_a_dark_stretch_leaves_only_the_stretch_unexplained() {
        const AGENT: u32 = 500;
        let mut ev = probe_asleep_then_hog();
        ev.extend([
            preempt(at(8), 0, HOG, AGENT),
            // AGENT's switch-out and the probe's wake-up are hidden.
            preempt(at(12), 0, OTHER + 1, HOG),
            preempt(at(40), 0, HOG, PROBE),
        ]);
        let tl = timeline(2, &ev, at(50));
        let x = explained(&tl, at(10), at(40));
        assert_eq!(x.ns_of(CauseKind::Unexplained), 2 * MS, "{x:#?}");
        assert_eq!(x.ns_of(CauseKind::WaitedForCpu), 28 * MS, "{x:#?}");
        // Without the dark stretch the same missing wake-up leaves it all
        // open.
        let mut ev = probe_asleep_then_hog();
        ev.push(preempt(at(40), 0, HOG, PROBE));
        let tl = timeline(2, &ev, at(50));
        let x = explained(&tl, at(10), at(40));
        assert_eq!(x.ns_of(CauseKind::Unexplained), 30 * MS, "{x:#?}");
    }

    #[test]
    fn woken_late_on_an_idle_cpu_the_timer_was_late() {
        let mut ev = cpu1_busy();
        ev.extend([
            switch(T0, 0, 0, PROBE, 0, 0),
            sleep(at(1), 0, PROBE, 0),
            // Planned at 10 ms; the timer's wake-up comes at 13 ms, and the
            // idle CPU takes 50 us to run it.
            wake(at(13), 0, PROBE, 0, 0),
            switch(at(13) + 50 * US, 0, 0, PROBE, 0, 0),
        ]);
        let tl = timeline(2, &ev, at(20));
        let x = explained(&tl, at(10), at(13) + 50 * US);
        assert_eq!(x.ns_of(CauseKind::LateTimer), x.lateness_ns());
        assert_eq!(
            x.segments[0].cause,
            Cause::LateTimer {
                how: Late::Timer,
                by: Who::Idle,
                cpu: Some(0)
            }
        );
        assert_eq!(x.segments[0].len_ns(), 3 * MS);
        assert_eq!(
            x.segments[1].cause,
            Cause::LateTimer {
                how: Late::IdleExit,
                by: Who::Idle,
                cpu: Some(0)
            }
        );
        assert_eq!(x.segments[1].len_ns(), 50 * US);
    }

    /// `cpu`'s steal clock at `clock` ns, seen by its event at `ts` (its
    /// first such event sets where the clock stands).
    fn steal(ts: u64, cpu: u16, clock: u64) -> Event {
        Event {
            ts,
            a: clock as u32,
            b: (clock >> 32) as u32,
            c: 0,
            cpu,
            kind: kind::STEAL,
            flags: 0,
        }
    }

    /// The machine's vCPU taken away while its timer was due: the timer
    /// fires when the vCPU runs again, and the steal clock says how long
    /// it was gone. That stretch is steal, the rest still the late timer.
    #[test]
    fn a_timer_due_while_the_cpu_was_stolen_is_steal() {
        let mut ev = cpu1_busy();
        ev.extend([
            switch(T0, 0, 0, PROBE, 0, 0),
            steal(T0, 0, 40 * MS),
            sleep(at(1), 0, PROBE, 0),
            // Planned at 10 ms; taken from 9 to 17 ms (8 ms stolen, seen at
            // 17 ms), the timer's wake-up at 17 ms.
            steal(at(17), 0, 48 * MS),
            // The same clock again (a program interrupted between its read
            // and its write emits it twice): nothing more was stolen.
            steal(at(17), 0, 48 * MS),
            wake(at(17), 0, PROBE, 0, 0),
            switch(at(17) + 50 * US, 0, 0, PROBE, 0, 0),
        ]);
        let tl = timeline(2, &ev, at(20));
        assert!(tl.coverage().steal);
        let x = explained(&tl, at(10), at(17) + 50 * US);
        assert_tiles(&x);
        assert_eq!(x.ns_of(CauseKind::Steal), 7 * MS, "{x:#?}");
        assert_eq!(x.segments[0].cause, Cause::Stolen { cpu: 0 });
        assert_eq!(x.ns_of(CauseKind::LateTimer), 50 * US, "{x:#?}");
        // The kernel updates the clock the recorder reads a few events
        // after the vCPU runs again (here an interrupt's, 10 us before):
        // the steal lies in the gaps between events, the latest long ones
        // first, at their ends.
        let irq = |ts: u64, kind: u8| Event {
            ts,
            a: 24,
            b: OTHER,
            c: 0,
            cpu: 0,
            kind,
            flags: 0,
        };
        let mut ev = cpu1_busy();
        ev.extend([
            switch(T0, 0, 0, PROBE, 0, 0),
            steal(T0, 0, 1),
            sleep(at(5), 0, PROBE, 0),
            switch(at(14), 0, 0, OTHER, 0, 0),
            irq(at(17) - 10 * US, kind::IRQ_ENTRY),
            irq(at(17) - 5 * US, kind::IRQ_EXIT),
            steal(at(17), 0, 1 + 5 * MS),
            wake(at(17), 0, PROBE, OTHER, 0),
            preempt(at(17), 0, OTHER, PROBE),
        ]);
        let tl = timeline(2, &ev, at(20));
        let x = explained(&tl, at(10), at(17));
        assert_eq!(x.ns_of(CauseKind::Steal), 5 * MS, "{x:#?}");
        assert_eq!(x.ns_of(CauseKind::LateTimer), 2 * MS, "{x:#?}");
        let stolen: Vec<(u64, u64)> = x
            .segments
            .iter()
            .filter(|s| s.cause.kind() == CauseKind::Steal)
            .map(|s| (s.start_ns, s.end_ns))
            .collect();
        assert_eq!(stolen, vec![(at(12) - 10 * US, at(17) - 10 * US)]);
    }

    /// Queued behind a hog on a vCPU the hypervisor took for part of the
    /// wait: the hog did not run then either.
    #[test]
    fn a_wait_on_a_stolen_cpu_is_split_into_the_occupant_and_steal() {
        let mut ev = probe_asleep_then_hog();
        ev.extend([
            steal(at(3), 0, 7 * MS),
            wake(at(10), 0, PROBE, 0, 0),
            steal(at(25), 0, 12 * MS),
            preempt(at(40), 0, HOG, PROBE),
        ]);
        let tl = timeline(2, &ev, at(50));
        let x = explained(&tl, at(10), at(40));
        assert_tiles(&x);
        assert_eq!(x.ns_of(CauseKind::Steal), 5 * MS, "{x:#?}");
        assert_eq!(x.ns_of(CauseKind::WaitedForCpu), 25 * MS, "{x:#?}");
        let stolen: Vec<(u64, u64)> = x
            .segments
            .iter()
            .filter(|s| s.cause == Cause::Stolen { cpu: 0 })
            .map(|s| (s.start_ns, s.end_ns))
            .collect();
        assert_eq!(stolen, vec![(at(20), at(25))]);
    }

    #[test]
    fn a_receiver_asleep_until_its_datagram_came_was_blocked_on_it() {
        use ontime_recording::event::F_IRQ_VECTOR;
        // A local timer's run with the network's softirq inside it.
        let irq = |ts: u64, kind: u8, a: u32, flags: u8| Event {
            ts,
            a,
            b: OTHER,
            c: 0,
            cpu: 0,
            kind,
            flags,
        };
        let ev = vec![
            switch(T0, 0, 0, PROBE, 0, 0),
            // In recv since 1 ms; the datagram is due at 10 ms and comes in
            // at 14 ms, from NET_RX (3) run at the end of a timer interrupt.
            sleep(at(1), 0, PROBE, OTHER),
            irq(at(14), kind::IRQ_ENTRY, 0xec, F_IRQ_VECTOR),
            irq(at(14) + 5 * US, kind::SOFTIRQ_ENTRY, 3, 0),
            wake(at(14) + 10 * US, 0, PROBE, OTHER, 0),
            irq(at(14) + 15 * US, kind::SOFTIRQ_EXIT, 3, 0),
            irq(at(14) + 20 * US, kind::IRQ_EXIT, 0xec, F_IRQ_VECTOR),
            preempt(at(14) + 30 * US, 0, OTHER, PROBE),
        ];
        let tl = timeline(2, &ev, at(30));
        let receiver = tl.probe(PROBE).unwrap().on_messages();
        let x = explain(&tl, &receiver, at(10), at(14) + 30 * US);
        assert_eq!(x.ns_of(CauseKind::LateTimer), 0, "{x:#?}");
        assert_eq!(
            x.segments[0].cause,
            Cause::Blocked {
                on: BlockedOn::Interrupt,
                by: Who::Unknown,
                cpu: Some(0),
                irq: Some(Irq::Soft(3))
            },
            "{x:#?}"
        );
        assert!(x.segments[0].len_ns() >= 4 * MS, "{x:#?}");
        // The same thread as a probe that sleeps on its timer: a late timer.
        let x = explained(&tl, at(10), at(14) + 30 * US);
        assert!(x.ns_of(CauseKind::LateTimer) >= 4 * MS, "{x:#?}");
    }

    #[test]
    fn a_sleep_its_timer_ended_after_an_early_wake_is_a_late_timer() {
        use ontime_recording::event::F_IRQ_VECTOR;
        let timer = |ts: u64, kind: u8| Event {
            ts,
            a: 0xec,
            b: OTHER,
            c: 0,
            cpu: 0,
            kind,
            flags: F_IRQ_VECTOR,
        };
        let ev = vec![
            switch(T0, 0, 0, PROBE, 0, 0),
            sleep(at(1), 0, PROBE, OTHER),
            // Planned at 10 ms. At 12 ms the local timer wakes it before its
            // time (a guest's timer, early by its clock): it runs 300 us in
            // the kernel and sleeps again, until the timer at 20 ms.
            timer(at(12), kind::IRQ_ENTRY),
            wake(at(12) + 10 * US, 0, PROBE, OTHER, 0),
            timer(at(12) + 20 * US, kind::IRQ_EXIT),
            preempt(at(12) + 30 * US, 0, OTHER, PROBE),
            sleep(at(12) + 300 * US, 0, PROBE, OTHER),
            timer(at(20), kind::IRQ_ENTRY),
            wake(at(20) + 10 * US, 0, PROBE, OTHER, 0),
            timer(at(20) + 20 * US, kind::IRQ_EXIT),
            preempt(at(20) + 50 * US, 0, OTHER, PROBE),
        ];
        let tl = timeline(2, &ev, at(30));
        let x = explained(&tl, at(10), at(20) + 50 * US);
        assert_eq!(x.ns_of(CauseKind::Blocked), 0, "{x:#?}");
        assert!(x.ns_of(CauseKind::LateTimer) >= 9 * MS, "{x:#?}");
    }

    #[test]
    fn work_past_its_slack_is_its_own() {
        let mut ev = cpu1_busy();
        ev.extend([switch(at(5), 0, 0, PROBE, 0, 0), sleep(at(30), 0, PROBE, 0)]);
        let tl = timeline(2, &ev, at(40));
        let x = explained(&tl, at(10), at(30));
        assert_eq!(x.segments.len(), 1);
        assert_eq!(x.segments[0].cause, Cause::OwnWork { cpu: 0 });
        assert_eq!(x.ns_of(CauseKind::OwnWork), 20 * MS);
    }

    #[test]
    fn an_interrupt_inside_a_wait_is_interrupts() {
        let mut ev = probe_asleep_then_hog();
        ev.extend([
            wake(at(10), 0, PROBE, 0, 0),
            irq(at(15), 0, kind::SOFTIRQ_ENTRY, 3),
            irq(at(20), 0, kind::SOFTIRQ_EXIT, 3),
            preempt(at(30), 0, HOG, PROBE),
        ]);
        let tl = timeline(2, &ev, at(40));
        assert!(tl.coverage().irqs);
        let x = explained(&tl, at(10), at(30));
        assert_eq!(x.ns_of(CauseKind::Interrupts), 5 * MS);
        assert_eq!(x.ns_of(CauseKind::WaitedForCpu), 15 * MS);
        assert_eq!(
            x.segments[1].cause,
            Cause::Interrupts {
                cpu: 0,
                irq: Irq::Soft(3)
            }
        );
    }

    /// Exits lost under load: a switch on the CPU, or another handler of
    /// the same kind entering, ends the handler whose exit went missing,
    /// so its time cannot swallow the rest of the time line.
    #[test]
    fn a_lost_interrupt_exit_ends_at_the_next_switch_or_entry() {
        let mut ev = probe_asleep_then_hog();
        ev.extend([
            wake(at(10), 0, PROBE, 0, 0),
            // Exit lost; another softirq entering ends it.
            irq(at(12), 0, kind::SOFTIRQ_ENTRY, 9),
            irq(at(13), 0, kind::SOFTIRQ_ENTRY, 3),
            irq(at(14), 0, kind::SOFTIRQ_EXIT, 3),
            // Exit lost; the switch ends it.
            irq(at(20), 0, kind::IRQ_ENTRY, 24),
            preempt(at(22), 0, HOG, OTHER),
            preempt(at(30), 0, OTHER, PROBE),
        ]);
        let tl = timeline(2, &ev, at(40));
        assert!(tl.coverage().repaired >= 2, "{:?}", tl.coverage());
        let x = explained(&tl, at(10), at(30));
        // 12-13 and 13-14 in softirqs, 20-22 in IRQ 24; the rest queued.
        assert_eq!(x.ns_of(CauseKind::Interrupts), 4 * MS);
        assert_eq!(x.ns_of(CauseKind::WaitedForCpu), 16 * MS);
    }

    #[test]
    fn a_hard_irq_nested_in_a_softirq_is_cut_out_of_it() {
        let mut ev = cpu1_busy();
        ev.extend([
            switch(at(5), 0, 0, PROBE, 0, 0),
            irq(at(12), 0, kind::SOFTIRQ_ENTRY, 3),
            irq(at(13), 0, kind::IRQ_ENTRY, 24),
            irq(at(14), 0, kind::IRQ_EXIT, 24),
            irq(at(16), 0, kind::SOFTIRQ_EXIT, 3),
            sleep(at(30), 0, PROBE, 0),
        ]);
        let tl = timeline(2, &ev, at(40));
        let x = explained(&tl, at(10), at(30));
        let pieces: Vec<(u64, Cause)> = x.segments.iter().map(|s| (s.len_ns(), s.cause)).collect();
        let soft = Cause::Interrupts {
            cpu: 0,
            irq: Irq::Soft(3),
        };
        let own = Cause::OwnWork { cpu: 0 };
        assert_eq!(
            pieces,
            vec![
                (2 * MS, own),
                (MS, soft),
                (
                    MS,
                    Cause::Interrupts {
                        cpu: 0,
                        irq: Irq::Hard(24)
                    }
                ),
                (2 * MS, soft),
                (14 * MS, own),
            ]
        );
    }

    #[test]
    fn another_cpu_idling_while_it_waits_is_flagged() {
        let mut ev = probe_asleep_then_hog();
        ev.extend([
            wake(at(10), 0, PROBE, 0, 0),
            sleep(at(20), 1, OTHER, 0),
            wake(at(25), 1, OTHER, 0, 1),
            switch(at(25), 1, 0, OTHER, 0, 0),
            preempt(at(30), 0, HOG, PROBE),
        ]);
        let tl = timeline(2, &ev, at(40));
        let x = explained(&tl, at(10), at(30));
        assert_eq!(
            x.segments,
            vec![crate::cause::Segment {
                start_ns: at(10),
                end_ns: at(30),
                side: Side::Host,
                cause: Cause::WaitedForCpu {
                    cpu: 0,
                    behind: Who::Thread(HOG),
                    idle_elsewhere_ns: 5 * MS
                }
            }]
        );
        // Pinned to CPU 0, no other CPU was one it could have used.
        let pinned = tl.probe(PROBE).unwrap().on_cpus(&[0]).unwrap();
        let x = explain(&tl, &pinned, at(10), at(30));
        assert_eq!(
            x.segments[0].cause,
            Cause::WaitedForCpu {
                cpu: 0,
                behind: Who::Thread(HOG),
                idle_elsewhere_ns: 0
            }
        );
        assert!(tl.probe(PROBE).unwrap().on_cpus(&[2]).is_err());
    }

    #[test]
    fn a_real_time_probe_behind_a_fair_task_is_throttled() {
        // A real-time loop (WAKER's tid) used the budget from 0.5 ms to
        // 2 ms; the fair HOG runs while the class is throttled.
        let mut ev = cpu1_busy();
        ev.extend([
            switch(T0, 0, 0, PROBE, 0, F_NEXT_RT),
            switch(T0 + 500 * US, 0, PROBE, WAKER, SLEEPING, F_PREV_RT | F_NEXT_RT),
            switch(at(2), 0, WAKER, HOG, 0, F_PREV_RT | F_PREV_RUNNABLE),
            wake(at(10), 0, PROBE, 0, 0),
            switch(at(20), 0, HOG, PROBE, 0, F_PREV_RUNNABLE | F_NEXT_RT),
        ]);
        let tl = timeline(2, &ev, at(30));
        assert!(tl.coverage().rt_classes);
        let x = explained(&tl, at(10), at(20));
        assert_eq!(x.ns_of(CauseKind::WaitedForCpu), RT_PREEMPT_GRACE_NS);
        assert_eq!(x.ns_of(CauseKind::Throttled), 10 * MS - RT_PREEMPT_GRACE_NS);
        assert_eq!(
            x.segments[1].cause,
            Cause::Throttled {
                cpu: 0,
                behind: Who::Thread(HOG),
                budget: Who::Thread(WAKER)
            }
        );
        assert_eq!(x.segments[1].cause.culprit(PROBE).0, Some(Who::Thread(WAKER)));
    }

    #[test]
    fn blocked_in_the_kernel_names_its_waker() {
        let mut ev = cpu1_busy();
        ev.extend([
            switch(at(5), 0, 0, PROBE, 0, 0),
            switch(at(12), 0, PROBE, 0, TASK_UNINTERRUPTIBLE, 0),
            wake(at(17), 1, PROBE, WAKER, 0),
            switch(at(17), 0, 0, PROBE, 0, 0),
            sleep(at(30), 0, PROBE, 0),
        ]);
        let tl = timeline(2, &ev, at(40));
        let x = explained(&tl, at(10), at(20));
        assert_eq!(x.ns_of(CauseKind::OwnWork), 5 * MS);
        assert_eq!(
            x.segments[1].cause,
            Cause::Blocked {
                on: BlockedOn::Io,
                by: Who::Thread(WAKER),
                cpu: Some(1),
                irq: None,
            }
        );
        assert_eq!(x.segments[1].len_ns(), 5 * MS);
    }

    #[test]
    fn a_wake_up_inside_a_softirq_is_the_interrupts_not_the_thread_it_interrupted() {
        let mut ev = cpu1_busy();
        ev.extend([
            switch(at(5), 0, 0, PROBE, 0, 0),
            sleep(at(12), 0, PROBE, 0),
            // NET_RX (3) on CPU 1 while OTHER runs there wakes the probe.
            irq(at(16), 1, kind::SOFTIRQ_ENTRY, 3),
            wake(at(17), 1, PROBE, OTHER, 0),
            irq(at(18), 1, kind::SOFTIRQ_EXIT, 3),
            switch(at(17), 0, 0, PROBE, 0, 0),
            sleep(at(30), 0, PROBE, 0),
        ]);
        let tl = timeline(2, &ev, at(40));
        let x = explained(&tl, at(10), at(20));
        assert_eq!(
            x.segments[1].cause,
            Cause::Blocked {
                on: BlockedOn::Interrupt,
                by: Who::Unknown,
                cpu: Some(1),
                irq: Some(Irq::Soft(3)),
            }
        );
        let report = x.report(&tl);
        let text = report.causes.iter().find(|c| c.cause == CauseKind::Blocked).unwrap();
        let said = crate::summary::describe(text.cause, text.detail, text.side, text.culprit.as_ref());
        assert_eq!(said, "blocked (interrupt), woken in softirq NET_RX on CPU 1");
    }

    #[test]
    fn a_lost_wake_up_leaves_the_sleep_unexplained() {
        let mut ev = cpu1_busy();
        ev.extend([
            switch(T0, 0, 0, PROBE, 0, 0),
            sleep(at(1), 0, PROBE, 0),
            // No wake-up: it went missing.
            switch(at(20), 0, 0, PROBE, 0, 0),
            sleep(at(25), 0, PROBE, 0),
        ]);
        let tl = timeline(2, &ev, at(40));
        let x = explained(&tl, at(10), at(22));
        assert_eq!(x.segments[0].cause, Cause::Unexplained { why: Gap::MissingEvent });
        assert_eq!(x.ns_of(CauseKind::Unexplained), 10 * MS);
        assert_eq!(x.ns_of(CauseKind::OwnWork), 2 * MS);
    }

    #[test]
    fn a_lost_switch_leaves_the_occupant_unknown() {
        let mut ev = probe_asleep_then_hog();
        ev.extend([
            wake(at(10), 0, PROBE, 0, 0),
            // CPU 0 ran HOG, but OTHER is seen leaving it: the switch from
            // HOG to OTHER went missing, so who held it since 2 ms is open.
            preempt(at(30), 0, OTHER, PROBE),
        ]);
        let tl = timeline(2, &ev, at(40));
        assert_eq!(tl.coverage().repaired, 1);
        let x = explained(&tl, at(10), at(30));
        assert_eq!(
            x.segments,
            vec![crate::cause::Segment {
                start_ns: at(10),
                end_ns: at(30),
                side: Side::Host,
                cause: Cause::Unexplained {
                    why: Gap::UnknownOccupant
                }
            }]
        );
    }

    #[test]
    fn time_outside_the_recording_is_unexplained() {
        let mut ev = cpu1_busy();
        ev.extend([switch(at(5), 0, 0, PROBE, 0, 0), sleep(at(30), 0, PROBE, 0)]);
        let tl = timeline(2, &ev, at(40));
        let p = tl.probe(PROBE).unwrap();
        // Planned before the recording began, done after it ended.
        let x = explain(&tl, &p, T0 - 3 * MS, at(45));
        assert_tiles(&x);
        let not_recorded = Cause::Unexplained { why: Gap::NotRecorded };
        // Before the recording, and before the probe's first event (5 ms).
        assert_eq!(x.segments[0].cause, not_recorded);
        assert_eq!(x.segments[0].len_ns(), 3 * MS + 5 * MS);
        assert_eq!(x.segments[1].cause, Cause::OwnWork { cpu: 0 });
        assert_eq!(x.segments[1].len_ns(), 25 * MS);
        // Asleep from 30 ms to the end (40 ms) with no wake-up seen, then
        // past the end.
        assert_eq!(x.segments[2].cause, not_recorded);
        assert_eq!(x.segments[2].len_ns(), 10 * MS + 5 * MS);
        assert_eq!(x.segments.len(), 3);
    }

    #[test]
    fn on_time_or_early_has_no_causes() {
        let tl = timeline(2, &probe_asleep_then_hog(), at(40));
        let p = tl.probe(PROBE).unwrap();
        assert!(explain(&tl, &p, at(10), at(10)).segments.is_empty());
        assert!(explain(&tl, &p, at(10), at(9)).segments.is_empty());
    }

    #[test]
    fn causes_always_add_up_to_the_lateness() {
        // Everything at once, with a lost wake-up and a lost switch, on
        // three CPUs; every interval on a 1 ms grid.
        let mut ev = vec![
            switch(T0, 1, 0, OTHER, 0, 0),
            switch(T0, 0, 0, PROBE, 0, F_NEXT_RT),
            switch(at(2), 0, PROBE, 0, SLEEPING, F_PREV_RT),
            switch(at(3), 0, 0, HOG, 0, 0),
            wake(at(6), 1, PROBE, OTHER, 0),
            irq(at(7), 0, kind::IRQ_ENTRY, 9),
            irq(at(8), 0, kind::IRQ_EXIT, 9),
            preempt(at(12), 0, HOG, PROBE),
            switch(at(15), 0, PROBE, HOG, TASK_UNINTERRUPTIBLE, 0),
            wake(at(18), 2, PROBE, 0, 2),
            switch(at(19), 2, 0, PROBE, 0, 0),
            sleep(at(21), 2, PROBE, 0),
            sleep(at(22), 1, OTHER, 0),
            // Lost wake-up of the probe; lost switch on CPU 0.
            switch(at(26), 1, 0, PROBE, 0, 0),
            preempt(at(28), 1, PROBE, OTHER),
            preempt(at(31), 0, WAKER, PROBE),
            sleep(at(33), 0, PROBE, 0),
        ];
        ev.push(irq(at(29), 1, kind::SOFTIRQ_ENTRY, 7));
        ev.push(irq(at(30), 1, kind::SOFTIRQ_EXIT, 7));
        let tl = timeline(3, &ev, at(36));
        let p = tl.probe(PROBE).unwrap();
        let mut x = Explanation::default();
        for planned in 0..36 {
            for actual in planned..40 {
                explain_into(&tl, &p, at(planned), at(actual) + 17 * US, &mut x);
                assert_tiles(&x);
            }
        }
        explain_into(&tl, &p, at(4), at(34), &mut x);
        assert!(x.ns_of(CauseKind::Unexplained) > 0, "the lost events leave time open");
        assert!(x.ns_of(CauseKind::Interrupts) > 0);
        assert!(x.ns_of(CauseKind::Blocked) > 0);
    }
}
