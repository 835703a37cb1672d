//! The one recording loop. Every recorder (scheduler events with their
//! stack samples, I/O events) is a [`Capture`] this loop drives: wait on
//! the first capture for data (or the drain interval), drain them all,
//! pick up new targets once a second, and at the end stop every kernel
//! side before the last drain so nothing arrives after it. A recorder owns
//! what it captures and where it writes; no recorder owns a loop.
//!
//! The loop also owns when the recording ends: at the deadline of `-D`
//! (or when the stop is seen), not when the kernel side is detached and
//! drained, which takes a while (tracepoint links are released one RCU
//! grace period at a time; `--all` with hundreds of new processes has a
//! long last drain). Each capture is told the end and keeps nothing
//! stamped after it, so `-d 3s` records 3 s.

use anyhow::Result;
use ontime_core::time::MonoNs;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// One kind of capture the loop drives.
pub(crate) trait Capture {
    /// Blocks at most `timeout` until the kernel reports data.
    fn wait(&mut self, timeout: Duration);
    /// Stops the kernel side: nothing arrives after the next drain, and
    /// nothing stamped after `end` (the recording's end) is kept.
    fn stop(&mut self, end: MonoNs);
    /// Moves what arrived into the recording (`finishing`: the last time,
    /// after [`Capture::stop`]).
    fn drain(&mut self, finishing: bool) -> Result<()>;
    /// Targets created since the last call (cgroups, threads).
    fn rescan(&mut self) -> Result<()>;
}

/// Drives `captures` until `stop` is set or `until` has passed, and
/// returns the recording's end: `until` once it has passed (however late
/// the loop saw it), else the moment the stop was seen.
pub(crate) fn drive(
    captures: &mut [&mut dyn Capture],
    stop: &AtomicBool,
    until: Option<MonoNs>,
    drain_every: Duration,
) -> Result<MonoNs> {
    let mut last_rescan = MonoNs::now();
    loop {
        let now = MonoNs::now();
        let end = match until.filter(|&u| now >= u) {
            Some(u) => Some(u),
            None => stop.load(Ordering::Relaxed).then_some(now),
        };
        let finishing = end.is_some();
        if let Some(end) = end {
            for c in captures.iter_mut() {
                c.stop(end);
            }
        } else if let Some(first) = captures.first_mut() {
            let left = until
                .map(|u| Duration::from_nanos(u.0.saturating_sub(MonoNs::now().0)))
                .unwrap_or(drain_every);
            first.wait(left.min(drain_every));
        }
        for c in captures.iter_mut() {
            c.drain(finishing)?;
        }
        if let Some(end) = end {
            return Ok(end);
        }
        let now = MonoNs::now();
        if now.since(last_rescan) >= 1_000_000_000 {
            last_rescan = now;
            for c in captures.iter_mut() {
                c.rescan()?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts what the loop asked of it.
    #[derive(Default)]
    struct Counting {
        waits: u32,
        drains: u32,
        last_drain_after_stop: bool,
        stopped: Option<MonoNs>,
    }

    impl Capture for Counting {
        fn wait(&mut self, _timeout: Duration) {
            self.waits += 1;
        }
        fn stop(&mut self, end: MonoNs) {
            self.stopped = Some(end);
        }
        fn drain(&mut self, finishing: bool) -> Result<()> {
            self.drains += 1;
            self.last_drain_after_stop = finishing && self.stopped.is_some();
            Ok(())
        }
        fn rescan(&mut self) -> Result<()> {
            Ok(())
        }
    }

    /// Every capture is stopped before its last drain; only the first is
    /// waited on; a stop already set drains once.
    #[test]
    fn captures_are_stopped_before_the_last_drain() {
        let (mut a, mut b) = (Counting::default(), Counting::default());
        let stop = AtomicBool::new(true);
        let before = MonoNs::now();
        let end = drive(&mut [&mut a, &mut b], &stop, None, Duration::from_millis(1)).unwrap();
        assert!(before <= end && end <= MonoNs::now());
        for c in [&a, &b] {
            assert_eq!(c.drains, 1);
            assert!(c.last_drain_after_stop);
            assert_eq!(c.stopped, Some(end), "told the end it ends at");
        }
        let (mut a, mut b) = (Counting::default(), Counting::default());
        let stop = AtomicBool::new(false);
        let until = Some(MonoNs::now().add_ns(20_000_000));
        let end = drive(&mut [&mut a, &mut b], &stop, until, Duration::from_millis(1)).unwrap();
        assert!(a.waits >= 1 && b.waits == 0, "only the first capture is waited on");
        assert!(a.drains >= 2 && a.drains == b.drains && b.last_drain_after_stop);
        assert_eq!(Some(end), until, "a recording with a duration ends at its deadline");
        assert_eq!(b.stopped, until);
    }

    /// `-d 3s` ran 3.7 s when the last drain was slow: the end is the
    /// deadline, whatever the drains after it take.
    #[test]
    fn a_slow_last_drain_does_not_lengthen_the_recording() {
        struct Slow;
        impl Capture for Slow {
            fn wait(&mut self, timeout: Duration) {
                std::thread::sleep(timeout);
            }
            fn stop(&mut self, _end: MonoNs) {}
            fn drain(&mut self, _finishing: bool) -> Result<()> {
                std::thread::sleep(Duration::from_millis(30));
                Ok(())
            }
            fn rescan(&mut self) -> Result<()> {
                Ok(())
            }
        }
        let until = MonoNs::now().add_ns(10_000_000);
        let end = drive(
            &mut [&mut Slow],
            &AtomicBool::new(false),
            Some(until),
            Duration::from_millis(5),
        )
        .unwrap();
        assert_eq!(end, until);
        assert!(
            MonoNs::now().since(until) >= 30_000_000,
            "the last drain ran after the deadline"
        );
    }
}
