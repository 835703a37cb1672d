//! End-to-end tests of per-event explanation through the binary: a probe
//! pinned to CPU 1 where a SCHED_FIFO process busies the CPU for 80 ms
//! twice a second, the probe below it at a lower real-time priority (so a
//! busy machine's fair-class work does not delay it); the late events must
//! be charged to that process. Assertions are on who and which cause,
//! never on timings. As root (BPF or perf tracepoints); skipped otherwise.

use ontime_testkit::KillOnDrop;
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::Duration;

fn ontime() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ontime"))
}

/// The tests take turns: each needs CPU 1 to itself and its hog.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A process at SCHED_FIFO 50 on CPU 1, busy 80 ms of every 500 ms;
/// killed on drop.
struct Hog(ontime_testkit::FifoHog);

impl Hog {
    fn start() -> Option<Hog> {
        Hog::start_resting(0.42)
    }

    fn start_resting(rest_s: f64) -> Option<Hog> {
        ontime_testkit::FifoHog::start_resting(rest_s).map(Hog)
    }

    fn pid(&self) -> u32 {
        self.0.pid()
    }
}

fn can_run() -> bool {
    if !ontime_testkit::is_root() {
        ontime_testkit::skip("needs root (SCHED_FIFO, BPF or perf tracepoints)");
        return false;
    }
    if ontime_core::limits::online_cpus() < 2 {
        ontime_testkit::skip("needs two CPUs (the probe and its hog on CPU 1)");
        return false;
    }
    ontime_testkit::tools_or_skip(&["python3"])
}

