//! The flight recorder's retention rule over a continuous recording's
//! windows ([`crate::store`]): every finished window is held for a ring of
//! the last seconds; a window any late interval's surroundings overlap is
//! kept, the others are deleted once they leave the ring. Disk holds the
//! ring, the windows still open and at most `max_kept` kept windows; when
//! more would be kept, the kept window near the mildest late interval goes
//! first. What the rule kept, dropped and held at most is counted in a
//! [`FlightSummary`].
//!
//! The trigger is a probe's histogram log read as it is written
//! ([`ontime_core::hlog::HlogTail`]): each interval line carries the
//! interval's largest value, so a window is kept around every interval
//! whose maximum is over the threshold, at the interval's granularity.
//! Times are wall clock (the log's and the windows' `start_realtime_ns`):
//! both come from one clock on one host.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use ontime_core::hlog::HlogTail;
use ontime_core::time::MonoNs;

use crate::recording::Recording;

use ontime_core::hlog::IntervalPeak;
use serde::{Deserialize, Serialize};

/// What the rule keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlightOptions {
    /// How long a finished window is held at most before it is kept or
    /// deleted: it is decided sooner once every probe has logged past it
    /// (and `keep_around`), so this is the wait for a probe that stopped
    /// logging.
    pub ring_ns: u64,
    /// Kept on either side of a late interval (its planned times and its
    /// largest lateness).
    pub keep_around_ns: u64,
    /// Kept windows at most.
    pub max_kept: u64,
    /// An interval whose largest value exceeds this keeps its windows
    /// (0: every interval does, and the cap keeps those of the worst).
    pub threshold_ns: u64,
}

/// What the flight recorder did over a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FlightSummary {
    pub options: Option<FlightOptions>,
    /// Finished windows it saw.
    pub windows: u64,
    /// Windows kept at the end, and their bytes.
    pub kept: u64,
    pub bytes_kept: u64,
    /// Kept windows deleted because more than `max_kept` were kept.
    pub evicted: u64,
    /// Intervals over the threshold.
    pub triggers: u64,
    /// Of those, the ones logged after some of the windows around them
    /// had been deleted (their events may not be explained).
    pub triggers_too_late: u64,
    /// Window files that could not be deleted (left on disk, not kept),
    /// and the first error.
    #[serde(default)]
    pub delete_failures: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
    /// The most window bytes and files on disk at once (open windows
    /// aside).
    pub peak_bytes: u64,
    pub peak_windows: u64,
}

#[derive(Debug)]
struct Window {
    path: PathBuf,
    end_wall: u64,
    /// When it was finished (the caller's monotonic clock, ns).
    done_ns: u64,
    bytes: u64,
    /// The largest maximum of the late intervals around it (0: none).
    keep: u64,
    /// It left the ring and was kept.
    decided: bool,
}

#[derive(Clone, Copy, Debug)]
struct Trigger {
    from_wall: u64,
    to_wall: u64,
    max_ns: u64,
}

/// The windows on disk and the late intervals around them.
#[derive(Debug)]
pub struct FlightRing {
    opts: FlightOptions,
    /// By start (wall clock).
    windows: BTreeMap<u64, Window>,
    /// Late intervals whose surroundings may still reach a window not
    /// finished yet.
    pending: Vec<Trigger>,
    /// Everything before this was deleted.
    deleted_upto_wall: u64,
    bytes_on_disk: u64,
    summary: FlightSummary,
}

impl FlightRing {
    pub fn new(opts: FlightOptions) -> FlightRing {
        FlightRing {
            opts,
            windows: BTreeMap::new(),
            pending: Vec::new(),
            deleted_upto_wall: 0,
            bytes_on_disk: 0,
            summary: FlightSummary {
                options: Some(opts),
                ..FlightSummary::default()
            },
        }
    }

    /// A window file was finished at `now_ns` (monotonic): it covers
    /// [start_wall, end_wall).
    pub fn window_done(&mut self, path: &Path, start_wall: u64, end_wall: u64, now_ns: u64) {
        let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        let keep = self
            .pending
            .iter()
            .filter(|t| t.from_wall < end_wall && t.to_wall > start_wall)
            .map(|t| t.max_ns)
            .max()
            .unwrap_or(0);
        self.windows.insert(
            start_wall,
            Window {
                path: path.to_path_buf(),
                end_wall,
                done_ns: now_ns,
                bytes,
                keep,
                decided: false,
            },
        );
        self.summary.windows += 1;
        self.bytes_on_disk += bytes;
        self.summary.peak_bytes = self.summary.peak_bytes.max(self.bytes_on_disk);
        self.summary.peak_windows = self.summary.peak_windows.max(self.windows.len() as u64);
    }

