//! The one recording loop. Every recorder (scheduler events with their
//! stack samples, I/O events) is a [`Capture`] this loop drives: wait on
//! the first capture for data (or the drain interval), drain them all,
//! pick up new targets once a second, and at the end stop every kernel
//! side before the last drain so nothing arrives after it. A recorder owns
//! what it captures and where it writes; no recorder owns a loop.

use anyhow::Result;
use ontime_core::time::MonoNs;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// One kind of capture the loop drives.
pub(crate) trait Capture {
    /// Blocks at most `timeout` until the kernel reports data.
    fn wait(&mut self, timeout: Duration);
    /// Stops the kernel side: nothing arrives after the next drain.
    fn stop(&mut self);
    /// Moves what arrived into the recording (`finishing`: the last time,
    /// after [`Capture::stop`]).
    fn drain(&mut self, finishing: bool) -> Result<()>;
    /// Targets created since the last call (cgroups, threads).
    fn rescan(&mut self) -> Result<()>;
}

/// Drives `captures` until `stop` is set or `until` has passed.
pub(crate) fn drive(
    captures: &mut [&mut dyn Capture],
    stop: &AtomicBool,
    until: Option<MonoNs>,
    drain_every: Duration,
) -> Result<()> {
    let mut last_rescan = MonoNs::now();
    loop {
        let finishing = stop.load(Ordering::Relaxed) || until.is_some_and(|u| MonoNs::now() >= u);
        if finishing {
            for c in captures.iter_mut() {
                c.stop();
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
        if finishing {
            return Ok(());
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
        stopped: bool,
    }

    impl Capture for Counting {
        fn wait(&mut self, _timeout: Duration) {
            self.waits += 1;
        }
        fn stop(&mut self) {
            self.stopped = true;
        }
        fn drain(&mut self, finishing: bool) -> Result<()> {
            self.drains += 1;
            self.last_drain_after_stop = finishing && self.stopped;
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
        drive(&mut [&mut a, &mut b], &stop, None, Duration::from_millis(1)).unwrap();
        for c in [&a, &b] {
            assert_eq!(c.drains, 1);
            assert!(c.last_drain_after_stop);
        }
        let (mut a, mut b) = (Counting::default(), Counting::default());
        let stop = AtomicBool::new(false);
        let until = Some(MonoNs::now().add_ns(20_000_000));
        drive(&mut [&mut a, &mut b], &stop, until, Duration::from_millis(1)).unwrap();
        assert!(a.waits >= 1 && b.waits == 0, "only the first capture is waited on");
        assert!(a.drains >= 2 && a.drains == b.drains && b.last_drain_after_stop);
    }
}
