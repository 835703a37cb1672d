//! Causes injected at known times, for checking the attribution against
//! ground truth (docs/explain.md, "Ground truth"): a SCHED_FIFO busy loop
//! held on one CPU for a drawn length, again and again; with a fair
//! companion, an ordinary thread busy on that CPU meanwhile too, so the
//! real-time class's budget runs out and the companion is what runs while
//! it is throttled. The windows returned are when the loop actually held
//! the CPU, read on CLOCK_MONOTONIC around it, not when it was planned.

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Result};
use ontime_core::rt::Policy;
use ontime_core::time::MonoNs;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// Busy bursts on one CPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuBurstSpec {
    pub cpu: usize,
    /// SCHED_FIFO priority: above the probe's, so the probe waits.
    pub priority: u8,
    /// When the bursts come and how long each holds the CPU.
    pub timing: Timing,
    /// An ordinary (SCHED_OTHER) thread busy on the CPU through each
    /// burst: what the CPU runs when the real-time class is throttled
    /// (bursts longer than the class's budget, 950 ms of 1 s by default).
    #[serde(default)]
    pub fair_companion: bool,
}

impl CpuBurstSpec {
    pub fn check(&self) -> Result<()> {
        self.timing.check()?;
        if !(1..=99).contains(&self.priority) {
            bail!("a SCHED_FIFO priority is 1..=99, not {}", self.priority);
        }
        Ok(())
    }
}

/// Runs the bursts on the calling thread (pinned to the CPU, SCHED_FIFO
/// while it runs them) until `for_ns` has passed or `stop` is set; returns
/// each burst's [start, end) on CLOCK_MONOTONIC.
pub fn cpu_bursts(spec: &CpuBurstSpec, stop: &AtomicBool) -> Result<Vec<(u64, u64)>> {
    spec.check()?;
    // Made before this thread turns real-time, so it stays SCHED_OTHER.
    let companion = if spec.fair_companion {
        Some(FairCompanion::start(spec.cpu)?)
    } else {
        None
    };
    ontime_core::rt::set_affinity(&[spec.cpu])?;
    ontime_core::rt::set_policy(Policy::Fifo {
        priority: spec.priority,
    })?;
    let _ = ontime_core::rt::set_timer_slack_ns(1);
    Ok(hold_windows(&spec.timing, stop, |until| {
        if let Some(c) = &companion {
            c.busy_until(until);
        }
        let mut now = MonoNs::now().0;
        while now < until && !stop.load(Ordering::Relaxed) {
            std::hint::spin_loop();
            now = MonoNs::now().0;
        }
        now
    }))
}

/// When an injector holds its cause: each window's length drawn uniformly
/// from [min_ns, max_ns], one window per `every_ns`, the first
/// `start_after_ns` after it starts, none starting later than `for_ns`
/// after that.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timing {
    pub min_ns: u64,
    pub max_ns: u64,
    pub every_ns: u64,
    pub start_after_ns: u64,
    pub for_ns: u64,
    pub seed: u64,
}

impl Timing {
    pub fn check(&self) -> Result<()> {
        if self.min_ns == 0 || self.min_ns > self.max_ns {
            bail!("a window's length must be a range min..max with 0 < min <= max");
        }
        if self.every_ns <= self.max_ns {
            bail!("windows must start further apart than their longest length (every > max)");
        }
        Ok(())
    }
}

/// How long a holder sleeping to its next window takes to hear a stop.
const STOP_HEARD_WITHIN_NS: u64 = 100_000_000;

/// Holds a cause in the windows `timing` draws, on the calling thread:
/// sleeps to each window's start (absolute, CLOCK_MONOTONIC), then
/// `hold(until)` holds it and returns when it let go. Returns each
/// window's actual [start, end), read around `hold`, until `for_ns` has
/// passed or `stop` is set; no allocation while a window is held.
pub fn hold_windows(timing: &Timing, stop: &AtomicBool, mut hold: impl FnMut(u64) -> u64) -> Vec<(u64, u64)> {
    let mut rng = SmallRng::seed_from_u64(timing.seed);
    let t0 = MonoNs::now();
    let last_start = t0.0 + timing.start_after_ns + timing.for_ns;
    let mut next = t0.0 + timing.start_after_ns;
    let mut windows = Vec::with_capacity((timing.for_ns / timing.every_ns.max(1) + 1) as usize);
    while next <= last_start && !stop.load(Ordering::Relaxed) {
        // In steps, so a stop is heard within one (a process told to end
        // writes its windows before its grace runs out).
        while MonoNs::now().0 < next && !stop.load(Ordering::Relaxed) {
            ontime_core::time::sleep_until(MonoNs(next.min(MonoNs::now().0 + STOP_HEARD_WITHIN_NS)));
        }
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let len = rng.gen_range(timing.min_ns..=timing.max_ns);
        let start = MonoNs::now().0;
        let end = hold(start + len);
        if windows.len() < windows.capacity() {
            windows.push((start, end));
        }
        next += timing.every_ns;
    }
    windows
}

/// Holds a cause that another thread carries out (a relay or a gateway
/// that waits while a stored instant lies ahead): a thread named `name`
/// stores each window's end through `set` and sleeps to it (a stop cuts it
/// short), then stores 0.
/// Joined, it returns the windows it held ([`hold_windows`]).
pub fn spawn_holder(
    name: &str,
    timing: Timing,
    stop: std::sync::Arc<AtomicBool>,
    set: impl Fn(u64) + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<Vec<(u64, u64)>>> {
    std::thread::Builder::new().name(name.into()).spawn(move || {
        let windows = hold_windows(&timing, &stop, |until| {
            set(until);
            // In steps: a stop ends the window (its end is when it did).
            while MonoNs::now().0 < until && !stop.load(Ordering::Relaxed) {
                ontime_core::time::sleep_until(MonoNs(until.min(MonoNs::now().0 + STOP_HEARD_WITHIN_NS)));
            }
            set(0);
            MonoNs::now().0
        });
        set(0);
        windows
    })
}

/// An ordinary thread pinned to the bursts' CPU that spins while told to
/// and sleeps on a channel otherwise: no load outside the bursts.
struct FairCompanion {
    /// Spin until this CLOCK_MONOTONIC instant; 0 cuts a burst short.
    until: std::sync::Arc<std::sync::atomic::AtomicU64>,
    tx: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FairCompanion {
    fn start(cpu: usize) -> Result<FairCompanion> {
        let until = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
        let shared = until.clone();
        let thread = std::thread::Builder::new().name("ontime-burst".into()).spawn(move || {
            let pinned = ontime_core::rt::set_affinity(&[cpu]);
            let ok = pinned.is_ok();
            let _ = ready_tx.send(pinned);
            if !ok {
                return;
            }
            while rx.recv().is_ok() {
                while MonoNs::now().0 < shared.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            }
        })?;
        ready_rx
            .recv()
            .map_err(|_| anyhow::anyhow!("the fair companion thread ended before it was pinned"))??;
        Ok(FairCompanion {
            until,
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    fn busy_until(&self, until_ns: u64) {
        self.until.store(until_ns, Ordering::Relaxed);
        if let Some(tx) = &self.tx {
            let _ = tx.send(());
        }
    }
}

impl Drop for FairCompanion {
    fn drop(&mut self) {
        self.until.store(0, Ordering::Relaxed);
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
