//! `ontime analyse`: one worker of the pool that shares the windows stream
//! through one durable pull consumer (work-queue semantics: start more
//! workers to scale). Each notice: fetch the window, analyse it, compare
//! it with the tenant's history, publish the result (message id = window
//! id, so a redelivered window is not counted twice) and its pprof, then
//! acknowledge. A window whose worker dies unacknowledged is redelivered
//! after the ack wait. What cannot be read goes to the dead letters with
//! the reason; the worker goes on.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use async_nats::jetstream::{self, consumer::pull, AckKind};
use futures_util::StreamExt;

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

pub fn run(o: &WorkerOptions, stop: Arc<AtomicBool>) -> Result<WorkerSummary> {
    std::fs::create_dir_all(&o.scratch).with_context(|| format!("cannot create {}", o.scratch.display()))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    rt.block_on(serve(o, &stop))
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
                // handed out forever.
                max_deliver: 5,
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
            match handle(o, &js, &m).await {
                Ok(Outcome::Analysed { duplicate }) => {
                    summary.analysed += 1;
                    summary.duplicate_results += duplicate as u64;
                }
                Ok(Outcome::Dead) => summary.dead += 1,
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
    Analysed { duplicate: bool },
    Dead,
}

async fn handle(o: &WorkerOptions, js: &jetstream::Context, m: &jetstream::Message) -> Result<Outcome> {
    let delivered = m.info().map(|i| i.delivered as u64).unwrap_or(1);
    let notice: WindowNotice = match serde_json::from_slice::<WindowNotice>(&m.payload) {
        Err(e) => return dead(js, m, "unknown", format!("not a window notice: {e}")).await,
        Ok(n) if n.version != wire::VERSION => {
            let why = format!("message version {}, this worker reads {}", n.version, wire::VERSION);
            return dead(js, m, "unknown", why).await;
        }
        Ok(n) => n,
    };
    if let Err(e) = wire::check_host(&notice.host) {
        return dead(js, m, "unknown", e).await;
    }
    if m.subject.as_str() != wire::windows_subject(&notice.host)
        || notice.id != WindowNotice::id_of(&notice.host, notice.start_realtime_ns)
    {
        let why = format!("notice of {} ({}) on subject {}", notice.host, notice.id, m.subject);
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
    let file = o.scratch.join(format!("{}.otrec", notice.id));
    {
        let mut f = tokio::fs::File::create(&file)
            .await
            .with_context(|| format!("cannot create {}", file.display()))?;
        tokio::io::copy(&mut object, &mut f)
            .await
            .with_context(|| format!("fetching window {}", notice.id))?;
    }
    let t = Instant::now();
    let path = file.clone();
    let mut job = tokio::task::spawn_blocking(move || crate::analysis::analyse(&path));
    // Long analyses keep the window: "in progress" before the ack wait.
    let mut tick = tokio::time::interval((o.ack_wait / 2).max(Duration::from_secs(1)));
    tick.tick().await;
    let analysed = loop {
        tokio::select! {
            r = &mut job => break r,
            _ = tick.tick() => { let _ = m.ack_with(AckKind::Progress).await; }
        }
    };
    let _ = std::fs::remove_file(&file);
    let analysed = match analysed.context("the analysis panicked")? {
        Ok(a) => a,
        Err(e) => {
            return dead(
                js,
                m,
                &notice.host,
                format!("window {} cannot be analysed: {e:#}", notice.id),
            )
            .await
        }
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
        delivered,
        tenants: analysed.tenants.clone(),
        pprof,
        anomalies,
        notes: analysed.notes,
        dropped_by_agent: notice.dropped,
        agent_cpu_ns: notice.agent_cpu_ns,
        agent_rss_bytes: notice.agent_rss_bytes,
        agent_uptime_ns: notice.agent_uptime_ns,
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
