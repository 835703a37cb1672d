//! An agent's spool: finished window files waiting to be published,
//! oldest first, bounded in bytes. When a new window would exceed the
//! bound, the oldest are dropped and counted (the new one too when it
//! alone is larger than the bound): the finished windows never hold more
//! than the bound. Nothing is dropped silently.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

pub struct Spool {
    dir: PathBuf,
    max_bytes: u64,
    queue: VecDeque<(PathBuf, u64)>,
    bytes: u64,
    /// Windows dropped because the spool was full, since the agent started.
    pub dropped: u64,
    /// Windows queued (left by an earlier run, or finished by this one).
    pub queued: u64,
    /// This run's directory, which stays while the run writes into it.
    current: Option<PathBuf>,
}

impl Spool {
    /// The spool in `dir` (made if missing), holding at most `max_bytes`.
    /// Windows a previous agent left there are queued first, in order:
    /// they are finished (its recorder is gone) or read up to their last
    /// block.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<Spool> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create the spool {}", dir.display()))?;
        let mut s = Spool {
            dir: dir.to_path_buf(),
            max_bytes,
            queue: VecDeque::new(),
            bytes: 0,
            dropped: 0,
            queued: 0,
            current: None,
        };
        let mut left: Vec<PathBuf> = Vec::new();
        for run in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
            let run = run?.path();
            if run.is_dir() {
                left.extend(ontime_trace::store::window_files(&run)?);
            }
        }
        left.sort();
        for f in left {
            s.push(f);
        }
        Ok(s)
    }

    /// A directory for this agent run's windows (named by its start, so
    /// runs sort in time order).
    pub fn run_dir(&mut self, start_realtime_ns: u64) -> PathBuf {
        let d = self.dir.join(format!("run-{start_realtime_ns:020}"));
        self.current = Some(d.clone());
        d
    }

    /// Queues a finished window, dropping the oldest beyond the bound
    /// (and this one, when it alone exceeds it); the windows dropped.
    pub fn push(&mut self, file: PathBuf) -> Vec<PathBuf> {
        let mut gone = Vec::new();
        let size = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
        self.queue.push_back((file, size));
        self.bytes += size;
        self.queued += 1;
        while self.bytes > self.max_bytes {
            let Some((old, n)) = self.queue.pop_front() else { break };
            remove_window(&old);
            self.bytes -= n;
            self.dropped += 1;
            if self.queue.is_empty() && n > self.max_bytes {
                ontime_core::errln!(
                    "ontime agent: window {} ({}) is larger than the whole spool ({} bound): dropped ({} dropped so far); raise spool.max_bytes or shorten the window",
                    old.display(),
                    show_bytes(n),
                    show_bytes(self.max_bytes),
                    self.dropped
                );
            } else {
                ontime_core::errln!(
                    "ontime agent: spool full ({} bound): dropped window {} ({} dropped so far)",
                    show_bytes(self.max_bytes),
                    old.display(),
                    self.dropped
                );
            }
            gone.push(old);
        }
        gone
    }

    pub fn front(&self) -> Option<&Path> {
        self.queue.front().map(|(p, _)| p.as_path())
    }

    /// The oldest window was published: it leaves the spool.
    pub fn published(&mut self) {
        if let Some((p, n)) = self.queue.pop_front() {
            remove_window(&p);
            self.bytes -= n;
            if let Some(dir) = p.parent().filter(|d| Some(*d) != self.current.as_deref()) {
                // An earlier run's directory goes once empty.
                let _ = std::fs::remove_dir(dir);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// A size in the unit that shows it best: a 300 KiB bound is not "0 MiB".
pub fn show_bytes(n: u64) -> String {
    let (unit, scale) = match n {
        n if n >= 1 << 30 => ("GiB", (1u64 << 30) as f64),
        n if n >= 1 << 20 => ("MiB", (1u64 << 20) as f64),
        n if n >= 1 << 10 => ("KiB", (1u64 << 10) as f64),
        _ => return format!("{n} bytes"),
    };
    let v = n as f64 / scale;
    if v.fract() == 0.0 {
        format!("{v:.0} {unit}")
    } else {
        format!("{v:.1} {unit}")
    }
}

/// A window file and what an agent keeps beside it (a replay's start).
fn remove_window(p: &Path) {
    let _ = std::fs::remove_file(p);
    let _ = std::fs::remove_file(p.with_extension("start"));
    let _ = std::fs::remove_file(crate::probes::late_file(p));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_are_dropped_and_counted_beyond_the_bound() {
        let d = tempfile::tempdir().unwrap();
        let mut s = Spool::open(d.path(), 250).unwrap();
        let run = s.run_dir(1);
        std::fs::create_dir_all(&run).unwrap();
        for i in 1..=4 {
            let f = ontime_trace::store::window_file(&run, i);
            std::fs::write(&f, [0u8; 100]).unwrap();
            s.push(f);
        }
        assert_eq!(s.dropped, 2);
        assert_eq!(s.len(), 2);
        assert_eq!(s.front(), Some(ontime_trace::store::window_file(&run, 3).as_path()));
        assert!(!ontime_trace::store::window_file(&run, 1).exists());
        s.published();
        assert_eq!((s.len(), s.bytes()), (1, 100));
        // A new agent finds what is left, in order.
        let again = Spool::open(d.path(), 250).unwrap();
        assert_eq!(again.front(), Some(ontime_trace::store::window_file(&run, 4).as_path()));
    }

    /// The bound holds exactly: a window larger than the whole spool is
    /// dropped too (it was kept, so a 300K spool held a 700 KB window and
    /// more), and never more than the bound is queued.
    #[test]
    fn the_spool_never_holds_more_than_its_bound() {
        let d = tempfile::tempdir().unwrap();
        let mut s = Spool::open(d.path(), 300 << 10).unwrap();
        let run = s.run_dir(1);
        std::fs::create_dir_all(&run).unwrap();
        let sizes = [200 << 10, 700 << 10, 100 << 10, 250 << 10, 50 << 10];
        for (i, n) in sizes.iter().enumerate() {
            let f = ontime_trace::store::window_file(&run, i as u64 + 1);
            std::fs::write(&f, vec![0u8; *n]).unwrap();
            let gone = s.push(f.clone());
            assert!(s.bytes() <= 300 << 10, "{} bytes after window {}", s.bytes(), i + 1);
            let on_disk: u64 = ontime_trace::store::window_files(&run)
                .unwrap()
                .iter()
                .map(|p| std::fs::metadata(p).unwrap().len())
                .sum();
            assert_eq!(on_disk, s.bytes(), "the spool counts what is on disk");
            if *n > 300 << 10 {
                assert!(
                    gone.contains(&f) && !f.exists(),
                    "window {} is over the bound alone",
                    i + 1
                );
            }
        }
        // 200K; 700K drops 200K and itself; 100K; 250K drops 100K; 50K fits.
        assert_eq!((s.len(), s.bytes(), s.dropped), (2, 300 << 10, 3));
    }

    #[test]
    fn sizes_show_in_their_unit() {
        assert_eq!(show_bytes(300 << 10), "300 KiB");
        assert_eq!(show_bytes(1 << 30), "1 GiB");
        assert_eq!(show_bytes(3 << 19), "1.5 MiB");
        assert_eq!(show_bytes(250), "250 bytes");
    }
}
