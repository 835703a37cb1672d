//! `ontime analyse`: one worker of the pool that shares the windows stream
//! through one durable pull consumer (work-queue semantics: start more
//! workers to scale). Each notice: fetch the window, analyse it, compare
//! it with the tenant's history, publish the result (message id = window
//! id, so a redelivered window is not counted twice) and its pprof, then
//! acknowledge. A window whose worker dies unacknowledged is redelivered
//! after the ack wait. Each message is isolated: what it and its window
//! claim is checked before anything is sized from it (the notice here,
//! the recording by its reader), the window's size is capped, the
//! analysis runs on a thread of its own where a panic is caught and a
//! time limit holds, and a window that was delivered again and again
//! without a result (its workers died: an allocation failure aborts a
//! process, it cannot be caught) is not analysed again. Whatever fails
//! goes to the dead letters with the reason; the worker goes on.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use async_nats::jetstream::{self, consumer::pull, AckKind};
use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::anomaly::History;
use crate::conn::NatsArgs;
use crate::wire::{self, WindowNotice, WindowResult};

#[derive(Clone, Debug)]
pub struct WorkerOptions {
    pub nats: NatsArgs,
    /// This worker's name in results.
    pub name: String,
    /// How long a window may stay unacknowledged before it is redelivered
    /// (the consumer's, set by the first worker that makes it).
    pub ack_wait: Duration,
    /// Stop after this many windows (benchmarks, tests).
    pub max_windows: Option<u64>,
    /// Where a window is put while it is analysed.
    pub scratch: PathBuf,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct WorkerSummary {
    pub analysed: u64,
    pub dead: u64,
    /// Results the server already had (a redelivered window).
    pub duplicate_results: u64,
    pub busy_ns: u64,
}

/// The consumer hands a window out at most this often ...
const MAX_DELIVER: i64 = 5;
/// ... and a worker that gets it for this time does not analyse it but
/// dead-letters it: the workers before it died, timed out or failed with
/// it. Below [`MAX_DELIVER`], so the window reaches the dead letters
/// instead of staying in the stream undelivered.
const POISON_DELIVERIES: i64 = 4;
const _: () = assert!(POISON_DELIVERIES < MAX_DELIVER);
/// The longest one window's analysis may take (a 60 s window of 10 VMs
/// takes 0.2 s); past it the window is dead and the worker goes on.
const MAX_ANALYSIS: Duration = Duration::from_secs(600);
/// How often a running analysis looks at the stop.
const STOP_POLL: Duration = Duration::from_millis(200);

pub fn run(o: &WorkerOptions, stop: Arc<AtomicBool>) -> Result<WorkerSummary> {
    std::fs::create_dir_all(&o.scratch).with_context(|| format!("cannot create {}", o.scratch.display()))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let r = rt.block_on(serve(o, &stop));
    // An analysis abandoned (too long, or the stop came) may still run on
    // its thread: it is not waited for.
    rt.shutdown_timeout(Duration::from_secs(1));
    r
}

async fn serve(o: &WorkerOptions, stop: &AtomicBool) -> Result<WorkerSummary> {
    let client = o.nats.connect(&format!("ontime-analyse {}", o.name)).await?;
    let js = jetstream::new(client);
    crate::conn::ensure(&js).await?;
    let stream = js
        .get_stream(wire::WINDOWS_STREAM)
        .await
        .map_err(|e| anyhow::anyhow!("the windows stream: {e}"))?;
    let consumer: jetstream::consumer::Consumer<pull::Config> = stream
        .get_or_create_consumer(
            wire::ANALYSERS,
            pull::Config {
                durable_name: Some(wire::ANALYSERS.into()),
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                ack_wait: o.ack_wait,
                // A window that kills every worker that takes it is not
                // handed out forever (and is dead-lettered before the last).
                max_deliver: MAX_DELIVER,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| anyhow::anyhow!("the analysers' consumer: {e}"))?;
    let mut summary = WorkerSummary::default();
    while !stop.load(Ordering::Relaxed) && o.max_windows.is_none_or(|n| summary.analysed < n) {
        let mut batch = match consumer
            .fetch()
            .max_messages(1)
            .expires(Duration::from_secs(1))
            .messages()
            .await
        {
            Ok(b) => b,
            Err(e) => {
                ontime_core::errln!("ontime analyse: fetching from the windows stream: {e}; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        while let Some(m) = batch.next().await {
            let m = match m {
                Ok(m) => m,
                Err(e) => {
                    ontime_core::errln!("ontime analyse: {e}");
                    continue;
                }
            };
            let t = Instant::now();
            match handle(o, &js, &m, stop).await {
                Ok(Outcome::Analysed { duplicate }) => {
                    summary.analysed += 1;
                    summary.duplicate_results += duplicate as u64;
                }
                Ok(Outcome::Dead) => summary.dead += 1,
                Ok(Outcome::Stopped) => {
                    // Another worker takes it at once.
                    let _ = m.ack_with(AckKind::Nak(None)).await;
                }
                Err(e) => {
                    // The server or the store failed, not the window: let
                    // it be redelivered (to this worker or another).
                    ontime_core::errln!("ontime analyse: {e:#}; the window will be redelivered");
                    let _ = m.ack_with(AckKind::Nak(Some(Duration::from_secs(1)))).await;
                }
            }
            summary.busy_ns += t.elapsed().as_nanos() as u64;
        }
    }
    Ok(summary)
}

enum Outcome {
    Analysed {
        duplicate: bool,
    },
    Dead,
    /// The stop came during the analysis: the window is handed back.
    Stopped,
}

/// Checks what a notice claims before anything is sized from it; the
/// error is the host to file the dead letter under and the reason.
fn read_notice(payload: &[u8], subject: &str) -> Result<WindowNotice, (String, String)> {
    let unknown = |why: String| ("unknown".to_string(), why);
    if payload.len() > wire::MAX_NOTICE_BYTES {
        return Err(unknown(format!(
            "a notice of {} bytes, more than one may be ({} bytes)",
            payload.len(),
            wire::MAX_NOTICE_BYTES
        )));
    }
    let notice: WindowNotice = match serde_json::from_slice::<WindowNotice>(payload) {
        Err(e) => return Err(unknown(format!("not a window notice: {e}"))),
        Ok(n) if n.version != wire::VERSION => {
            return Err(unknown(format!(
                "message version {}, this worker reads {}",
                n.version,
                wire::VERSION
            )))
        }
        Ok(n) => n,
    };
    wire::check_host(&notice.host).map_err(unknown)?;
    let host = notice.host.clone();
    if subject != wire::windows_subject(&notice.host)
        || notice.id != WindowNotice::id_of(&notice.host, notice.start_realtime_ns)
    {
        return Err((
            host,
            format!("notice of {} ({}) on subject {subject}", notice.host, notice.id),
        ));
    }
    if notice.bytes > wire::MAX_WINDOW_BYTES {
        return Err((
            host,
            format!(
                "window {} claims {} bytes, more than a worker takes ({} MiB)",
                notice.id,
                notice.bytes,
                wire::MAX_WINDOW_BYTES >> 20
            ),
        ));
    }
    if notice.duration_ns > wire::MAX_WINDOW_NS || notice.start_realtime_ns.checked_add(notice.duration_ns).is_none() {
        return Err((
            host,
            format!(
                "window {} claims {} ns from {} ns: longer than any window ({} h at most)",
                notice.id,
                notice.duration_ns,
                notice.start_realtime_ns,
                wire::MAX_WINDOW_NS / 3_600_000_000_000
            ),
        ));
    }
    let events: usize = notice.late.iter().map(|l| l.events.len()).sum();
    if notice.late.len() > crate::probes::MAX_PROBES || events > crate::probes::MAX_LATE_PER_WINDOW {
        return Err((
            host,
            format!(
                "window {} claims {} late events of {} probes, more than an agent sends ({} of {} at most)",
                notice.id,
                events,
                notice.late.len(),
                crate::probes::MAX_LATE_PER_WINDOW,
                crate::probes::MAX_PROBES
            ),
        ));
    }
    Ok(notice)
}

/// Copies at most `cap` bytes of `from` into `file`; false, and no file,
/// when there was more (the object store's size is a claim too).
async fn fetch_capped(from: impl AsyncRead + Unpin, file: &Path, cap: u64) -> Result<bool> {
    let mut f = tokio::fs::File::create(file)
        .await
        .with_context(|| format!("cannot create {}", file.display()))?;
    let mut capped = from.take(cap.saturating_add(1));
    let n = tokio::io::copy(&mut capped, &mut f).await?;
    f.flush().await.with_context(|| format!("writing {}", file.display()))?;
    drop(f);
    if n > cap {
        let _ = tokio::fs::remove_file(file).await;
        return Ok(false);
    }
    Ok(true)
}

/// How an isolated analysis ended.
enum Isolated<T> {
    Done(T),
    /// Why the window is dead: its error, its panic, or its time.
    Failed(String),
    Stopped,
}

/// Runs `work` (one window's analysis) on a blocking thread of its own,
/// where a panic is caught (a JoinError, not a dead worker), for at most
/// `limit`; `progress` runs every `every` meanwhile, and the stop ends the
/// wait (the thread is left to finish alone, as it is past `limit`).
async fn isolated<T, P, F>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
    limit: Duration,
    every: Duration,
    mut progress: P,
    stop: &AtomicBool,
) -> Isolated<T>
where
    T: Send + 'static,
    P: FnMut() -> F,
    F: Future<Output = ()>,
{
    let mut job = tokio::task::spawn_blocking(work);
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    let mut poll = tokio::time::interval(STOP_POLL);
    let give_up = tokio::time::sleep(limit);
    tokio::pin!(give_up);
    let joined = loop {
        tokio::select! {
            r = &mut job => break r,
            _ = &mut give_up => {
                return Isolated::Failed(format!("the analysis took longer than {limit:?}: abandoned"));
            }
            _ = tick.tick() => progress().await,
            _ = poll.tick() => {
                if stop.load(Ordering::Relaxed) {
                    return Isolated::Stopped;
                }
            }
        }
    };
    match joined {
        Ok(Ok(v)) => Isolated::Done(v),
        Ok(Err(e)) => Isolated::Failed(format!("cannot be analysed: {e:#}")),
        Err(e) if e.is_panic() => Isolated::Failed(format!("the analysis panicked: {}", panic_text(e.into_panic()))),
        Err(e) => Isolated::Failed(format!("the analysis did not finish: {e}")),
    }
}

/// What a panic said, when it said it in words.
fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        return s.to_string();
    }
    match p.downcast::<String>() {
        Ok(s) => *s,
        Err(_) => "(no message)".into(),
    }
}

async fn handle(
    o: &WorkerOptions,
    js: &jetstream::Context,
    m: &jetstream::Message,
    stop: &AtomicBool,
) -> Result<Outcome> {
    let delivered = m.info().map(|i| i.delivered).unwrap_or(1);
    let notice = match read_notice(&m.payload, m.subject.as_str()) {
        Ok(n) => n,
        Err((host, why)) => return dead(js, m, &host, why).await,
    };
    if delivered >= POISON_DELIVERIES {
        let why = format!(
            "window {} delivered {delivered} times without a result: the workers that took it died, timed out or failed; not analysed again",
            notice.id
        );
        return dead(js, m, &notice.host, why).await;
    }
    let windows = js
        .get_object_store(wire::WINDOW_BUCKET)
        .await
        .map_err(|e| anyhow::anyhow!("the windows object store: {e}"))?;
    let mut object = match windows.get(&notice.id).await {
        Ok(o) => o,
        Err(e) => {
            return dead(
                js,
                m,
                &notice.host,
                format!("window {} is not in the object store: {e}", notice.id),
            )
            .await
        }
    };
    if object.info.size as u64 > wire::MAX_WINDOW_BYTES {
        let why = format!(
            "window {} is {} bytes, more than a worker takes ({} MiB)",
            notice.id,
            object.info.size,
            wire::MAX_WINDOW_BYTES >> 20
        );
        return dead(js, m, &notice.host, why).await;
    }
    let file = o.scratch.join(format!("{}.otrec", notice.id));
    let whole = fetch_capped(&mut object, &file, wire::MAX_WINDOW_BYTES)
        .await
        .with_context(|| format!("fetching window {}", notice.id));
    match whole {
        Ok(true) => {}
        Ok(false) => {
            let why = format!(
                "window {} holds more than a worker takes ({} MiB)",
                notice.id,
                wire::MAX_WINDOW_BYTES >> 20
            );
            return dead(js, m, &notice.host, why).await;
        }
        Err(e) => {
            let _ = std::fs::remove_file(&file);
            return Err(e);
        }
    }
    let t = Instant::now();
    let path = file.clone();
    let late = notice.late.clone();
    // Long analyses keep the window: "in progress" before the ack wait.
    let analysed = isolated(
        move || crate::analysis::analyse(&path, &late),
        MAX_ANALYSIS,
        (o.ack_wait / 2).max(Duration::from_secs(1)),
        move || async move {
            let _ = m.ack_with(AckKind::Progress).await;
        },
        stop,
    )
    .await;
    let _ = std::fs::remove_file(&file);
    let analysed = match analysed {
        Isolated::Done(a) => a,
        Isolated::Failed(why) => return dead(js, m, &notice.host, format!("window {}: {why}", notice.id)).await,
        Isolated::Stopped => return Ok(Outcome::Stopped),
    };
    let analysis_ns = t.elapsed().as_nanos() as u64;

    let history_stream = js
        .get_stream(wire::HISTORY_STREAM)
        .await
        .map_err(|e| anyhow::anyhow!("the history stream: {e}"))?;
    let (history, revision) = match history_stream
        .get_last_raw_message_by_subject(&wire::history_subject(&notice.host))
        .await
    {
        Ok(m) => (
            serde_json::from_slice::<History>(&m.payload).unwrap_or_default(),
            m.sequence,
        ),
        Err(_) => (History::default(), 0),
    };
    let anomalies = history.departures(&analysed.tenants);
    let pprof = match &analysed.pprof {
        Some(bytes) => {
            let name = format!("{}.pb.gz", notice.id);
            let store = js
                .get_object_store(wire::RESULT_BUCKET)
                .await
                .map_err(|e| anyhow::anyhow!("the results object store: {e}"))?;
            store
                .put(name.as_str(), &mut bytes.as_slice())
                .await
                .map_err(|e| anyhow::anyhow!("storing {name}: {e}"))?;
            Some(name)
        }
        None => None,
    };
    let result = WindowResult {
        version: wire::VERSION,
        host: notice.host.clone(),
        id: notice.id.clone(),
        start_realtime_ns: notice.start_realtime_ns,
        duration_ns: notice.duration_ns,
        replayed: notice.replayed,
        worker: o.name.clone(),
        analysis_ns,
        delivered: delivered.max(1) as u64,
        tenants: analysed.tenants.clone(),
        pprof,
        anomalies,
        notes: analysed.notes,
        dropped_by_agent: notice.dropped,
        agent_cpu_ns: notice.agent_cpu_ns,
        agent_rss_bytes: notice.agent_rss_bytes,
        agent_uptime_ns: notice.agent_uptime_ns,
        late: analysed.late,
    };
    let ack = js
        .send_publish(
            wire::results_subject(&notice.host),
            jetstream::message::PublishMessage::build()
                .payload(serde_json::to_vec(&result)?.into())
                .message_id(&notice.id),
        )
        .await
        .map_err(|e| anyhow::anyhow!("publishing the result of {}: {e}", notice.id))?
        .await
        .map_err(|e| anyhow::anyhow!("the result of {} not acknowledged: {e}", notice.id))?;
    if !ack.duplicate {
        // The history learns each window once (a redelivered window's
        // result was published already).
        let mut h = history;
        h.add(&analysed.tenants);
        let value: bytes::Bytes = serde_json::to_vec(&h)?.into();
        // Only over the history this window was compared with (0: none yet).
        let stored = match js
            .send_publish(
                wire::history_subject(&notice.host),
                jetstream::message::PublishMessage::build()
                    .payload(value)
                    .expected_last_subject_sequence(revision),
            )
            .await
        {
            Ok(ack) => ack.await.is_ok(),
            Err(_) => false,
        };
        if !stored {
            // Another worker updated it meanwhile: its window counts, this
            // one is left out of the history (not of the results).
            ontime_core::errln!(
                "ontime analyse: {}'s history changed meanwhile; window {} is not added to it",
                notice.host,
                notice.id
            );
        }
    }
    m.ack()
        .await
        .map_err(|e| anyhow::anyhow!("acknowledging {}: {e}", notice.id))?;
    let _ = windows.delete(&notice.id).await;
    Ok(Outcome::Analysed {
        duplicate: ack.duplicate,
    })
}

/// Sends `m` to the dead letters with `reason`, and takes it off the
/// windows stream.
async fn dead(js: &jetstream::Context, m: &jetstream::Message, host: &str, reason: String) -> Result<Outcome> {
    ontime_core::errln!("ontime analyse: dead letter ({}): {reason}", m.subject);
    let reason_header: String = reason.chars().filter(|c| !c.is_control()).take(500).collect();
    js.send_publish(
        format!("ontime.dead.{host}"),
        jetstream::message::PublishMessage::build()
            .payload(m.payload.clone())
            .header(wire::DEAD_REASON_HEADER, reason_header.as_str())
            .header("Ontime-Original-Subject", m.subject.as_str()),
    )
    .await
    .map_err(|e| anyhow::anyhow!("publishing a dead letter: {e}"))?
    .await
    .map_err(|e| anyhow::anyhow!("a dead letter not acknowledged: {e}"))?;
    m.ack_with(AckKind::Term)
        .await
        .map_err(|e| anyhow::anyhow!("terminating a dead message: {e}"))?;
    Ok(Outcome::Dead)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn notice(host: &str, start: u64) -> WindowNotice {
        WindowNotice {
            version: wire::VERSION,
            host: host.into(),
            id: WindowNotice::id_of(host, start),
            start_realtime_ns: start,
            duration_ns: 1_000_000_000,
            bytes: 1000,
            targets: vec!["t0".into()],
            dropped: 0,
            replayed: false,
            agent_cpu_ns: 0,
            agent_rss_bytes: 0,
            agent_uptime_ns: 0,
            late: vec![],
        }
    }

    fn refusal(n: &WindowNotice) -> (String, String) {
        read_notice(&serde_json::to_vec(n).unwrap(), &wire::windows_subject(&n.host)).unwrap_err()
    }

    #[test]
    fn a_notice_is_checked_before_anything_is_sized_from_it() {
        let good = notice("h1", 42);
        let subject = wire::windows_subject("h1");
        assert_eq!(
            read_notice(&serde_json::to_vec(&good).unwrap(), &subject),
            Ok(good.clone())
        );
        let (host, why) = read_notice(&vec![b' '; wire::MAX_NOTICE_BYTES + 1], &subject).unwrap_err();
        assert!(host == "unknown" && why.contains("more than one may be"), "{why}");
        let (_, why) = read_notice(b"garbage", &subject).unwrap_err();
        assert!(why.contains("not a window notice"), "{why}");
        let (host, why) = read_notice(&serde_json::to_vec(&good).unwrap(), "ontime.windows.h2").unwrap_err();
        assert!(host == "h1" && why.contains("on subject ontime.windows.h2"), "{why}");
        let huge = WindowNotice {
            bytes: wire::MAX_WINDOW_BYTES + 1,
            ..good.clone()
        };
        assert!(refusal(&huge).1.contains("more than a worker takes"));
        let long = WindowNotice {
            duration_ns: wire::MAX_WINDOW_NS + 1,
            ..good.clone()
        };
        assert!(refusal(&long).1.contains("longer than any window"));
        let many_late = WindowNotice {
            late: (0..=crate::probes::MAX_PROBES)
                .map(|i| crate::probes::ProbeLate {
                    probe: format!("p{i}"),
                    ..Default::default()
                })
                .collect(),
            ..good.clone()
        };
        assert!(refusal(&many_late).1.contains("more than an agent sends"));
        let start = u64::MAX - 10;
        let wraps = WindowNotice {
            start_realtime_ns: start,
            id: WindowNotice::id_of("h1", start),
            ..good
        };
        assert!(refusal(&wraps).1.contains("longer than any window"));
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn a_window_larger_than_the_cap_is_not_kept() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("w.otrec");
        let rt = runtime();
        let bytes = vec![7u8; 1000];
        assert!(rt.block_on(fetch_capped(bytes.as_slice(), &file, 1000)).unwrap());
        assert_eq!(std::fs::read(&file).unwrap(), bytes);
        assert!(!rt.block_on(fetch_capped(bytes.as_slice(), &file, 999)).unwrap());
        assert!(!file.exists());
    }

    /// A panic in one window's analysis (an allocation past what a window
    /// may claim, a bug a crafted window finds) is a reason to dead-letter
    /// that window, not a dead worker; so is an error, a hang and the stop.
    #[test]
    fn an_analysis_is_isolated_from_the_worker() {
        let rt = runtime();
        let run = |work: Box<dyn FnOnce() -> Result<u32> + Send>, limit_ms: u64, stop: bool| {
            let ticks = Cell::new(0u32);
            let stop = AtomicBool::new(stop);
            let r = rt.block_on(isolated(
                work,
                Duration::from_millis(limit_ms),
                Duration::from_millis(10),
                || {
                    ticks.set(ticks.get() + 1);
                    async {}
                },
                &stop,
            ));
            (r, ticks.get())
        };
        let reason = |r: Isolated<u32>| match r {
            Isolated::Failed(why) => why,
            Isolated::Done(_) => panic!("done"),
            Isolated::Stopped => panic!("stopped"),
        };
        let done = run(Box::new(|| -> Result<u32> { Ok(7) }), 60_000, false).0;
        assert!(matches!(done, Isolated::Done(7)));
        let panics = || -> Result<u32> { panic!("memory allocation of 8000000000 bytes") };
        let why = reason(run(Box::new(panics), 60_000, false).0);
        assert_eq!(why, "the analysis panicked: memory allocation of 8000000000 bytes");
        let fails = || -> Result<u32> { anyhow::bail!("corrupt: META says 0 CPUs") };
        let why = reason(run(Box::new(fails), 60_000, false).0);
        assert_eq!(why, "cannot be analysed: corrupt: META says 0 CPUs");
        let slow = || -> Result<u32> {
            std::thread::sleep(Duration::from_millis(300));
            Ok(1)
        };
        let (r, ticks) = run(Box::new(slow), 100, false);
        assert!(reason(r).contains("took longer than"));
        assert!(ticks >= 1, "progress said while it ran");
        assert!(matches!(run(Box::new(slow), 60_000, true).0, Isolated::Stopped));
    }
}
