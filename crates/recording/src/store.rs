//! Where a recording's blocks go: one file, or back-to-back windows
//! (`profile record --continuous`), each a self-contained recording.
//!
//! Windows are stored on their own thread, beside the drain: collection
//! never pauses for the disk (document 002 paused it while storing). Each
//! event and sample goes to the window its time stamp falls in, so the
//! windows tile the time line with no gap and no overlap; a window stays
//! open for a grace period after its end for stragglers from other CPUs'
//! buffers, then is finished (END block, fsync). Every window file starts
//! with the whole thread table and the mappings known so far, so it reads
//! alone. A kill loses at most the windows still open, and those read back
//! up to their last block.
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};

use crate::event::Event;
use crate::maps::ProcessMaps;
use crate::recording::{End, Meta, ThreadInfo, Writer};
use crate::samples::SampleBatch;

/// How long a window stays open after its end for late events: the
/// recorder drains every 100 ms and the kernel hands events over in time
/// order within a few milliseconds, so three drains are plenty.
const GRACE_NS: u64 = 300_000_000;

/// The name of window `index` (from 1) in a directory.
pub fn window_file(dir: &Path, index: u64) -> PathBuf {
    dir.join(format!("window-{index:06}.otrec"))
}

/// Where window file `file` is written until it is readable (hidden, so
/// [`window_files`] does not list it).
fn partial_file(file: &Path) -> PathBuf {
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("window");
    file.with_file_name(format!(".{name}.new"))
}

/// The window files in `dir`, in order.
pub fn window_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("window-") && n.ends_with(".otrec"))
        })
        .collect();
    out.sort();
    Ok(out)
}

/// One drain's worth of blocks.
struct Drained {
    events: Vec<Event>,
    threads: Vec<ThreadInfo>,
    samples: SampleBatch,
    maps: Vec<ProcessMaps>,
    now_ns: u64,
    /// Events lost so far in the whole recording.
    lost: u64,
}

enum Msg {
    Drained(Drained),
    Finish(End),
}

/// Where a recorder's drains go (ontime-trace's recorder holds one).
pub enum Store {
    /// A live view only.
    Nothing,
    File(Writer),
    Windows(WindowStore),
}

impl Store {
    /// One drain's events, threads, samples and mappings, at `now_ns`,
    /// with the events lost so far.
    pub fn drained(
        &mut self,
        events: &[Event],
        threads: Vec<ThreadInfo>,
        samples: &SampleBatch,
        maps: Vec<ProcessMaps>,
        now_ns: u64,
        lost: u64,
    ) -> Result<()> {
        match self {
            Store::Nothing => Ok(()),
            Store::File(w) => {
                for e in events {
                    w.event(e)?;
                }
                w.threads(&threads)?;
                w.samples(samples)?;
                w.maps(&maps)?;
                w.flush()
            }
            Store::Windows(ws) => ws.send(Msg::Drained(Drained {
                events: events.to_vec(),
                threads,
                samples: samples.clone(),
                maps,
                now_ns,
                lost,
            })),
        }
    }

    pub fn finish(self, end: &End) -> Result<()> {
        match self {
            Store::Nothing => Ok(()),
            Store::File(w) => w.finish(end),
            Store::Windows(mut ws) => {
                ws.send(Msg::Finish(end.clone()))?;
                ws.join()
            }
        }
    }
}

/// The index of a window file (`window-000123.otrec` is 123).
fn window_index(file: &Path) -> Option<u64> {
    file.file_name()?
        .to_str()?
        .strip_prefix("window-")?
        .strip_suffix(".otrec")?
        .parse()
        .ok()
}

/// Window files, in order, split into runs of consecutive windows: each
/// run covers a stretch of time with no window missing (what a flight
/// recorder kept around one late moment).
pub fn contiguous(files: Vec<PathBuf>) -> Vec<Vec<PathBuf>> {
    let mut out: Vec<Vec<PathBuf>> = Vec::new();
    let mut last = None;
    for f in files {
        let i = window_index(&f);
        match (out.last_mut(), last, i) {
            (Some(run), Some(prev), Some(i)) if i == prev + 1 => run.push(f),
            _ => out.push(vec![f]),
        }
        last = i;
    }
    out
}

