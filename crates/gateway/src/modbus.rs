//! The gateway's Modbus/TCP side (`protocol = "modbus"`): each building is
//! a unit on its address whose holding and input registers 0..points are
//! its points, in hundredths. Requests are stamped, logged, delayed,
//! stalled and faulted as getValues requests are:
//!
//! - an injected error answers exception 4 (server device failure) at once;
//! - an injected drop closes the connection unanswered;
//! - an injected malformed answer carries a byte count that does not match
//!   its frame;
//! - point faults have no Modbus form and are not injected.
//!
//! A read past a unit's points answers exception 2 (illegal data address),
//! an unknown unit 10 (gateway path unavailable), anything but a read of
//! registers 1 (illegal function) or 3 (illegal data value); a stream that
//! is not Modbus/TCP is closed.

use crate::kstamp::StampedStream;
use crate::points;
use crate::recvlog::LogBatch;
use crate::state::State;
use ontime_core::MonoNs;
use ontime_fieldbus::modbus::{self, Frame, Refusal};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A point's value as a register: hundredths, clamped to 0..=65535.
pub fn register_of(value: f64) -> u16 {
    (value * 100.0).round().clamp(0.0, u16::MAX as f64) as u16
}

/// Serves one connection until the client closes it, a read fails, the
/// stream is out of step or a drop is injected.
pub(crate) async fn serve(mut stream: StampedStream, kernel_ns: Arc<AtomicU64>, st: Arc<State>, li: usize) {
    // Room for a few pipelined frames; a frame is at most 260 bytes.
    let mut buf = [0u8; 4 * modbus::MAX_FRAME];
    let mut len = 0usize;
    loop {
        let n = match modbus::frame(&buf[..len]) {
            Frame::Complete(n) => n,
            Frame::Invalid(_) => {
                st.counters.bad_requests.fetch_add(1, Relaxed);
                return;
            }
            Frame::Partial => {
                match stream.read(&mut buf[len..]).await {
                    Ok(0) | Err(_) => return,
                    Ok(r) => len += r,
                }
                continue;
            }
        };
        if !answer(&mut stream, &buf[..n], kernel_ns.load(Relaxed), &st, li).await {
            return;
        }
        buf.copy_within(n..len, 0);
        len -= n;
    }
}

/// Answers one request frame; false when the connection is to close.
async fn answer(stream: &mut StampedStream, frame: &[u8], kernel_ns: u64, st: &State, li: usize) -> bool {
    let user_ns = MonoNs::now().0;
    let (recv_ns, _) = st.stamps.choose(kernel_ns, user_ns);
    st.counters.requests.fetch_add(1, Relaxed);
    let (tid, unit) = (modbus::transaction(frame), frame[6]);
    let refuse = |code: u8| Refusal {
        function: frame[7],
        code,
    };
    let read = match modbus::parse_read(frame) {
        Ok(r) => r,
        Err(refusal) => {
            st.counters.bad_requests.fetch_add(1, Relaxed);
            return write(stream, &modbus::encode_exception(tid, unit, refusal)).await;
        }
    };
    let Some(&bi) = st.units.get(&(li, unit)) else {
        st.counters.bad_requests.fetch_add(1, Relaxed);
        let e = modbus::encode_exception(tid, unit, refuse(modbus::GATEWAY_PATH_UNAVAILABLE));
        return write(stream, &e).await;
    };
    let b = &st.cfg.buildings[bi];
    let end = read.start as u32 + read.count as u32;
    if end > b.points {
        st.counters.bad_requests.fetch_add(1, Relaxed);
        let e = modbus::encode_exception(tid, unit, refuse(modbus::ILLEGAL_DATA_ADDRESS));
        return write(stream, &e).await;
    }
    let draw = st.draw();
    if draw.error {
        st.counters.injected_errors.fetch_add(1, Relaxed);
        let e = modbus::encode_exception(tid, unit, refuse(modbus::SERVER_DEVICE_FAILURE));
        return write(stream, &e).await;
    }
    // The gateway measured these points whether or not the answer arrives.
    if let Some(log) = &st.log {
        let _ = log.send(LogBatch {
            recv_ns,
            user_ns,
            building: bi,
            points: (read.start as u32..end).collect(),
            poll: None,
        });
    }
    st.hold(draw.delay_ns).await;
    if draw.drop {
        st.counters.injected_drops.fetch_add(1, Relaxed);
        return false;
    }
    let mut out = [0u8; modbus::MAX_FRAME];
    let values = (read.start as u32..end).map(|id| register_of(points::value(id, b.analog_percent, recv_ns)));
    let n = modbus::encode_registers(&read, values, &mut out);
    if draw.malformed {
        st.counters.injected_malformed.fetch_add(1, Relaxed);
        out[8] = out[8].wrapping_add(2);
    } else {
        st.counters.answered_ok.fetch_add(1, Relaxed);
    }
    write(stream, &out[..n]).await
}

async fn write(stream: &mut StampedStream, bytes: &[u8]) -> bool {
    stream.write_all(bytes).await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_hundredths_in_a_register() {
        assert_eq!(register_of(21.37), 2137);
        assert_eq!(register_of(1.0), 100);
        assert_eq!(register_of(-3.0), 0);
        assert_eq!(register_of(1e9), u16::MAX);
    }
}
