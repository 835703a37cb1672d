//! The crawler's writer thread: drains the vCPU threads' lock-free rings
//! into the per-poll record file and the SQLite time series, in batches,
//! off the timing path (as a production crawler stores what it reads).

use crate::metrics::{Outcome, PollRecord, StoreRecord};
use anyhow::{Context, Result};
use rtrb::Consumer;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub const POLLS_HEADER: &str = "stream,index,planned_ns,sent_ns,gateway_recv_ns,done_ns,status,outcome";

/// What the sink wrote.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct SinkStats {
    pub poll_records: u64,
    pub stored_values: u64,
}

/// One file the sink writes, with the flag that named it, for errors.
struct Output<W> {
    flag: &'static str,
    path: PathBuf,
    w: W,
}

impl<W> Output<W> {
    /// The failure as the result shows it: flag, file and error.
    fn failed(&self, e: &dyn std::fmt::Display) -> String {
        format!("{}: cannot write {}: {e}", self.flag, self.path.display())
    }
}

/// The sink's files, made (with the CSV header and the store's tables)
/// before the vCPU threads start, so a path that cannot be written fails
/// the crawl at once and by name, not after the run.
pub struct SinkFiles {
    polls: Option<Output<BufWriter<File>>>,
    store: Option<Output<rusqlite::Connection>>,
}

impl SinkFiles {
    /// `--polls` and `--store`; `gateway_urls` are indexed like
    /// StoreRecord::gateway.
    pub fn open(polls_file: Option<&Path>, store: Option<&Path>, gateway_urls: &[String]) -> Result<SinkFiles> {
        let polls = match polls_file {
            Some(p) => {
                let f = File::create(p).with_context(|| format!("--polls: cannot create {}", p.display()))?;
                let mut w = BufWriter::with_capacity(1 << 20, f);
                writeln!(w, "{POLLS_HEADER}").with_context(|| format!("--polls: cannot write {}", p.display()))?;
                Some(Output {
                    flag: "--polls",
                    path: p.to_path_buf(),
                    w,
                })
            }
            None => None,
        };
        let store = match store {
            Some(p) => Some(Output {
                flag: "--store",
                path: p.to_path_buf(),
                w: open_store(p, gateway_urls)?,
            }),
            None => None,
        };
        Ok(SinkFiles { polls, store })
    }

    /// True when the run writes neither file.
    pub fn is_empty(&self) -> bool {
        self.polls.is_none() && self.store.is_none()
    }
}