/// The share of the explained lateness whose culprit is process `pid`.
fn share_of(explanation: &Value, pid: u32) -> f64 {
    explanation["causes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["culprit"]["pid"].as_u64() == Some(pid as u64))
        .map(|c| c["share"].as_f64().unwrap())
        .sum()
}

fn assert_charged_to_hog(x: &Value, hog: u32, what: &str) {
    assert!(x["late"].as_u64().unwrap() > 0, "{what}: no late event: {x:#}");
    assert!(x["explained"].as_u64().unwrap() > 0, "{what}: nothing explained: {x:#}");
    let first = &x["causes"][0];
    assert_eq!(first["cause"], "waited_for_cpu", "{what}: {x:#}");
    assert_eq!(first["culprit"]["pid"].as_u64(), Some(hog as u64), "{what}: {x:#}");
    assert_eq!(first["culprit"]["cpu"].as_u64(), Some(1), "{what}: {x:#}");
    let share = share_of(x, hog);
    assert!(
        share >= 0.9,
        "{what}: the hog accounts for {share:.3} of the lateness: {x:#}"
    );
    // Both mechanisms record every CPU's interrupts.
    assert!(!x["unseen"].to_string().contains("interrupts"), "{what}: {x:#}");
    let sum: u64 = x["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["ns"].as_u64().unwrap())
        .sum();
    assert_eq!(sum, x["lateness_ns"].as_u64().unwrap(), "{what}: causes add up");
}

#[test]
fn crawl_explain_names_the_fifo_process_that_held_its_cpu() {
    if !can_run() {
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let Some(hog) = Hog::start() else { return };
    let out = ontime()
        .args([
            "crawl",
            "--with-gateway",
            "--url",
            &format!("http://127.0.0.1:{}/b0", ontime_testkit::free_port()),
            "--rate",
            "500",
            "-D",
            "4s",
            "--vcpus",
            "1",
            "-a",
            "1",
            "--policy",
            "fifo:10",
            "--explain",
            // Only polls that waited behind the hog are this late: dozens
            // of them, where p99.9 of 2000 polls would leave two.
            "--explain-over",
            "20ms",
            "--json",
            "--keep-recording",
        ])
        .arg(dir.path().join("crawl.otrec"))
        .arg("--perfetto")
        .arg(dir.path().join("crawl.pftrace"))
        .output()
        .unwrap();
    let hog_pid = hog.pid();
    drop(hog);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_charged_to_hog(&r["explanation"], hog_pid, "crawl --explain");
    assert!(dir.path().join("crawl.otrec").exists(), "--keep-recording kept it");
    perfetto_holds_the_late_events(&dir.path().join("crawl.pftrace"), &r["explanation"], hog_pid);
}

/// With the flight recorder on, the recording keeps only the windows
/// around the late intervals, and the late wake-ups are still charged to
/// the hog.
#[test]
fn cyclic_explain_with_the_flight_recorder_keeps_only_windows_around_late_intervals() {
    if !can_run() {
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let windows = dir.path().join("windows");
    // Busy once every 3 s: most seconds have no late wake-up.
    let Some(hog) = Hog::start_resting(2.92) else { return };
    let out = ontime()
        .args([
            "cyclic",
            "-a",
            "1",
            "-p",
            "10",
            "-i",
            "1000",
            "-D",
            "8s",
            "--explain",
            "--explain-over",
            "20ms",
            "--flight",
            "on",
            "--keep-around",
            "0s",
            "--json",
            "--keep-recording",
        ])
        .arg(&windows)
        .output()
        .unwrap();
    let hog_pid = hog.pid();
    drop(hog);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let x = &r["explanation"];
    assert_charged_to_hog(x, hog_pid, "cyclic --explain --flight on");
    let note = x["notes"].to_string();
    assert!(note.contains("flight recorder: kept"), "{x:#}");
    let kept = ontime_trace::store::window_files(&windows).unwrap().len();
    assert!(kept > 0 && kept < 8, "{kept} of about 9 windows kept: {note}");
}

/// Perfetto's own definitions (scripts/setup.sh installs the PyPI
/// perfetto package into its own environment) decode the trace: CPU 1's
/// switches, the hog named, and a slice per listed late event on a track
/// of the probe's thread.
fn perfetto_holds_the_late_events(trace: &std::path::Path, x: &Value, hog: u32) {
    let python = "/var/cache/ontime/perfetto/bin/python";
    if !std::path::Path::new(python).exists() {
        ontime_testkit::skip("Perfetto's definitions are not installed (scripts/setup.sh installs them)");
        return;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/perfetto-check.py");
    let out = Command::new(python).arg(script).arg(trace).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(got["switches"].as_u64().unwrap() > 0, "{got}");
    assert!(got["cpus"].as_array().unwrap().contains(&Value::from(1)), "{got}");
    assert_eq!(got["threads"][hog.to_string()]["name"], "python3", "{got}");
    let worst = x["worst"].as_array().unwrap();
    assert_eq!(got["slices"].as_array().unwrap().len(), worst.len(), "{got}");
    let probe = worst[0]["probe"]["tid"].as_u64().unwrap();
    assert!(
        got["tracks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["tid"].as_u64() == Some(probe)),
        "{got}"
    );
    assert!(
        got["slices"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"].as_str().unwrap().contains("behind python3")),
        "{got}"
    );
}

#[test]
fn explain_joins_a_cyclic_result_with_a_recording_made_beside_it() {
    if !can_run() {
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("host.otrec");
    let result = dir.path().join("cyclic.json");
    let Some(hog) = Hog::start() else { return };
    let said = dir.path().join("recorder.err");
    let recorder = KillOnDrop(
        ontime()
            .args(["observe", "record", "--all", "-D", "6s", "-o"])
            .arg(&rec)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&said).unwrap())
            .spawn()
            .unwrap(),
    );
    // The recorder says when it records.
    ontime_testkit::wait_until("observe record to start", Duration::from_secs(60), || {
        std::fs::read_to_string(&said).is_ok_and(|s| s.contains("ontime: recording"))
    });
    let out = ontime()
        .args([
            "cyclic",
            "-a",
            "1",
            "-p",
            "10",
            "-i",
            "1000",
            "-D",
            "3s",
            "--keep-late",
            "--explain-over",
            "20ms",
            "--result",
        ])
        .arg(&result)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let st = recorder.wait_output(Duration::from_secs(60));
    assert!(
        st.status.success(),
        "observe record: {}",
        std::fs::read_to_string(&said).unwrap_or_default()
    );
    let hog_pid = hog.pid();
    drop(hog);
    let kept: Value = serde_json::from_str(&std::fs::read_to_string(&result).unwrap()).unwrap();
    assert!(
        kept["late_events"]["events"].as_array().is_some_and(|e| !e.is_empty()),
        "{kept:#}"
    );
    assert!(kept.get("explanation").is_none(), "--keep-late does not record");
    let out = ontime()
        .arg("explain")
        .arg(&result)
        .arg(&rec)
        .arg("--json")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let x: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_charged_to_hog(&x, hog_pid, "ontime explain");
    // As a guest's: a host recording without QEMU is refused by name,
    // and a guest recording without its clock offset by clap.
    let clock = dir.path().join("clock.json");
    std::fs::write(&clock, r#"{"offset_ns": 0, "rtt_ns": 0, "answered": 1, "asked": 1}"#).unwrap();
    let out = ontime()
        .arg("explain")
        .arg(&result)
        .arg(&rec)
        .arg("--guest")
        .arg(&rec)
        .arg("--guest-clock")
        .arg(&clock)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no QEMU vCPU threads"), "{err}");
    let out = ontime()
        .arg("explain")
        .arg(&result)
        .arg(&rec)
        .arg("--guest")
        .arg(&rec)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    // The text says it in words.
    let text = ontime().arg("explain").arg(&result).arg(&rec).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("behind python3"), "{text}");
    // On x86 the local timer's runs are in it, flagged as a system vector,
    // or the recording says why not.
    let recording = ontime_trace::recording::Recording::read(&rec).unwrap();
    if cfg!(target_arch = "x86_64") && !recording.meta.unavailable.iter().any(|u| u.contains("system vectors")) {
        use ontime_trace::event::{kind, F_IRQ_VECTOR};
        assert!(
            recording
                .events
                .iter()
                .any(|e| e.kind == kind::IRQ_ENTRY && e.flags & F_IRQ_VECTOR != 0 && e.a == 0xec),
            "no local timer entry in the recording"
        );
    }
}

/// A flow whose receiver is pinned to the hog's CPU: its datagrams are in
/// (the kernel stamped them on the sender's CPU) while the receiver waits
/// behind the hog, so their lateness is the receiver's, behind the hog;
/// the result keeps each late datagram's send time and receive stamp,
/// and the sender's report names its thread.
#[test]
fn explain_splits_a_late_datagram_at_its_receive_stamp() {
    if !can_run() || !ontime_testkit::tools_or_skip(&["taskset"]) {
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (rec, flow, send) = (
        dir.path().join("host.otrec"),
        dir.path().join("flow.json"),
        dir.path().join("send.json"),
    );
    let Some(hog) = Hog::start() else { return };
    let said = dir.path().join("recorder.err");
    let recorder = KillOnDrop(
        ontime()
            .args(["observe", "record", "--all", "-D", "8s", "-o"])
            .arg(&rec)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&said).unwrap())
            .spawn()
            .unwrap(),
    );
    ontime_testkit::wait_until("observe record to start", Duration::from_secs(60), || {
        std::fs::read_to_string(&said).is_ok_and(|s| s.contains("ontime: recording"))
    });
    let to = format!("127.0.0.1:{}", ontime_testkit::free_port());
    let receiver = KillOnDrop(
        Command::new("taskset")
            .args(["-c", "1"])
            .arg(env!("CARGO_BIN_EXE_ontime"))
            .args(["net", "receive", "--listen", &to, "--deadline", "20ms", "--result"])
            .arg(&flow)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let sent = Command::new("taskset")
        .args(["-c", "0"])
        .arg(env!("CARGO_BIN_EXE_ontime"))
        .args(["net", "send", "--to", &to, "--rate-mbit", "0.8", "--size", "1000"])
        .args(["-D", "3s", "--start-after", "500ms", "--result"])
        .arg(&send)
        .output()
        .unwrap();
    assert!(sent.status.success(), "{}", String::from_utf8_lossy(&sent.stderr));
    receiver.signal(libc::SIGINT);
    let r = receiver.wait_output(Duration::from_secs(30));
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let st = recorder.wait_output(Duration::from_secs(60));
    assert!(
        st.status.success(),
        "observe record: {}",
        std::fs::read_to_string(&said).unwrap_or_default()
    );
    let hog_pid = hog.pid();
    drop(hog);
    let kept: Value = serde_json::from_str(&std::fs::read_to_string(&flow).unwrap()).unwrap();
    let events = kept["late_events"]["events"].as_array().cloned().unwrap_or_default();
    assert!(!events.is_empty(), "no datagram missed 20 ms behind the hog: {kept:#}");
    for e in &events {
        let (sent, received, actual) = (
            e["sent_ns"].as_u64().unwrap(),
            e["received_ns"].as_u64().unwrap(),
            e["actual_ns"].as_u64().unwrap(),
        );
        assert!(sent <= received && received <= actual, "{e}");
    }
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&send).unwrap()).unwrap();
    assert!(report["tid"].as_u64().is_some(), "{report}");
    let out = ontime()
        .arg("explain")
        .arg(&flow)
        .arg(&rec)
        .arg("--sender")
        .arg(&send)
        .arg("--json")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let x: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_charged_to_hog(&x, hog_pid, "a flow's late datagrams");
    assert!(
        !x["notes"]
            .to_string()
            .contains("sending thread is not in the recording"),
        "{x:#}"
    );
    // The sender's report goes with a flow's result only.
    let cyclic = dir.path().join("cyclic.json");
    std::fs::write(
        &cyclic,
        r#"{"late_events": {"events": [], "late": 0, "threshold_ns": 1, "threshold_from": "x"}}"#,
    )
    .unwrap();
    let out = ontime()
        .arg("explain")
        .arg(&cyclic)
        .arg(&rec)
        .arg("--sender")
        .arg(&send)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--sender"), "{err}");
}

#[test]
fn explain_refuses_a_result_without_late_events() {
    let dir = tempfile::tempdir().unwrap();
    let result = dir.path().join("r.json");
    std::fs::write(&result, r#"{"latency": {}}"#).unwrap();
    let out = ontime()
        .arg("explain")
        .arg(&result)
        .arg(dir.path().join("none.otrec"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--keep-late"), "{err}");
}
