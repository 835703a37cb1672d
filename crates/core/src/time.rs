//! CLOCK_MONOTONIC in integer nanoseconds, and absolute-time waits on it.
//!
//! Probes plan every event at an absolute time fixed in advance and sleep
//! until that time with `clock_nanosleep(TIMER_ABSTIME)`, so a late wake-up
//! never shifts the schedule. Logic that depends on the clock takes a
//! [`Clock`] so tests can drive it with a fake one.

use std::cell::Cell;

/// An absolute time on CLOCK_MONOTONIC, in nanoseconds since boot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MonoNs(pub u64);

impl MonoNs {
    pub fn now() -> MonoNs {
        MonoNs(clock_ns(libc::CLOCK_MONOTONIC))
    }

    /// Nanoseconds from `earlier` to `self`; 0 if `earlier` is later.
    pub fn since(self, earlier: MonoNs) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    pub fn add_ns(self, ns: u64) -> MonoNs {
        MonoNs(self.0.saturating_add(ns))
    }

    pub fn as_timespec(self) -> libc::timespec {
        libc::timespec {
            tv_sec: (self.0 / 1_000_000_000) as libc::time_t,
            tv_nsec: (self.0 % 1_000_000_000) as libc::c_long,
        }
    }
}

/// Reads a clock in nanoseconds.
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; the clock ids we pass are
    // constants the kernel always supports.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Wall-clock time in nanoseconds since the Unix epoch (for manifests only;
/// never for measuring intervals).
pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// User plus system CPU time of a `rusage` (getrusage, wait4), ns.
pub fn rusage_cpu_ns(ru: &libc::rusage) -> u64 {
    let ns = |t: libc::timeval| t.tv_sec.max(0) as u64 * 1_000_000_000 + t.tv_usec.max(0) as u64 * 1000;
    ns(ru.ru_utime) + ns(ru.ru_stime)
}

/// Sleeps until `deadline` on CLOCK_MONOTONIC, resuming after signals.
pub fn sleep_until(deadline: MonoNs) {
    let ts = deadline.as_timespec();
    loop {
        // SAFETY: `ts` is a valid timespec; the remain pointer may be null
        // with TIMER_ABSTIME.
        let rc =
            unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
        if rc != libc::EINTR {
            return;
        }
    }
}

/// A source of monotonic time that can also wait until an absolute time.
pub trait Clock {
    fn now(&self) -> MonoNs;
    fn sleep_until(&self, deadline: MonoNs);
}

/// The real CLOCK_MONOTONIC.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> MonoNs {
        MonoNs::now()
    }
    fn sleep_until(&self, deadline: MonoNs) {
        sleep_until(deadline)
    }
}

/// A clock for tests: sleeping jumps to the deadline plus a scripted
/// lateness, so schedulers can be tested without real time.
#[derive(Debug, Default)]
pub struct FakeClock {
    now: Cell<u64>,
    /// Lateness added to each successive sleep (ns); the last one repeats.
    lateness: Vec<u64>,
    sleeps: Cell<usize>,
}

impl FakeClock {
    pub fn new(start_ns: u64, lateness: Vec<u64>) -> FakeClock {
        FakeClock {
            now: Cell::new(start_ns),
            lateness,
            sleeps: Cell::new(0),
        }
    }
}

impl Clock for FakeClock {
    fn now(&self) -> MonoNs {
        MonoNs(self.now.get())
    }
    fn sleep_until(&self, deadline: MonoNs) {
        let i = self.sleeps.get();
        self.sleeps.set(i + 1);
        let late = match self.lateness.get(i) {
            Some(l) => *l,
            None => self.lateness.last().copied().unwrap_or(0),
        };
        let woke = deadline.0.max(self.now.get()) + late;
        self.now.set(woke);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleep_until_does_not_return_early() {
        let start = MonoNs::now();
        let deadline = start.add_ns(2_000_000);
        sleep_until(deadline);
        assert!(MonoNs::now() >= deadline);
    }

    #[test]
    fn fake_clock_adds_scripted_lateness() {
        let c = FakeClock::new(100, vec![5, 0]);
        c.sleep_until(MonoNs(200));
        assert_eq!(c.now(), MonoNs(205));
        c.sleep_until(MonoNs(300));
        assert_eq!(c.now(), MonoNs(300));
    }
}