/// Drains the vCPU threads' rings into the files until `done` is set and
/// everything pushed before it is written. A file that cannot be written
/// (a full disk) is given up at the first error: its records are drained
/// and let go from then on (the threads must not count them as dropped),
/// and the error, naming the flag and the file, is returned beside the
/// counts, so the result can say the file holds the run only up to there.
pub fn run(
    mut files: SinkFiles,
    mut polls: Vec<Consumer<PollRecord>>,
    mut values: Vec<Consumer<StoreRecord>>,
    done: Arc<AtomicBool>,
) -> (SinkStats, Vec<String>) {
    let mut stats = SinkStats::default();
    let mut failures = Vec::new();
    loop {
        // Read the flag before draining, so nothing pushed before it was set
        // is left behind.
        let finished = done.load(Ordering::Acquire);
        match files.polls.as_mut() {
            Some(out) => {
                let mut r = drain_polls(&mut out.w, &mut polls, &mut stats.poll_records);
                if finished && r.is_ok() {
                    // A delayed write error (a full disk) shows at the sync.
                    r = out.w.get_ref().sync_all();
                }
                if let Err(e) = r {
                    failures.push(out.failed(&e));
                    files.polls = None;
                }
            }
            None => discard(&mut polls),
        }
        match files.store.as_mut() {
            Some(out) => {
                if let Err(e) = drain_store(&mut out.w, &mut values, &mut stats.stored_values) {
                    failures.push(out.failed(&e));
                    files.store = None;
                }
            }
            None => discard(&mut values),
        }
        if finished {
            return (stats, failures);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The count grows only by what reached the file (was flushed).
fn drain_polls(w: &mut BufWriter<File>, rings: &mut [Consumer<PollRecord>], written: &mut u64) -> std::io::Result<()> {
    let mut n = 0u64;
    for c in rings.iter_mut() {
        while let Ok(r) = c.pop() {
            write_poll(w, &r)?;
            n += 1;
        }
    }
    w.flush()?;
    *written += n;
    Ok(())
}

/// One transaction per drain; the count grows only by what was committed.
fn drain_store(
    conn: &mut rusqlite::Connection,
    rings: &mut [Consumer<StoreRecord>],
    stored: &mut u64,
) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    let mut n = 0u64;
    {
        let mut ins = tx.prepare_cached("INSERT INTO samples(series, t_ns, value, status) VALUES (?1, ?2, ?3, ?4)")?;
        for c in rings.iter_mut() {
            while let Ok(v) = c.pop() {
                let series = ((v.gateway as i64) << 32) | v.point as i64;
                let value = if v.value.is_nan() { None } else { Some(v.value) };
                ins.execute(rusqlite::params![series, v.recv_ns as i64, value, v.status])?;
                n += 1;
            }
        }
    }
    tx.commit()?;
    *stored += n;
    Ok(())
}

/// Empties rings whose file was given up (or never asked for: then there
/// are none).
fn discard<T>(rings: &mut [Consumer<T>]) {
    for c in rings.iter_mut() {
        while c.pop().is_ok() {}
    }
}

fn write_poll(w: &mut impl Write, r: &PollRecord) -> std::io::Result<()> {
    let outcome = match r.outcome {
        0 => Outcome::Ok,
        1 => Outcome::Timeout,
        2 => Outcome::HttpError,
        3 => Outcome::Malformed,
        4 => Outcome::ConnectionLost,
        5 => Outcome::NotSent,
        7 => Outcome::DeviceError,
        _ => Outcome::Abandoned,
    };
    writeln!(
        w,
        "{},{},{},{},{},{},{},{}",
        r.stream,
        r.index,
        r.planned_ns,
        r.sent_ns,
        r.gateway_recv_ns,
        r.done_ns,
        r.status,
        outcome.name()
    )
}

fn open_store(path: &Path, urls: &[String]) -> Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(path).with_context(|| format!("--store: cannot open {}", path.display()))?;
    conn.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;
         CREATE TABLE IF NOT EXISTS gateways(id INTEGER PRIMARY KEY, url TEXT NOT NULL);
         CREATE TABLE IF NOT EXISTS samples(
             series INTEGER NOT NULL,  -- gateway id << 32 | point id
             t_ns INTEGER NOT NULL,    -- gateway receive time, CLOCK_MONOTONIC ns
             value REAL,               -- NULL when the point had no value
             status INTEGER NOT NULL   -- 0 ok, 1 fault, 2 unknown point
         );
         CREATE VIEW IF NOT EXISTS readings AS
             SELECT g.url AS gateway, s.series & 4294967295 AS point, s.t_ns, s.value, s.status
             FROM samples s JOIN gateways g ON g.id = (s.series >> 32);",
    )
    .with_context(|| format!("--store: cannot write {}", path.display()))?;
    for (i, u) in urls.iter().enumerate() {
        conn.execute(
            "INSERT OR REPLACE INTO gateways(id, url) VALUES (?1, ?2)",
            rusqlite::params![i as i64, u],
        )
        .with_context(|| format!("--store: cannot write {}", path.display()))?;
    }
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a full disk `--polls` said "No space left on device" without
    /// the file, after the run, and no result was written. The sink gives
    /// the file up at its first error, names flag and file, and counts
    /// only what reached it.
    #[test]
    fn a_file_that_cannot_be_written_is_named_and_given_up() {
        let full = Path::new("/dev/full");
        if !full.exists() {
            eprintln!("skipped: no /dev/full to write to");
            return;
        }
        let files = SinkFiles::open(Some(full), None, &[]).unwrap();
        let (mut prod, cons) = rtrb::RingBuffer::<PollRecord>::new(16);
        for _ in 0..4 {
            prod.push(PollRecord::default()).unwrap();
        }
        let (stats, failures) = run(files, vec![cons], Vec::new(), Arc::new(AtomicBool::new(true)));
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(
            failures[0].starts_with("--polls: cannot write /dev/full: "),
            "{failures:?}"
        );
        assert_eq!(stats.poll_records, 0);
    }

    #[test]
    fn writes_polls_and_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let (polls, store) = (dir.path().join("p.csv"), dir.path().join("s.db"));
        let files = SinkFiles::open(Some(polls.as_path()), Some(store.as_path()), &["http://h:1/b0".into()]).unwrap();
        let (mut pp, pc) = rtrb::RingBuffer::<PollRecord>::new(16);
        let (mut vp, vc) = rtrb::RingBuffer::<StoreRecord>::new(16);
        pp.push(PollRecord::default()).unwrap();
        vp.push(StoreRecord::default()).unwrap();
        let (stats, failures) = run(files, vec![pc], vec![vc], Arc::new(AtomicBool::new(true)));
        assert!(failures.is_empty(), "{failures:?}");
        assert_eq!((stats.poll_records, stats.stored_values), (1, 1));
        let csv = std::fs::read_to_string(&polls).unwrap();
        assert_eq!(csv.lines().count(), 2, "{csv}");
    }
}