    /// A probe logged an interval: over the threshold, the windows around
    /// it are to be kept.
    pub fn interval(&mut self, p: IntervalPeak) {
        if p.max_ns <= self.opts.threshold_ns || p.max_ns == 0 {
            return;
        }
        let t = Trigger {
            from_wall: p.start_wall_ns.saturating_sub(self.opts.keep_around_ns),
            to_wall: p.start_wall_ns + p.length_ns + p.max_ns + self.opts.keep_around_ns,
            max_ns: p.max_ns,
        };
        self.summary.triggers += 1;
        // Some of the windows around it already gone: its events may not
        // be explained.
        if t.from_wall < self.deleted_upto_wall {
            self.summary.triggers_too_late += 1;
        }
        for (_, w) in self.windows.range_mut(..t.to_wall) {
            if w.end_wall > t.from_wall {
                w.keep = w.keep.max(t.max_ns);
            }
        }
        self.pending.push(t);
    }

    /// Decides the windows no late interval can reach any more: those
    /// every probe has logged past (`logged_upto_wall`: the end of the
    /// earliest of the probes' last logged intervals, None while one has
    /// logged none) by `keep_around`, and those finished `ring` before
    /// `now_ns` whatever the logs say.
    pub fn expire(&mut self, now_ns: u64, logged_upto_wall: Option<u64>) {
        let (ring, keep) = (self.opts.ring_ns, self.opts.keep_around_ns);
        let due: Vec<u64> = self
            .windows
            .iter()
            .filter(|(_, w)| {
                !w.decided && (w.done_ns + ring <= now_ns || logged_upto_wall.is_some_and(|l| w.end_wall + keep <= l))
            })
            .map(|(&s, _)| s)
            .collect();
        self.decide(&due);
    }

    /// Decides every window left (the run is over) and says what was kept.
    pub fn finish(&mut self) -> (FlightSummary, Vec<PathBuf>) {
        let all: Vec<u64> = self.windows.keys().copied().collect();
        self.decide(&all);
        let kept: Vec<PathBuf> = self.windows.values().map(|w| w.path.clone()).collect();
        self.summary.kept = kept.len() as u64;
        self.summary.bytes_kept = self.windows.values().map(|w| w.bytes).sum();
        (self.summary.clone(), kept)
    }

    fn decide(&mut self, starts: &[u64]) {
        for s in starts {
            let Some(w) = self.windows.get_mut(s) else { continue };
            if w.decided {
                continue;
            }
            if w.keep > 0 {
                w.decided = true;
            } else {
                let end = w.end_wall;
                self.delete(*s);
                self.deleted_upto_wall = self.deleted_upto_wall.max(end);
            }
        }
        // Over the cap: the kept window around the mildest late interval
        // (of those, the oldest) goes.
        loop {
            let kept = self.windows.values().filter(|w| w.decided).count() as u64;
            if kept <= self.opts.max_kept {
                break;
            }
            let Some(victim) = self
                .windows
                .iter()
                .filter(|(_, w)| w.decided)
                .min_by_key(|(&s, w)| (w.keep, s))
                .map(|(&s, _)| s)
            else {
                break;
            };
            self.delete(victim);
            self.summary.evicted += 1;
        }
        // A late interval whose surroundings end before every undecided
        // window can keep nothing more.
        let oldest_open = self
            .windows
            .iter()
            .find(|(_, w)| !w.decided)
            .map_or(u64::MAX, |(&s, _)| s);
        let newest = self.windows.values().map(|w| w.end_wall).max().unwrap_or(0);
        self.pending.retain(|t| t.to_wall > oldest_open.min(newest));
    }

    /// Deletes a window; one that cannot be deleted is left on disk,
    /// counted, and no longer tracked (the run goes on).
    fn delete(&mut self, start: u64) {
        if let Some(w) = self.windows.remove(&start) {
            self.bytes_on_disk = self.bytes_on_disk.saturating_sub(w.bytes);
            match std::fs::remove_file(&w.path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    self.summary.delete_failures += 1;
                    self.summary
                        .first_error
                        .get_or_insert_with(|| format!("cannot delete {}: {e}", w.path.display()));
                }
            }
        }
    }
}

