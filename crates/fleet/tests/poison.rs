//! A poison window goes to the dead letters with the reason and the
//! worker goes on, on a real nats-server (JetStream in a temporary store;
//! skipped without nats-server): a window that is no recording, a notice
//! that claims more than a worker takes, and a window whose workers kept
//! failing with it (delivered again and again, as when an allocation
//! failure aborts each worker that takes it, which no worker can catch).
//! The same worker then analyses a good window.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, AckKind};
use futures_util::StreamExt;
use ontime_fleet::conn::NatsArgs;
use ontime_fleet::wire::{self, WindowNotice};
use ontime_fleet::worker::{self, WorkerOptions};
use ontime_testkit::KillOnDrop;

/// nats-server with JetStream on `port`, its store and log in `dir`;
/// ready once its own log says so.
fn nats_server(dir: &Path, port: u16) -> KillOnDrop {
    let log = dir.join("nats.log");
    let out = std::fs::File::create(&log).unwrap();
    let server = KillOnDrop(
        Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(dir.join("store"))
            .stdin(Stdio::null())
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out))
            .spawn()
            .expect("nats-server"),
    );
    ontime_testkit::wait_until("nats-server ready", Duration::from_secs(20), || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("Server is ready")
    });
    server
}

/// A good window file: a second of one tenant, made in memory.
fn good_window(dir: &Path) -> Vec<u8> {
    use ontime_trace::recording::{Group, GroupKind, Meta, Recording};
    let tenant = Group {
        name: "t0".into(),
        kind: GroupKind::Tenant,
        source: vec![],
        vcpu_names: false,
    };
    let file = dir.join("good.otrec");
    Recording::of_events(
        Meta::of_this_host("bpf", 1_000_000_000, vec![tenant]),
        Default::default(),
        vec![],
        2_000_000_000,
    )
    .write(&file)
    .unwrap();
    std::fs::read(&file).unwrap()
}

/// Publishes a window as an agent would: the file (when given) into the
/// object store, then its notice claiming `bytes`.
async fn publish(js: &jetstream::Context, start: u64, file: Option<&[u8]>, bytes: u64) {
    let id = WindowNotice::id_of("h1", start);
    if let Some(mut data) = file {
        let store = js.get_object_store(wire::WINDOW_BUCKET).await.unwrap();
        store.put(id.as_str(), &mut data).await.unwrap();
    }
    let notice = WindowNotice {
        version: wire::VERSION,
        host: "h1".into(),
        id: id.clone(),
        start_realtime_ns: start,
        duration_ns: 1_000_000_000,
        bytes,
        targets: vec!["t0".into()],
        dropped: 0,
        replayed: true,
        agent_cpu_ns: 0,
        agent_rss_bytes: 0,
        agent_uptime_ns: 0,
        late: vec![],
    };
    js.send_publish(
        wire::windows_subject("h1"),
        jetstream::message::PublishMessage::build()
            .payload(serde_json::to_vec(&notice).unwrap().into())
            .message_id(&id),
    )
    .await
    .unwrap()
    .await
    .unwrap();
}

#[test]
fn poison_windows_are_dead_lettered_and_the_worker_goes_on() {
    if !ontime_testkit::tools_or_skip(&["nats-server"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let port = ontime_testkit::free_port();
    let _server = nats_server(d, port);
    let nats = NatsArgs {
        servers: vec![format!("nats://127.0.0.1:{port}")],
        ..NatsArgs::default()
    };
    let good = good_window(d);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let js = jetstream::new(nats.connect("ontime-test").await.unwrap());
        ontime_fleet::conn::ensure(&js).await.unwrap();
        // The workers' consumer, as the first worker makes it.
        let consumer: jetstream::consumer::Consumer<pull::Config> = js
            .get_stream(wire::WINDOWS_STREAM)
            .await
            .unwrap()
            .get_or_create_consumer(
                wire::ANALYSERS,
                pull::Config {
                    durable_name: Some(wire::ANALYSERS.into()),
                    ack_policy: jetstream::consumer::AckPolicy::Explicit,
                    ack_wait: Duration::from_secs(30),
                    max_deliver: 5,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        // A window three workers took and none finished (each handed it
        // back here; a killed worker's ack wait counts the same).
        publish(&js, 3, Some(&good), good.len() as u64).await;
        for _ in 0..3 {
            let mut batch = consumer
                .fetch()
                .max_messages(1)
                .expires(Duration::from_secs(10))
                .messages()
                .await
                .unwrap();
            let m = batch.next().await.expect("the window, delivered").unwrap();
            m.ack_with(AckKind::Nak(None)).await.unwrap();
        }
        publish(&js, 1, Some(b"not a recording"), 15).await;
        publish(&js, 2, None, wire::MAX_WINDOW_BYTES + 1).await;
        publish(&js, 4, Some(&good), good.len() as u64).await;
    });

    let o = WorkerOptions {
        nats: nats.clone(),
        name: "w1".into(),
        ack_wait: Duration::from_secs(30),
        max_windows: Some(1),
        scratch: d.join("scratch"),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let w = std::thread::spawn(move || worker::run(&o, stop));
    ontime_testkit::wait_until(
        "the worker past the poison to the good window",
        Duration::from_secs(120),
        || w.is_finished(),
    );
    let summary = w.join().expect("the worker did not panic").unwrap();
    assert_eq!((summary.analysed, summary.dead), (1, 3), "{summary:?}");

    let reasons: Vec<String> = rt.block_on(async {
        let js = jetstream::new(nats.connect("ontime-test").await.unwrap());
        let dead = js.get_stream(wire::DEAD_STREAM).await.unwrap();
        let mut out = Vec::new();
        for seq in 1..=3 {
            let m = dead.get_raw_message(seq).await.unwrap();
            out.push(
                m.headers
                    .get(wire::DEAD_REASON_HEADER)
                    .map(|v| v.to_string())
                    .unwrap_or_default(),
            );
        }
        out
    });
    for says in [
        "delivered 4 times without a result",
        "cannot be analysed",
        "more than a worker takes",
    ] {
        assert!(
            reasons.iter().any(|r| r.contains(says)),
            "{says:?} not among {reasons:?}"
        );
    }
}
