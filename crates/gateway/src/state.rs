//! What every connection of a running gateway shares, whatever its
//! protocol: the configuration and routes, the counters and receive-stamp
//! tally reported at exit, the receive log's sender, the stall, and the
//! fault draw and hold each request goes through.

use crate::config::GatewayConfig;
use crate::recvlog::LogBatch;
use crate::wire;
use ontime_core::stats::{LatencyHistogram, Summary};
use ontime_core::MonoNs;
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// Counters of what the gateway did, reported at exit.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct GatewayStats {
    pub requests: u64,
    pub answered_ok: u64,
    pub injected_errors: u64,
    pub injected_drops: u64,
    pub injected_malformed: u64,
    pub injected_spikes: u64,
    /// Answers held by a stall ([`GatewayStall`]).
    #[serde(default)]
    pub stalled: u64,
    pub bad_requests: u64,
    /// Which clock stamped the requests' receive times.
    #[serde(default)]
    pub stamps: StampStats,
}

/// The receive stamps of a run: how many requests the kernel stamped (the
/// reference) and how far the handler's own stamp came after it, the error
/// a user-space stamp would have carried.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct StampStats {
    /// Requests whose receive time is the kernel's stamp.
    pub kernel: u64,
    /// Requests stamped in user space: no kernel stamp on the connection,
    /// or one the handler could not trust (later than its own clock).
    pub user: u64,
    /// Why there were no kernel stamps, when there were none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// Handler stamp minus kernel stamp, per kernel-stamped request.
    pub user_minus_kernel: Summary,
}

impl StampStats {
    /// One line: who stamped the receive times and how far the handler's
    /// own stamp came after the kernel's.
    pub fn text(&self) -> String {
        let f = |v: Option<u64>| v.map_or("n/a".into(), ontime_core::duration::format_ns);
        let mut t = format!(
            "receive time stamped by the kernel for {} request(s), by the handler for {}",
            self.kernel, self.user
        );
        if self.kernel > 0 {
            let g = &self.user_minus_kernel;
            t += &format!(
                "; handler stamp minus kernel stamp p99 {} max {}",
                f(g.percentile(99.0)),
                f(g.max_ns)
            );
        }
        if let Some(u) = &self.unavailable {
            t += &format!(" (no kernel stamps: {u})");
        }
        t
    }
}

#[derive(Default)]
pub(crate) struct StampTally {
    kernel: AtomicU64,
    user: AtomicU64,
    pub(crate) unavailable: std::sync::Mutex<Option<String>>,
    gap: std::sync::Mutex<LatencyHistogram>,
}

impl StampTally {
    /// The receive time of a request the handler saw at `user_ns`, whose
    /// connection's last read carried kernel stamp `kernel_ns` (0: none).
    pub(crate) fn choose(&self, kernel_ns: u64, user_ns: u64) -> (u64, wire::ReceiveStamp) {
        if kernel_ns != 0 && kernel_ns <= user_ns {
            self.kernel.fetch_add(1, Relaxed);
            if let Ok(mut g) = self.gap.lock() {
                g.record(user_ns - kernel_ns);
            }
            (kernel_ns, wire::ReceiveStamp::Kernel)
        } else {
            self.user.fetch_add(1, Relaxed);
            (user_ns, wire::ReceiveStamp::User)
        }
    }

    pub(crate) fn snapshot(&self) -> StampStats {
        StampStats {
            kernel: self.kernel.load(Relaxed),
            user: self.user.load(Relaxed),
            unavailable: self.unavailable.lock().ok().and_then(|u| u.clone()),
            user_minus_kernel: self.gap.lock().map(|g| g.summary(None)).unwrap_or_default(),
        }
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) requests: AtomicU64,
    pub(crate) answered_ok: AtomicU64,
    pub(crate) injected_errors: AtomicU64,
    pub(crate) injected_drops: AtomicU64,
    pub(crate) injected_malformed: AtomicU64,
    pub(crate) injected_spikes: AtomicU64,
    pub(crate) stalled: AtomicU64,
    pub(crate) bad_requests: AtomicU64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> GatewayStats {
        GatewayStats {
            requests: self.requests.load(Relaxed),
            answered_ok: self.answered_ok.load(Relaxed),
            injected_errors: self.injected_errors.load(Relaxed),
            injected_drops: self.injected_drops.load(Relaxed),
            injected_malformed: self.injected_malformed.load(Relaxed),
            injected_spikes: self.injected_spikes.load(Relaxed),
            stalled: self.stalled.load(Relaxed),
            bad_requests: self.bad_requests.load(Relaxed),
            stamps: StampStats::default(),
        }
    }
}