/// A run's windows as one second each: what the lab and `--explain` store.
pub const WINDOW: std::time::Duration = std::time::Duration::from_secs(1);
/// A week of minutes.
const MAX_RSS_MINUTES: usize = 7 * 24 * 60;

/// What a keeper kept, and the process's resident memory while it ran
/// (the recorder, its store and the keeper are threads of the process).
#[derive(Debug)]
pub struct Kept {
    pub summary: FlightSummary,
    /// Contiguous kept windows, each in time order.
    pub stretches: Vec<Vec<PathBuf>>,
    /// The most in the first minute, over the run, and in each minute
    /// (at most a week's), bytes.
    pub rss_first_minute_bytes: Option<u64>,
    pub rss_peak_bytes: Option<u64>,
    pub rss_by_minute_bytes: Vec<u64>,
}

/// The flight recorder's keeper, run on a thread of its own beside a
/// continuous recording of [`WINDOW`]s: follows the finished windows
/// (`windows`: the store's `windows_done`) and the probes' histogram logs
/// (`logs`: file and tag), and applies the retention rule. Ends when the
/// recorder has finished its last window (the channel closes), after a
/// last read of the logs (the probes are done by then). Nothing stops it:
/// a log that cannot be read is no longer followed (its windows wait out
/// the ring), an unreadable window is deleted, one that cannot be deleted
/// is counted.
pub fn keep(options: FlightOptions, logs: &[(PathBuf, &str)], windows: Receiver<PathBuf>) -> Kept {
    let mut ring = FlightRing::new(options);
    let mut tails: Vec<HlogTail> = logs.iter().map(|(p, tag)| HlogTail::new(p, tag)).collect();
    let started = Instant::now();
    let (mut rss_first, mut rss_peak) = (None::<u64>, None::<u64>);
    let mut last_rss = None::<Instant>;
    let mut by_minute: Vec<u64> = Vec::new();
    let follow = |ring: &mut FlightRing, tails: &mut Vec<HlogTail>| {
        tails.retain_mut(|t| match t.poll(&mut |p| ring.interval(p)) {
            Ok(()) => true,
            Err(e) => {
                ontime_core::errln!("ontime: flight recorder: {e:#}; no longer following it");
                false
            }
        });
    };
    loop {
        match windows.recv_timeout(Duration::from_millis(250)) {
            Ok(path) => match Recording::read_meta(&path) {
                Ok(meta) => {
                    let start = meta.start_realtime_ns;
                    ring.window_done(&path, start, start + WINDOW.as_nanos() as u64, MonoNs::now().0);
                }
                Err(e) => {
                    ontime_core::errln!("ontime: flight recorder: {e:#}; deleting it");
                    let _ = std::fs::remove_file(&path);
                }
            },
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        follow(&mut ring, &mut tails);
        let logged = tails.iter().map(|t| t.logged_upto_ns()).min().flatten();
        ring.expire(MonoNs::now().0, logged);
        if last_rss.is_none_or(|t: Instant| t.elapsed() >= Duration::from_secs(1)) {
            last_rss = Some(Instant::now());
            if let Some(rss) = ontime_core::proc::own_resident_bytes() {
                rss_peak = Some(rss_peak.unwrap_or(0).max(rss));
                if started.elapsed() <= Duration::from_secs(60) {
                    rss_first = Some(rss_first.unwrap_or(0).max(rss));
                }
                let minute = (started.elapsed().as_secs() / 60) as usize;
                if minute < MAX_RSS_MINUTES {
                    if by_minute.len() <= minute {
                        by_minute.resize(minute + 1, 0);
                    }
                    by_minute[minute] = by_minute[minute].max(rss);
                }
            }
        }
    }
    follow(&mut ring, &mut tails);
    let (summary, kept) = ring.finish();
    Kept {
        summary,
        stretches: crate::store::contiguous(kept),
        rss_first_minute_bytes: rss_first,
        rss_peak_bytes: rss_peak,
        rss_by_minute_bytes: by_minute,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    /// A ring over real (empty) files in a fresh directory, windows of 1 s
    /// from t = 100 s.
    struct Fixture {
        dir: PathBuf,
        ring: FlightRing,
    }

    impl Fixture {
        fn new(name: &str, max_kept: u64, threshold_ns: u64) -> Fixture {
            let dir = std::env::temp_dir().join(format!("ontime-flight-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Fixture {
                dir,
                ring: FlightRing::new(FlightOptions {
                    ring_ns: 5 * S,
                    keep_around_ns: 2 * S,
                    max_kept,
                    threshold_ns,
                }),
            }
        }

        /// Window i covers [100 + i, 101 + i) s; finished at its end.
        fn window(&mut self, i: u64) {
            let path = self.dir.join(format!("w{i:03}"));
            std::fs::write(&path, [0u8; 10]).unwrap();
            self.ring
                .window_done(&path, (100 + i) * S, (101 + i) * S, (101 + i) * S);
            self.ring.expire((101 + i) * S, None);
        }

        fn on_disk(&self) -> Vec<u64> {
            let mut v: Vec<u64> = std::fs::read_dir(&self.dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy()[1..].parse().unwrap())
                .collect();
            v.sort();
            v
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn peak(second: u64, max_ns: u64) -> IntervalPeak {
        IntervalPeak {
            start_wall_ns: (100 + second) * S,
            length_ns: S,
            max_ns,
        }
    }

    #[test]
    fn only_the_ring_and_the_windows_around_late_intervals_stay() {
        let mut f = Fixture::new("ring", 100, 10_000_000);
        for i in 0..30 {
            f.window(i);
            // Interval 12 logged one second after it ended; interval 20
            // is under the threshold.
            if i == 13 {
                f.ring.interval(peak(12, 50_000_000));
            }
            if i == 21 {
                f.ring.interval(peak(20, 5_000_000));
            }
        }
        // The ring: windows 25..29 (ends within 5 s of 130 s); around
        // interval 12 (planned 112-113 s, 50 ms late): 110 s to 115.05 s.
        assert_eq!(f.on_disk(), vec![10, 11, 12, 13, 14, 15, 25, 26, 27, 28, 29]);
        let (summary, kept) = f.ring.finish();
        assert_eq!(kept.len(), 6, "the ring's windows go at the end: {kept:?}");
        assert_eq!(f.on_disk(), vec![10, 11, 12, 13, 14, 15]);
        assert_eq!(summary.triggers, 1);
        assert_eq!(summary.triggers_too_late, 0);
        assert_eq!(summary.windows, 30);
        assert_eq!(summary.kept, 6);
        assert_eq!(summary.bytes_kept, 60);
        assert!(summary.peak_windows <= 13, "{summary:?}");
    }

    #[test]
    fn a_window_every_probe_logged_past_is_decided_before_the_ring_is_up() {
        let mut f = Fixture::new("logged", 100, 0);
        let path = f.dir.join("w000");
        std::fs::write(&path, [0u8; 10]).unwrap();
        f.ring.window_done(&path, 100 * S, 101 * S, 101 * S);
        // Logged up to 102.5 s: an interval that could still reach the
        // window (start before 101 s + keep_around) may come.
        f.ring.expire(102 * S, Some(102 * S + S / 2));
        assert_eq!(f.on_disk(), vec![0]);
        f.ring.expire(102 * S, Some(103 * S));
        assert!(f.on_disk().is_empty(), "no late interval near it: deleted at once");
    }

    #[test]
    fn an_interval_logged_after_its_windows_left_the_ring_is_counted() {
        let mut f = Fixture::new("late", 100, 0);
        for i in 0..20 {
            f.window(i);
        }
        f.ring.interval(peak(3, 1_000_000));
        let (summary, kept) = f.ring.finish();
        assert_eq!(summary.triggers_too_late, 1);
        assert!(kept.iter().all(|p| p.exists()));
    }

    #[test]
    fn over_the_cap_the_windows_of_the_mildest_interval_go_first() {
        let mut f = Fixture::new("cap", 5, 0);
        for i in 0..40 {
            f.window(i);
            if i == 6 {
                f.ring.interval(peak(5, 30_000_000));
            }
            if i == 21 {
                f.ring.interval(peak(20, 10_000_000));
            }
            if i == 31 {
                f.ring.interval(peak(30, 80_000_000));
            }
        }
        let (summary, _) = f.ring.finish();
        // Each interval keeps 6 windows (2 s either side of its second
        // and its lateness); the cap of 5 holds the worst's but its oldest.
        assert_eq!(f.on_disk(), vec![29, 30, 31, 32, 33]);
        assert_eq!(summary.kept, 5);
        assert_eq!(summary.evicted, 13);
        assert_eq!(summary.triggers, 3);
    }
}
