//! The crawler's writer thread: drains the vCPU threads' lock-free rings
//! into the per-poll record file and the SQLite time series, in batches,
//! off the timing path (as a production crawler stores what it reads).

use crate::metrics::{Outcome, PollRecord, StoreRecord};
use anyhow::{Context, Result};
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub const POLLS_HEADER: &str = "stream,index,planned_ns,sent_ns,gateway_recv_ns,done_ns,http_status,outcome";

pub struct SinkSetup {
    pub polls_file: Option<PathBuf>,
    pub store: Option<PathBuf>,
    /// Gateway URLs, indexed like StoreRecord::gateway.
    pub gateway_urls: Vec<String>,
    pub polls: Vec<rtrb::Consumer<PollRecord>>,
    pub values: Vec<rtrb::Consumer<StoreRecord>>,
    pub done: Arc<AtomicBool>,
}

/// What the sink wrote.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct SinkStats {
    pub poll_records: u64,
    pub stored_values: u64,
}

pub fn run(mut s: SinkSetup) -> Result<SinkStats> {
    let mut polls = match &s.polls_file {
        Some(p) => {
            let f = std::fs::File::create(p).with_context(|| format!("cannot create {}", p.display()))?;
            let mut w = BufWriter::with_capacity(1 << 20, f);
            writeln!(w, "{POLLS_HEADER}")?;
            Some(w)
        }
        None => None,
    };
    let mut db = match &s.store {
        Some(p) => Some(open_store(p, &s.gateway_urls)?),
        None => None,
    };
    let mut stats = SinkStats::default();
    loop {
        // Read the flag before draining, so nothing pushed before it was set
        // is left behind.
        let finished = s.done.load(Ordering::Acquire);
        if let Some(w) = polls.as_mut() {
            for c in s.polls.iter_mut() {
                while let Ok(r) = c.pop() {
                    write_poll(w, &r)?;
                    stats.poll_records += 1;
                }
            }
            w.flush()?;
        }
        if let Some(conn) = db.as_mut() {
            let tx = conn.transaction()?;
            {
                let mut ins =
                    tx.prepare_cached("INSERT INTO samples(series, t_ns, value, status) VALUES (?1, ?2, ?3, ?4)")?;
                for c in s.values.iter_mut() {
                    while let Ok(v) = c.pop() {
                        let series = ((v.gateway as i64) << 32) | v.point as i64;
                        let value = if v.value.is_nan() { None } else { Some(v.value) };
                        ins.execute(rusqlite::params![series, v.recv_ns as i64, value, v.status])?;
                        stats.stored_values += 1;
                    }
                }
            }
            tx.commit()?;
        }
        if finished {
            return Ok(stats);
        }
        std::thread::sleep(Duration::from_millis(50));
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
        r.http_status,
        outcome.name()
    )
}

fn open_store(path: &PathBuf, urls: &[String]) -> Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(path).with_context(|| format!("cannot open the store {}", path.display()))?;
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
    .with_context(|| format!("cannot set up the store {}", path.display()))?;
    for (i, u) in urls.iter().enumerate() {
        conn.execute(
            "INSERT OR REPLACE INTO gateways(id, url) VALUES (?1, ?2)",
            rusqlite::params![i as i64, u],
        )?;
    }
    Ok(conn)
}