/// The storage thread of a continuous recording's windows.
pub struct WindowStore {
    tx: Option<mpsc::Sender<Msg>>,
    thread: Option<JoinHandle<Result<()>>>,
}

impl WindowStore {
    /// Starts storing windows of `window_ns` from `meta.start_ns` into
    /// `dir` (created; it must hold no window files yet).
    pub fn start(dir: &Path, meta: Meta, window_ns: u64, done: Option<mpsc::Sender<PathBuf>>) -> Result<WindowStore> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        if !window_files(dir)?.is_empty() {
            bail!(
                "{} already holds window files: give an empty or new directory",
                dir.display()
            );
        }
        if window_ns == 0 {
            bail!("a window must be longer than 0");
        }
        let (tx, rx) = mpsc::channel();
        let mut state = Windows {
            dir: dir.to_path_buf(),
            meta,
            window_ns,
            open: BTreeMap::new(),
            next_index: 1,
            threads: HashMap::new(),
            maps: HashMap::new(),
            lost: 0,
            done,
        };
        let thread = std::thread::Builder::new()
            .name("ontime-store".into())
            .spawn(move || state.run(rx))
            .context("starting the storage thread")?;
        Ok(WindowStore {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    fn send(&mut self, m: Msg) -> Result<()> {
        let sent = self.tx.as_ref().is_some_and(|tx| tx.send(m).is_ok());
        if sent {
            Ok(())
        } else {
            // The storage thread ended early: its error says why.
            self.join().and_then(|_| Err(anyhow!("the storage thread stopped")))
        }
    }

    fn join(&mut self) -> Result<()> {
        self.tx = None;
        match self.thread.take() {
            Some(t) => t.join().map_err(|_| anyhow!("the storage thread panicked"))?,
            None => Ok(()),
        }
    }
}

/// An open window file and what it cost to store.
struct OpenWindow {
    writer: Writer,
    start_ns: u64,
    end_ns: u64,
    store_ns: u64,
    /// The recording's lost count when it opened.
    lost_at_open: u64,
}

struct Windows {
    dir: PathBuf,
    meta: Meta,
    window_ns: u64,
    open: BTreeMap<u64, OpenWindow>,
    /// The next window index to create (from 1).
    next_index: u64,
    threads: HashMap<u32, ThreadInfo>,
    maps: HashMap<u32, ProcessMaps>,
    lost: u64,
    /// Told each finished window's file.
    done: Option<mpsc::Sender<PathBuf>>,
}

impl Windows {
    /// Finishes window `index` and says so.
    fn close(&mut self, index: u64, w: OpenWindow, cut: Option<u64>) -> Result<()> {
        close(w, cut, self.lost)?;
        if let Some(tx) = &self.done {
            // A listener that went away stops listening, not recording.
            let _ = tx.send(window_file(&self.dir, index));
        }
        Ok(())
    }

    fn run(&mut self, rx: mpsc::Receiver<Msg>) -> Result<()> {
        for m in rx {
            match m {
                Msg::Drained(d) => self.drained(d)?,
                Msg::Finish(end) => return self.finish(&end),
            }
        }
        // The recorder went away without finishing (it failed): close what
        // is open at its current end so the files read back whole.
        let last = self.open.values().map(|w| w.end_ns).max().unwrap_or(self.meta.start_ns);
        self.finish(&End {
            end_ns: last,
            events: 0,
            lost: 0,
            store_ns: None,
        })
    }

    /// Index (from 1) of the window holding time `ts`.
    fn index_of(&self, ts: u64) -> u64 {
        ts.saturating_sub(self.meta.start_ns) / self.window_ns + 1
    }

    /// Opens every window up to `index` not opened yet.
    fn open_upto(&mut self, index: u64) -> Result<()> {
        while self.next_index <= index {
            let i = self.next_index;
            let start_ns = self.meta.start_ns + (i - 1) * self.window_ns;
            let t = Instant::now();
            let meta = Meta {
                start_ns,
                start_realtime_ns: self.meta.start_realtime_ns + (start_ns - self.meta.start_ns),
                ..self.meta.clone()
            };
            // Made under a hidden name and moved into place once its
            // header, threads and maps are on disk: a window killed at
            // birth leaves no unreadable window file behind.
            let file = window_file(&self.dir, i);
            let mut writer = Writer::create(&partial_file(&file), &meta)?;
            writer.threads_of(&self.threads)?;
            let mut maps: Vec<ProcessMaps> = self.maps.values().cloned().collect();
            maps.sort_by_key(|m| m.pid);
            writer.maps(&maps)?;
            writer.publish(&file)?;
            self.open.insert(
                i,
                OpenWindow {
                    writer,
                    start_ns,
                    end_ns: start_ns + self.window_ns,
                    store_ns: t.elapsed().as_nanos() as u64,
                    lost_at_open: self.lost,
                },
            );
            self.next_index += 1;
        }
        Ok(())
    }

    fn drained(&mut self, d: Drained) -> Result<()> {
        self.open_upto(self.index_of(d.now_ns))?;
        self.lost = self.lost.max(d.lost);
        for t in &d.threads {
            self.threads.insert(t.tid, t.clone());
        }
        for m in &d.maps {
            self.maps.insert(m.pid, m.clone());
        }
        let t0 = Instant::now();
        for w in self.open.values_mut() {
            w.writer.threads(&d.threads)?;
            w.writer.maps(&d.maps)?;
        }
        // Events and samples to the window their time falls in; one that
        // falls in a window already finished (later than the grace) goes
        // to the oldest open one and shows as a stamp outside its window.
        let oldest = self.open.keys().next().copied().unwrap_or(1);
        for e in &d.events {
            // The probes attach a moment before the recording's start is
            // read: the few events of that moment are stamped at the start
            // (their order and what they say are kept) so the first window
            // holds only its own time.
            let e = Event {
                ts: e.ts.max(self.meta.start_ns),
                ..*e
            };
            let i = self.index_of(e.ts).max(oldest);
            self.open_upto(i)?;
            if let Some(w) = self.open.get_mut(&i) {
                w.writer.event(&e)?;
            }
        }
        let mut per: BTreeMap<u64, SampleBatch> = BTreeMap::new();
        for s in &d.samples.samples {
            let ts = s.ts.max(self.meta.start_ns);
            let i = self.index_of(ts).max(oldest);
            per.entry(i).or_default().push(
                ts,
                s.pid,
                s.tid,
                s.cpu,
                d.samples.kernel_frames(s),
                d.samples.user_frames(s),
            );
        }
        for (i, b) in per {
            self.open_upto(i)?;
            if let Some(w) = self.open.get_mut(&i) {
                w.writer.samples(&b)?;
            }
        }
        for w in self.open.values_mut() {
            w.writer.flush()?;
        }
        let spent = t0.elapsed().as_nanos() as u64;
        let n = self.open.len().max(1) as u64;
        for w in self.open.values_mut() {
            w.store_ns += spent / n;
        }
        // Finish windows whose grace has passed.
        let done: Vec<u64> = self
            .open
            .iter()
            .filter(|(_, w)| w.end_ns + GRACE_NS <= d.now_ns)
            .map(|(&i, _)| i)
            .collect();
        for i in done {
            if let Some(w) = self.open.remove(&i) {
                self.close(i, w, None)?;
            }
        }
        Ok(())
    }

    fn finish(&mut self, end: &End) -> Result<()> {
        self.lost = self.lost.max(end.lost);
        self.open_upto(self.index_of(end.end_ns.saturating_sub(1)))?;
        let open = std::mem::take(&mut self.open);
        for (i, w) in open {
            let last = end.end_ns < w.end_ns;
            self.close(i, w, last.then_some(end.end_ns))?;
        }
        Ok(())
    }
}

/// Finishes a window: END at its end (or `cut`, where the recording
/// stopped inside it), with what storing it cost and the events lost while
/// it was open (`lost_now`: the recording's count so far).
fn close(mut w: OpenWindow, cut: Option<u64>, lost_now: u64) -> Result<()> {
    let t = Instant::now();
    w.writer.flush()?;
    let events = w.writer.events_written;
    let end_ns = cut.unwrap_or(w.end_ns).max(w.start_ns);
    let store_ns = w.store_ns + t.elapsed().as_nanos() as u64;
    w.writer.finish(&End {
        end_ns,
        events,
        lost: lost_now.saturating_sub(w.lost_at_open),
        store_ns: Some(store_ns),
    })
}
