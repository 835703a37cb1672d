//! An agent's spool: finished window files waiting to be published,
//! oldest first, bounded in bytes. When a new window would exceed the
//! bound, the oldest are dropped and counted; nothing is dropped silently.

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

    /// Queues a finished window, dropping the oldest beyond the bound;
    /// the windows dropped.
    pub fn push(&mut self, file: PathBuf) -> Vec<PathBuf> {
        let mut gone = Vec::new();
        let size = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
        self.queue.push_back((file, size));
        self.bytes += size;
        self.queued += 1;
        while self.bytes > self.max_bytes && self.queue.len() > 1 {
            if let Some((old, n)) = self.queue.pop_front() {
                remove_window(&old);
                self.bytes -= n;
                self.dropped += 1;
                ontime_core::errln!(
                    "ontime agent: spool full ({} MiB bound): dropped window {} ({} dropped so far)",
                    self.max_bytes >> 20,
                    old.display(),
                    self.dropped
                );
                gone.push(old);
            }
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

/// A window file and what an agent keeps beside it (a replay's start).
fn remove_window(p: &Path) {
    let _ = std::fs::remove_file(p);
    let _ = std::fs::remove_file(p.with_extension("start"));
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
}