pub(crate) struct State {
    pub(crate) cfg: GatewayConfig,
    /// (listener index, building name) -> building index.
    pub(crate) routes: HashMap<(usize, String), usize>,
    /// (listener index, Modbus unit) -> building index.
    pub(crate) units: HashMap<(usize, u8), usize>,
    /// Listener index -> (BACnet device instance, building index).
    pub(crate) devices: HashMap<usize, (u32, usize)>,
    pub(crate) counters: Counters,
    pub(crate) stamps: StampTally,
    pub(crate) log: Option<mpsc::Sender<LogBatch>>,
    /// This host's boot id, to tell whether a crawler's planned times are
    /// on our clock.
    pub(crate) boot_id: String,
    /// Answers wait until this CLOCK_MONOTONIC instant (0: none): a
    /// stalled controller (`server::GatewayStall`).
    pub(crate) stalled_until: Arc<AtomicU64>,
}

impl State {
    pub(crate) fn empty() -> State {
        State {
            cfg: GatewayConfig::generated(SocketAddr::from(([127, 0, 0, 1], 0)), 0, 0, false),
            routes: HashMap::new(),
            units: HashMap::new(),
            devices: HashMap::new(),
            counters: Counters::default(),
            stamps: StampTally::default(),
            log: None,
            boot_id: String::new(),
            stalled_until: Arc::default(),
        }
    }
}

/// The faults drawn for one request.
pub(crate) struct Draw {
    pub error: bool,
    pub drop: bool,
    pub malformed: bool,
    pub delay_ns: u64,
}

impl State {
    /// Draws one request's faults and controller delay (counting spikes).
    pub(crate) fn draw(&self) -> Draw {
        let f = &self.cfg.faults;
        let mut rng = rand::thread_rng();
        // Each part is at most an hour (Faults::validate); saturating all
        // the same, so no configuration can wrap a delay to nothing.
        let mut delay = f.delay_ns;
        if f.delay_random_ns > 0 {
            delay = delay.saturating_add(rng.gen_range(0..f.delay_random_ns));
        }
        if f.spike_probability > 0.0 && rng.gen_bool(f.spike_probability) {
            self.counters.injected_spikes.fetch_add(1, Relaxed);
            delay = delay.saturating_add(f.spike_ns);
        }
        Draw {
            error: f.error_probability > 0.0 && rng.gen_bool(f.error_probability),
            drop: f.drop_probability > 0.0 && rng.gen_bool(f.drop_probability),
            malformed: f.malformed_probability > 0.0 && rng.gen_bool(f.malformed_probability),
            delay_ns: delay,
        }
    }

    /// Waits the controller delay, then any stall: a stall holds whatever
    /// is due to go out while it lasts, and one that begins while this
    /// answer waits holds it too.
    pub(crate) async fn hold(&self, delay_ns: u64) {
        if delay_ns > 0 {
            tokio::time::sleep(Duration::from_nanos(delay_ns)).await;
        }
        let mut stalled = false;
        loop {
            let (until, now) = (self.stalled_until.load(Relaxed), MonoNs::now().0);
            if until <= now {
                break;
            }
            stalled = true;
            tokio::time::sleep(Duration::from_nanos(until - now)).await;
        }
        if stalled {
            self.counters.stalled.fetch_add(1, Relaxed);
        }
    }
}
