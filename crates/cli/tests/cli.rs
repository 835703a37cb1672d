//! End-to-end tests of the `ontime` binary: crawler against gateway on
//! loopback, stalls, interruption, bad input, and the cyclic probe.
//! Every process a test starts is owned by a guard that kills it on drop,
//! so a failing test leaves nothing running.

use ontime_testkit::{free_port, is_root, KillOnDrop as Proc};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn ontime() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ontime"))
}

/// `ontime crawl --with-gateway` polling building b0 of a gateway it
/// starts on `port`.
fn crawl_with_gateway(port: u16) -> Command {
    let mut c = ontime();
    c.args([
        "crawl",
        "--with-gateway",
        "--url",
        &format!("http://127.0.0.1:{port}/b0"),
    ]);
    c
}

/// `--with-gateway` without a URL (docs/explain.md's example) polls a
/// local gateway on a free port.
#[test]
fn with_gateway_alone_polls_a_local_gateway() {
    let out = ontime()
        .args([
            "crawl",
            "--with-gateway",
            "--rate",
            "100",
            "-D",
            "1s",
            "--json",
            "--no-dma-latency",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(r["polls"]["ok"].as_u64().unwrap_or(0) > 0, "{r}");
}

/// After `after`, stops the process (SIGSTOP) for `length`, then resumes it.
fn pause_after(p: &Proc, after: Duration, length: Duration) {
    std::thread::sleep(after);
    p.signal(libc::SIGSTOP);
    std::thread::sleep(length);
    p.signal(libc::SIGCONT);
}

fn wait_listening(port: u16) {
    let t0 = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "gateway did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn pct(summary: &Value, name: &str) -> Option<u64> {
    summary["percentiles_ns"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap()["value_ns"]
        .as_u64()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn crawl_counts_add_up_and_interval_error_matches_gateway_log() {
    let dir = tempfile::tempdir().unwrap();
    let (log, result) = (dir.path().join("recv.log"), dir.path().join("r.json"));
    let port = free_port();
    let out = crawl_with_gateway(port)
        .args([
            "--points",
            "200",
            "-N",
            "10",
            "--period",
            "100ms",
            "-D",
            "3s",
            "--no-dma-latency",
            // Only a hang misses: on a machine busy with the other tests an
            // answer can take longer than the 100 ms period.
            "--timeout",
            "10s",
        ])
        .arg("--gateway-log")
        .arg(&log)
        .arg("--result")
        .arg(&result)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = read_json(&result);
    let polls = &r["polls"];
    let planned = u(&polls["planned"]);
    // 20 streams at 10 Hz for 3 s.
    assert_eq!(planned, 600, "{polls}");
    assert_eq!(u(&polls["ok"]) + u(&r["missed"]), planned);
    assert_eq!(
        u(&r["send_lag"]["count"]),
        planned,
        "one send-lag sample per planned poll"
    );
    assert_eq!(u(&r["missed"]), 0, "idle loopback should miss nothing: {polls}");
    // Our gateway says who stamped every receive time the interval error
    // comes from (the kernel once its stamping is on, else the handler).
    let st = &r["receive_stamps"];
    assert_eq!(u(&st["kernel"]) + u(&st["user"]), u(&polls["ok"]), "{st}");
    assert_eq!(u(&st["unknown"]), 0, "{st}");
    assert!(u(&st["kernel"]) > 0, "kernel stamps on loopback: {st}");
    let res = &r["resources"];
    assert!(
        u(&res["traffic"]["tx_bytes"]) > 0 && u(&res["traffic"]["rx_bytes"]) > 0,
        "{res}"
    );
    // Every poll after each stream's first is an interval sample.
    assert_eq!(u(&r["interval_error"]["count"]), planned - 20);

    let an = ontime()
        .args(["gateway", "analyze"])
        .arg(&log)
        .args(["--period", "100ms", "--json"])
        .output()
        .unwrap();
    assert!(an.status.success(), "{}", String::from_utf8_lossy(&an.stderr));
    let g: Value = serde_json::from_slice(&an.stdout).unwrap();
    assert_eq!(u(&g["points"]), 20);
    assert_eq!(u(&g["missed"]), 0);
    assert_eq!(g["method"], "poll numbers");
    assert_eq!(
        g["complete"], true,
        "a gateway stopped cleanly marks its log's end: {g}"
    );
    let (c, gw) = (&r["interval_error"], &g["interval_error"]);
    assert_eq!(c["count"], gw["count"]);
    for p in ["p50", "p90", "p99"] {
        assert_eq!(pct(c, p), pct(gw, p), "{p} differs between crawler and gateway log");
    }
    assert_eq!(c["max_ns"], gw["max_ns"]);
}

#[test]
fn stalled_gateway_shows_missed_polls_with_their_errors() {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("recv.log");
    let gw = Proc::spawn(
        ontime()
            .args([
                "gateway",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--points",
                "100",
                "--log",
            ])
            .arg(&log),
    );
    wait_listening(port);
    let result = dir.path().join("r.json");
    let crawl = Proc::spawn(
        ontime()
            .args([
                "crawl",
                "--url",
                &format!("http://127.0.0.1:{port}/b0"),
                "--points",
                "100",
                "-N",
                "10",
            ])
            .args([
                "--period",
                "100ms",
                "-D",
                "5s",
                "--threshold",
                "50ms",
                "--no-dma-latency",
            ])
            .arg("--result")
            .arg(&result),
    );
    pause_after(&gw, Duration::from_millis(1500), Duration::from_secs(2));
    let out = crawl.wait_output(Duration::from_secs(20));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = read_json(&result);
    let missed = u(&r["missed"]);
    // 100 polls/s stalled for 2 s: about 200 missed (edges vary by a
    // period). A busy machine adds timeouts of its own, so only the
    // stall's share is a bound.
    assert!(missed >= 150, "missed {missed}: {}", r["polls"]);
    assert_eq!(u(&r["polls"]["ok"]) + missed, u(&r["polls"]["planned"]));
    // Each missed poll is an interval-error sample of a full period.
    let ie = &r["interval_error"];
    assert!(u(&ie["above_threshold"]) >= missed, "{ie}");
    assert!(u(&ie["max_ns"]) >= 100_000_000);
    // Their response times are samples too, at least the timeout long.
    assert!(
        u(&r["response_time"]["above_threshold"]) >= missed / 2,
        "{}",
        r["response_time"]
    );
    // The gateway received every request (its backlog after the stall)
    // and, by poll numbers, counts what the crawler counts: the polls that
    // came too late to be answered in time. Only a request caught between
    // its receipt and its answer by the stop can differ (at most one per
    // stream in flight).
    gw.signal(libc::SIGTERM);
    drop(gw.wait_output(Duration::from_secs(10)));
    let out = ontime()
        .args(["gateway", "analyze", "--period", "100ms", "--json"])
        .arg(&log)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let g: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(g["method"], "poll numbers");
    let gw_missed = u(&g["missed"]);
    assert!(gw_missed.abs_diff(missed) <= 2, "gateway {gw_missed}, crawler {missed}");
    let (gc, cc) = (u(&g["interval_error"]["count"]), u(&ie["count"]));
    assert!(gc.abs_diff(cc) <= 2, "samples: gateway {gc}, crawler {cc}");
}

#[test]
fn bad_input_gives_one_error_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "period = 5\n[[gateway]]\nurl = 'http://127.0.0.1:1/b0'\npoints = 10\n",
    )
    .unwrap();
    let unknown = dir.path().join("unknown.toml");
    std::fs::write(
        &unknown,
        "[[gateway]]\nurl = 'http://127.0.0.1:1/b0'\npoints = 10\nperiode = '1s'\n",
    )
    .unwrap();
    let cases: Vec<Vec<String>> = vec![
        vec!["crawl".into(), "--config".into(), bad.display().to_string()],
        vec!["crawl".into(), "--config".into(), unknown.display().to_string()],
        vec!["crawl".into(), "--config".into(), "/nonexistent/crawl.toml".into()],
        vec!["crawl".into(), "--vcpus".into(), "0".into()],
        vec!["crawl".into(), "--url".into(), "ftp://x/b0".into()],
        vec!["crawl".into(), "--period".into(), "soon".into()],
        vec!["crawl".into(), "--bogus".into()],
        vec!["crawl".into(), "-a".into(), "4095".into()],
        vec!["cyclic".into(), "-i".into(), "1000".into()],
        vec![
            "cyclic".into(),
            "--policy".into(),
            "fifo:0".into(),
            "-l".into(),
            "1".into(),
        ],
        vec!["gateway".into(), "--drop-probability".into(), "2".into()],
    ];
    let log = dir.path().join("recv.log");
    std::fs::write(&log, "1 b0 1 1\n2 b0 1 1\n").unwrap();
    let log = log.display().to_string();
    let words = |s: &str| -> Vec<String> { s.split_whitespace().map(String::from).collect() };
    // Found by trying bad values as a new user would: each once hung, grew
    // without bound, aborted, was cut silently or measured nothing.
    let mut cases = cases;
    cases.extend([
        words(&format!("gateway analyze {log} --period 0s")),
        words(&format!("gateway analyze {log} --period 1ns")),
        words("crawl --rate 1e12 --url http://127.0.0.1:1/b0"),
        words("crawl --rate nan --url http://127.0.0.1:1/b0"),
        words("crawl --points 4000000000 --url http://127.0.0.1:1/b0"),
        words("crawl --vcpus 10000 --url http://127.0.0.1:1/b0"),
        words("crawl -D 0s --url http://127.0.0.1:1/b0"),
        words("crawl --rate 10"),
        words("crawl --url http://127.0.0.1:1/b0 --result /no/such/dir/x.json"),
        words("cyclic -h 100000000000 -D 1s"),
        words("cyclic -l 0"),
        words("cyclic -t 100000 -l 1"),
        words("cyclic -D 1s --result /no/such/dir/x.json"),
        words("observe record -d 0s --all"),
        words("observe report /nonexistent.otrec --windows 0s"),
        words("profile record --rate 0 --all"),
        words("profile record --rate 20000 --all -d 1s"),
        words("profile record"),
        words("profile report /nonexistent.otrec"),
        words(&format!("profile report {log}")),
        words("bench report /nonexistent.json"),
        words(&format!("bench report {log}")),
        words(&format!("bench report {}", dir.path().display())),
    ]);
    for args in cases {
        let out = ontime().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?} printed more than one line: {err}");
        assert!(err.starts_with("ontime: error: "), "{args:?}: {err}");
    }
}

#[test]
fn sigint_writes_partial_results() {
    let dir = tempfile::tempdir().unwrap();
    let result = dir.path().join("r.json");
    let port = free_port();
    let crawl = Proc::spawn(
        ontime()
            .args([
                "crawl",
                "--with-gateway",
                "--url",
                &format!("http://127.0.0.1:{port}/b0"),
                "--rate",
                "200",
            ])
            .args(["-D", "60s", "--no-dma-latency"])
            .arg("--result")
            .arg(&result),
    );
    // Interrupted once its own gateway answers (the crawler is polling).
    wait_listening(port);
    std::thread::sleep(Duration::from_secs(1));
    crawl.signal(libc::SIGINT);
    let out = crawl.wait_output(Duration::from_secs(10));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = read_json(&result);
    assert_eq!(r["interrupted"], true);
    let planned = u(&r["polls"]["planned"]);
    assert!((1..2000).contains(&planned), "planned {planned}");
    assert_eq!(u(&r["polls"]["ok"]) + u(&r["missed"]), planned);
    assert!(String::from_utf8_lossy(&out.stdout).contains("(interrupted)"));
    // The length reported is the one measured, not the one asked for.
    let (ran, asked) = (u(&r["duration_ns"]), u(&r["planned_duration_ns"]));
    assert_eq!(asked, 60_000_000_000);
    assert!(ran < 20_000_000_000, "duration_ns {ran} after an interrupt at ~2 s");
}

/// A reader that closes the pipe early (`| head -1`) ends the output, not
/// the command: no panic, the run finishes and exits 0.
#[test]
fn a_closed_stdout_pipe_is_not_a_crash() {
    let mut child = ontime()
        .args(["cyclic", "-i", "1000", "-l", "200", "--no-dma-latency", "-h", "20"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {err}", out.status);
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn cyclic_counts_overruns_when_the_probe_is_blocked() {
    let dir = tempfile::tempdir().unwrap();
    let result = dir.path().join("c.json");
    let hlog = dir.path().join("c.hlog");
    let p = Proc::spawn(
        ontime()
            .args(["cyclic", "-i", "1000", "-D", "3s", "-h", "50", "--no-dma-latency"])
            .arg("--result")
            .arg(&result)
            .arg("--hlog")
            .arg(&hlog),
    );
    pause_after(&p, Duration::from_millis(1200), Duration::from_millis(300));
    let out = p.wait_output(Duration::from_secs(20));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = read_json(&result);
    let over = u(&r["overruns"]);
    assert!(
        over >= 250,
        "blocked 300 ms at 1 ms: expected ~300 overruns, got {over}"
    );
    // Every planned wake-up is a sample: 3 s at 1 ms.
    assert_eq!(u(&r["latency"]["count"]), 3000);
    assert!(u(&r["latency"]["max_ns"]) >= 250_000_000);
    // The histogram log holds the same samples, interval by interval, so
    // runs pool exactly (not from log-bin upper bounds).
    let merged = ontime_core::hlog::read_merged(&hlog, "latency").unwrap();
    assert_eq!(merged.len(), 3000);
    assert_eq!(merged.percentile(50.0), pct(&r["latency"], "p50"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("# Histogram\n000000 "), "cyclictest layout: {text}");
    assert!(text.contains("# Histogram Overflows:"));
}

#[test]
fn cyclic_runs_with_fifo_and_load_when_root() {
    if !is_root() {
        ontime_testkit::skip("SCHED_FIFO needs root");
        return;
    }
    if ontime_core_which("stress-ng").is_none() {
        ontime_testkit::skip("stress-ng is not installed (scripts/setup.sh installs it)");
        return;
    }
    let out = ontime()
        .args([
            "cyclic", "-p", "80", "-m", "-i", "500", "-l", "2000", "--load", "kernel", "--json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(u(&r["latency"]["count"]), 2000);
    assert_eq!(r["options"]["policy"]["policy"], "fifo");
    assert_eq!(r["options"]["load"], "kernel");
    // The load is gone afterwards.
    let ps = Command::new("pgrep").arg("-f").arg("stress-ng --shm").output().unwrap();
    assert!(
        ps.stdout.is_empty(),
        "stress-ng survived: {}",
        String::from_utf8_lossy(&ps.stdout)
    );
}

fn ontime_core_which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(name)).find(|p| p.is_file()))
}

#[test]
fn store_hlog_and_poll_records_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let (db, hlog, polls) = (
        dir.path().join("v.db"),
        dir.path().join("c.hlog"),
        dir.path().join("p.csv"),
    );
    let port = free_port();
    let out = crawl_with_gateway(port)
        .args([
            "--points",
            "50",
            "-N",
            "10",
            "--period",
            "100ms",
            "-D",
            "2s",
            "--hlog-interval",
            "500ms",
            "--json",
        ])
        .args(["--no-dma-latency"])
        .arg("--store")
        .arg(&db)
        .arg("--hlog")
        .arg(&hlog)
        .arg("--polls")
        .arg(&polls)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let planned = u(&r["polls"]["planned"]);
    assert_eq!(planned, 100);
    // Every poll has its record; every answered one its 10 values (on a
    // busy machine some polls time out, and a timed-out poll has none).
    let ok = u(&r["polls"]["ok"]);
    assert!(ok > 0, "{}", r["polls"]);
    assert_eq!(u(&r["sink"]["poll_records"]), planned);
    assert_eq!(u(&r["sink"]["stored_values"]), ok * 10, "{}", r["polls"]);
    let csv = std::fs::read_to_string(&polls).unwrap();
    assert_eq!(csv.lines().count() as u64, planned + 1);
    assert_eq!(csv.lines().filter(|l| l.ends_with(",200,ok")).count() as u64, ok);
    let rows = Command::new("sqlite3")
        .arg(&db)
        .arg("SELECT count(*) FROM readings WHERE status = 0")
        .output();
    if let Ok(rows) = rows {
        if rows.status.success() {
            assert_eq!(String::from_utf8_lossy(&rows.stdout).trim(), (ok * 10).to_string());
        }
    }
    let h = std::fs::read_to_string(&hlog).unwrap();
    // 4 intervals of 500 ms, 3 metrics each.
    let lines = h.lines().filter(|l| l.starts_with("Tag=")).count();
    assert_eq!(lines, 12, "{h}");
}

#[test]
fn gateway_faults_are_counted_by_outcome() {
    let port = free_port();
    let gw = Proc::spawn(
        ontime()
            .args(["gateway", "--listen", &format!("127.0.0.1:{port}"), "--points", "100"])
            .args([
                "--error-probability",
                "0.1",
                "--drop-probability",
                "0.1",
                "--malformed-probability",
                "0.1",
            ]),
    );
    wait_listening(port);
    let out = ontime()
        .args([
            "crawl",
            "--url",
            &format!("http://127.0.0.1:{port}/b0"),
            "--points",
            "100",
            "--period",
            "100ms",
        ])
        .args(["-D", "3s", "--json", "--no-dma-latency"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &r["polls"];
    assert_eq!(u(&p["planned"]), 300);
    for k in ["http_error", "malformed"] {
        assert!(u(&p[k]) > 5, "{k} should be ~30: {p}");
    }
    // A dropped connection after a reused one is resent once (counted);
    // either way every drop shows.
    assert!(
        u(&p["connection_lost"]) + u(&p["resent"]) > 5,
        "drops should be ~30: {p}"
    );
    assert_eq!(u(&p["ok"]) + u(&r["missed"]), 300);
    // Without resending, each drop is a lost poll.
    let raw = ontime()
        .args([
            "crawl",
            "--url",
            &format!("http://127.0.0.1:{port}/b0"),
            "--points",
            "100",
        ])
        .args([
            "--period",
            "100ms",
            "-D",
            "3s",
            "--json",
            "--no-dma-latency",
            "--no-resend",
        ])
        .output()
        .unwrap();
    let r: Value = serde_json::from_slice(&raw.stdout).unwrap();
    assert!(u(&r["polls"]["connection_lost"]) > 5, "{}", r["polls"]);
    assert_eq!(u(&r["polls"]["resent"]), 0);
    drop(gw);
}

#[test]
fn work_per_poll_is_spent_on_the_vcpu_thread() {
    let port = free_port();
    let out = crawl_with_gateway(port)
        .args([
            "--rate",
            "100",
            "-D",
            "2s",
            "--work-per-poll",
            "2ms",
            "--json",
            "--no-dma-latency",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    // 200 answered polls x 2 ms = 0.4 s of the vCPU thread's CPU time.
    let cpu = u(&r["vcpu_cpu_ns"]);
    assert!(cpu >= 400_000_000, "vCPU thread used only {cpu} ns");
    assert_eq!(u(&r["work_per_poll_ns"]), 2_000_000);
}

/// `--phase clock` plans every poll of a period on a whole period of
/// CLOCK_MONOTONIC, and `--work-at request` burns each poll's work before
/// its request is written: the burst's last request leaves at least the
/// others' work after its plan (CPU time, so a busy machine only adds).
#[test]
fn clock_phase_and_work_on_the_request_make_a_burst_on_the_second() {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let polls = dir.path().join("polls.csv");
    let out = crawl_with_gateway(port)
        .args([
            "--rate",
            "10",
            "--period",
            "500ms",
            "-D",
            "2s",
            "--phase",
            "clock",
            "--work-at",
            "request",
            "--work-per-poll",
            "3ms",
            "--json",
            "--no-dma-latency",
            "--polls",
        ])
        .arg(&polls)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["work_at"], "request");
    assert_eq!(r["config"]["phase"], "clock");
    let csv = std::fs::read_to_string(&polls).unwrap();
    let rows: Vec<Vec<u64>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').take(4).map(|f| f.parse().unwrap()).collect())
        .collect();
    // 5 streams (10 polls/s at 500 ms), 4 periods.
    assert_eq!(rows.len(), 20, "{csv}");
    for row in &rows {
        assert_eq!(row[2] % 500_000_000, 0, "planned off the clock's half second: {row:?}");
    }
    let mut periods: Vec<u64> = rows.iter().map(|r| r[2]).collect();
    periods.dedup();
    assert_eq!(periods.len(), 4, "{periods:?}");
    for p in periods {
        let last_sent = rows
            .iter()
            .filter(|r| r[2] == p && r[3] > 0)
            .map(|r| r[3])
            .max()
            .unwrap();
        assert!(
            last_sent >= p + 4 * 3_000_000,
            "period {p}: last request at +{} ns",
            last_sent - p
        );
    }
}

/// A receive log that cannot be stored fails the crawl loudly, naming the
/// file; the crawl's own result is still written.
#[test]
fn a_full_disk_under_the_gateway_log_fails_the_crawl_and_names_the_file() {
    if !is_root() {
        ontime_testkit::skip("mounting a small tmpfs needs root");
        return;
    }
    let Some(fs) = ontime_testkit::SmallTmpfs::mount("16k") else {
        ontime_testkit::skip("cannot mount tmpfs here");
        return;
    };
    let log = fs.path().join("recv.log");
    let result = tempfile::tempdir().unwrap();
    let result = result.path().join("r.json");
    let port = free_port();
    let out = crawl_with_gateway(port)
        .args(["--rate", "200", "-D", "3s", "--no-dma-latency", "--gateway-log"])
        .arg(&log)
        .arg("--result")
        .arg(&result)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let last = err.lines().last().unwrap_or("");
    assert!(
        last.starts_with("ontime: error: ") && last.contains(&log.display().to_string()) && last.contains("space"),
        "{err}"
    );
    assert!(result.exists(), "the crawl's own result must still be written");
}

/// The receive log is flushed on a bounded interval, so a gateway killed by
/// SIGKILL at steady load keeps all but the last ~100 ms of its log.
#[test]
fn a_killed_gateway_keeps_its_receive_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("recv.log");
    let port = free_port();
    let gw = Proc::spawn(
        ontime()
            .args(["gateway", "--listen", &format!("127.0.0.1:{port}"), "--log"])
            .arg(&log),
    );
    wait_listening(port);
    let crawl = Proc::spawn(ontime().args([
        "crawl",
        "--url",
        &format!("http://127.0.0.1:{port}/b0"),
        "--rate",
        "500",
        "-D",
        "10s",
        "--no-dma-latency",
    ]));
    let leads = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.starts_with('#') && l.split_whitespace().nth(3) == Some("1"))
            .count()
    };
    // Killed once the log on disk holds 200 polls: what was flushed before
    // the SIGKILL is all still there after it.
    ontime_testkit::wait_until("200 polls in the log", Duration::from_secs(60), || leads() >= 200);
    let flushed = leads();
    gw.signal(libc::SIGKILL);
    drop(gw);
    drop(crawl);
    let kept = leads();
    assert!(
        kept >= flushed,
        "{kept} polls in the log after a SIGKILL, {flushed} before it"
    );
}

/// Against a real web server: two crawlers open about 400 keep-alive
/// connections each at once (aligned phases) and no poll is lost by the
/// crawler's framing or connection pool.
#[test]
fn crawlers_against_nginx_lose_no_poll() {
    let port = free_port();
    let body = r#"{"values":[{"id":0,"value":21.5,"status":"ok"}],"recv_ns":1}"#;
    let Some(_nginx) = ontime_testkit::Nginx::start(port, body) else {
        ontime_testkit::skip("nginx is not installed (scripts/setup.sh installs nginx-light)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let crawls: Vec<(Proc, PathBuf)> = (0..2)
        .map(|i| {
            let result = dir.path().join(format!("c{i}.json"));
            let p = Proc::spawn(
                ontime()
                    .args(["crawl", "--url", &format!("http://127.0.0.1:{port}/b{i}")])
                    .args([
                        "--rate",
                        "200",
                        "-N",
                        "1",
                        "--phase",
                        "aligned",
                        "-D",
                        "5s",
                        "--no-dma-latency",
                    ])
                    .arg("--result")
                    .arg(&result),
            );
            (p, result)
        })
        .collect();
    for (p, result) in crawls {
        let out = p.wait_output(Duration::from_secs(30));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let r = read_json(&result);
        let polls = &r["polls"];
        assert_eq!(u(&polls["planned"]), 1000, "{polls}");
        assert_eq!(u(&polls["connection_lost"]), 0, "{polls}");
        assert_eq!(u(&polls["malformed"]), 0, "{polls}");
        assert_eq!(u(&polls["http_error"]), 0, "{polls}");
        // Only a late answer (a noisy host) may miss; every other poll is ok.
        assert_eq!(u(&polls["ok"]) + u(&polls["timeout"]), 1000, "{polls}");
    }
}

/// `ontime sim tasks` schedules a periodic task set: global EDF on two
/// CPUs gives the schedule worked out by hand (T2's deadline 6 keeps it
/// ahead of the jobs released at 4 with deadline 8, so T1 waits), every
/// job goes to --jobs, and bad sets are refused in one line.
#[test]
fn sim_tasks_schedules_a_set_and_lists_every_job() {
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("set.toml");
    std::fs::write(
        &set,
        "[[task]]\nname = 'T0'\nwcet = '2ms'\nperiod = '4ms'\n[[task]]\nname = 'T1'\nwcet = '2ms'\nperiod = '4ms'\n[[task]]\nname = 'T2'\nwcet = '3ms'\nperiod = '6ms'\n",
    )
    .unwrap();
    let jobs = dir.path().join("jobs.csv");
    let out = ontime()
        .args([
            "sim",
            "tasks",
            "--model",
            "edf",
            "--cpus",
            "2",
            "--horizon",
            "12ms",
            "--json",
            "--jobs",
        ])
        .arg(&jobs)
        .arg(&set)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let csv = std::fs::read_to_string(&jobs).unwrap();
    let mut rows: Vec<&str> = csv.lines().skip(1).collect();
    rows.sort();
    assert_eq!(
        rows,
        [
            "T0,0,2000000",
            "T0,4000000,6000000",
            "T0,8000000,10000000",
            "T1,0,2000000",
            "T1,4000000,7000000",
            "T1,8000000,11000000",
            "T2,0,5000000",
            "T2,6000000,9000000"
        ]
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[2]["worst_response_ns"], 5_000_000, "{v}");
    std::fs::write(&set, "[[task]]\nname = 'a'\nwcet = '5ms'\nperiod = '4ms'\n").unwrap();
    let out = ontime().args(["sim", "tasks"]).arg(&set).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("task a: wcet"), "{err}");
}

/// The engine against an independent simulator: SimSo runs a fixed
/// sample of random periodic task sets (scripts/simso-check.py: global
/// rate monotonic and EDF on 1 and 2 CPUs) and every job completes at the
/// same time in both.
#[test]
fn the_engine_schedules_random_task_sets_as_simso_does() {
    let python = "/var/cache/ontime/simso/bin/python";
    if !Path::new(python).exists() {
        ontime_testkit::skip("SimSo is not installed (scripts/setup.sh installs it into /var/cache/ontime/simso)");
        return;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/simso-check.py");
    let out = Command::new(python)
        .args([
            script,
            "--sets",
            "30",
            "--seed",
            "7",
            "--ontime",
            env!("CARGO_BIN_EXE_ontime"),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let summary: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(summary["identical"], 120, "{summary}");
    assert!(
        summary["runs_with_misses"].as_u64().unwrap() > 0,
        "the sample has deadline misses to agree on: {summary}"
    );
    eprintln!("{}", text.trim_end());
}

/// A committed pack of lab runs (docs/results/sim/NAME) unpacked into a
/// temporary directory.
fn unpack_lab_runs(name: &str) -> tempfile::TempDir {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let dir = tempfile::tempdir().unwrap();
    let st = Command::new("tar")
        .arg("-xJf")
        .arg(format!("{root}/docs/results/sim/{name}"))
        .arg("-C")
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(st.success(), "unpacking {name}");
    dir
}

/// The calibration refuses to fit a host's noise from runs of crawlers
/// bursting on the second (a burst's send lag is the burst's own work),
/// saying what to run instead.
#[test]
fn bursting_crawlers_are_not_calibrated_from() {
    let dir = unpack_lab_runs("lab-runs-clock.tar.xz");
    let out = ontime()
        .args(["sim", "calibrate", "--output"])
        .arg(dir.path().join("cal.json"))
        .arg(dir.path().join("doc-000-clock"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("burst") && err.contains("doc-000-tenants"), "{err}");
    assert!(!dir.path().join("cal.json").exists());
}

/// Every table in docs/results.md and docs/explain.md under a
/// `<!-- table: COMMAND -->` mark,
/// up to its `<!-- end table -->`, is exactly what COMMAND prints now from
/// the committed runs (`DIR` is `pooled`, the runs `ontime sim validate
/// --into` kept), so no table in the docs is written by hand or outlives
/// the code that made it. `ONTIME_BLESS=1` writes the fresh tables into the
/// file instead of failing.
fn results_tables_are_what_the_binary_prints(root: &str, pooled: &Path) {
    tables_are_what_the_binary_prints(root, "docs/results.md", pooled);
    tables_are_what_the_binary_prints(root, "docs/explain.md", pooled);
    tables_are_what_the_binary_prints(root, "docs/protocols.md", pooled);
}

/// Each `<!-- table: COMMAND -->` ... `<!-- end table -->` block of the
/// file holds what COMMAND prints now (`ONTIME_BLESS=1` rewrites them).
fn tables_are_what_the_binary_prints(root: &str, file: &str, pooled: &Path) -> usize {
    let mut blocks = 0;
    let path = format!("{root}/{file}");
    let doc = std::fs::read_to_string(&path).unwrap();
    let mut fresh = String::new();
    let mut stale = Vec::new();
    let mut lines = doc.split_inclusive('\n');
    while let Some(line) = lines.next() {
        fresh.push_str(line);
        let Some(command) = line
            .trim_end()
            .strip_prefix("<!-- table: ")
            .and_then(|c| c.strip_suffix(" -->"))
        else {
            continue;
        };
        let mut old = String::new();
        let mut end = None;
        for l in lines.by_ref() {
            if l.trim_end() == "<!-- end table -->" {
                end = Some(l);
                break;
            }
            old.push_str(l);
        }
        let end = end.unwrap_or_else(|| panic!("{file}: `{command}` has no <!-- end table -->"));
        blocks += 1;
        // "ontime sim validate --into DIR; ontime lab report DIR/x --markdown":
        // the runs were kept by this test's own `sim validate --into`.
        let report = command.rsplit("; ").next().unwrap();
        let args: Vec<String> = report
            .split_whitespace()
            .skip(1)
            .map(|a| match a.strip_prefix("DIR/") {
                Some(rest) => pooled.join(rest).display().to_string(),
                None => a.to_string(),
            })
            .collect();
        let out = ontime().current_dir(root).args(&args).output().unwrap();
        assert!(
            out.status.success(),
            "`{command}`: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut new = String::from_utf8(out.stdout).unwrap();
        if !new.ends_with('\n') {
            new.push('\n');
        }
        if new != old {
            stale.push(command.to_string());
        }
        fresh.push_str(&new);
        fresh.push_str(end);
    }
    if std::env::var_os("ONTIME_BLESS").is_some() {
        std::fs::write(&path, fresh).unwrap();
    } else {
        assert!(
            stale.is_empty(),
            "{file}: these tables are not what the binary prints from the committed results \
             (ONTIME_BLESS=1 cargo test -p ontime --test cli the_committed rewrites them): {stale:#?}"
        );
    }
    blocks
}

/// bench/results.md's tables are what `ontime bench report` prints from
/// the raw results the bench scripts wrote (bench/results/*.json).
#[test]
fn the_committed_bench_results_give_the_published_tables() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let blocks = tables_are_what_the_binary_prints(root, "bench/results.md", Path::new(root));
    assert!(blocks > 0, "bench/results.md holds no generated table");
}

/// `ontime sim validate` on the committed lab runs gives exactly the
/// counts docs/results/sim/validation.json holds (and docs/sim.md
/// quotes), on every basis: each set alone, the three VMs pooled and the
/// lab against itself. After a change to the model: `ontime sim validate
/// --json > /tmp/v.json`, then the counts into validation.json and the
/// docs.
#[test]
fn the_committed_lab_runs_give_the_published_agreement() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let reports = tempfile::tempdir().unwrap();
    let pooled = reports.path().join("pooled");
    let out = ontime()
        .current_dir(root)
        .args(["sim", "validate", "--json", "--into"])
        .arg(&pooled)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    let published: Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{root}/docs/results/sim/validation.json")).unwrap())
            .unwrap();
    let counts = |v: &Value| -> Vec<(String, u64, u64)> {
        v["bases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                (
                    b["name"].as_str().unwrap().to_string(),
                    b["agree"].as_u64().unwrap(),
                    b["cells"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(
        counts(&got),
        counts(&published),
        "docs/results/sim/validation.json is stale"
    );
    let pooled_basis = got["bases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["kind"] == "pooled")
        .unwrap();
    assert_eq!(pooled_basis["cells"], 78, "four scenarios, every cell compared");
    results_tables_are_what_the_binary_prints(root, &pooled);
    for scenario in ["doc-000-tenants", "doc-000-policy", "doc-000-bursts", "plan-proof"] {
        let st = ontime()
            .args(["lab", "report"])
            .arg(pooled.join(scenario))
            .arg("--out")
            .arg(reports.path().join(scenario))
            .output()
            .unwrap();
        assert!(
            st.status.success(),
            "{scenario}: {}",
            String::from_utf8_lossy(&st.stderr)
        );
    }
    // The figures of docs/results/sim: the committed runs' histogram logs
    // are cut, yet each setting's figure has both sources, drawn from the
    // runs' own percentiles with the repetitions' range as bars, and no
    // figure is left blank.
    for (scenario, settings) in [
        ("doc-000-tenants", 4),
        ("doc-000-policy", 3),
        ("doc-000-bursts", 4),
        ("plan-proof", 1),
    ] {
        let html = std::fs::read_to_string(reports.path().join(scenario).join("report.html")).unwrap();
        let figures: Vec<&str> = html.split("<figure").skip(1).collect();
        let paired: Vec<&&str> = figures.iter().filter(|f| f.contains("Simulated vs measured")).collect();
        assert_eq!(paired.len(), settings, "{scenario}: one figure per setting");
        for f in paired {
            for series in ["lab p99", "lab p99.9", "sim:linux p99", "sim:linux p99.9"] {
                assert!(f.contains(&format!(">\n{series}\n<")), "{scenario}: {series} missing");
            }
        }
        assert!(
            html.contains("histogram logs that hold no samples"),
            "{scenario}: the cut logs are said"
        );
        assert!(
            figures
                .iter()
                .filter(|f| f.contains("(figure-"))
                .all(|f| f.contains("<polyline")),
            "{scenario}: a figure without a line"
        );
    }
}

/// The committed calibrations' CPU costs are what `ontime sim calibrate`
/// fits from the committed lab runs of their sessions (the packs keep
/// run.json, observe.json and the crawlers' results; the host noise needs
/// the histogram logs they cut, so it is not refitted here): a change to
/// the fit shows as a difference until the calibrations are refitted.
#[test]
fn the_committed_calibrations_hold_what_their_lab_runs_give() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    for (pack, calibration) in [
        ("lab-runs-vm1.tar.xz", "calibration-vm1.json"),
        ("lab-runs-vm2.tar.xz", "calibration-vm2.json"),
        ("lab-runs-vm3.tar.xz", "calibration-vm3.json"),
        ("lab-runs-clock-tenants.tar.xz", "calibration-clock.json"),
    ] {
        let dir = unpack_lab_runs(pack);
        let out_file = dir.path().join("refit.json");
        let out = ontime()
            .args(["sim", "calibrate", "--output"])
            .arg(&out_file)
            .arg(dir.path().join("doc-000-tenants"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{pack}: {}", String::from_utf8_lossy(&out.stderr));
        let refit: Value = serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
        let committed: Value =
            serde_json::from_str(&std::fs::read_to_string(format!("{root}/docs/results/sim/{calibration}")).unwrap())
                .unwrap();
        for field in [
            "cpu_per_poll_overhead_ns",
            "io_cost_per_packet_ns",
            "host_work_per_poll_ns",
            "host_work_samples",
        ] {
            assert!(refit[field].is_number(), "{pack}: {field} fitted: {refit}");
            assert_eq!(
                refit[field], committed[field],
                "{calibration}: {field} is not what {pack} gives"
            );
        }
    }
}

/// `ontime sim` runs a lab scenario in the simulator: document 000's
/// finding 3 (doc-000-bursts) shows there as in the lab, document 001's
/// probe runs are judged by wake-up latency, and bad input (a crawl
/// configuration instead of a scenario, an unknown model) is refused in
/// one line with exit 2.
#[test]
fn sim_runs_a_lab_scenario_and_refuses_what_it_cannot_model() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios");
    let out = ontime()
        .args(["sim", &format!("{dir}/doc-000-bursts.toml"), "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let runs: Value = serde_json::from_slice(&out.stdout).unwrap();
    let p999 = |i: usize| -> u64 {
        runs[i]["tenants"][0]["interval_error"]["percentiles_ns"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "p99.9")
            .and_then(|p| p["value_ns"].as_u64())
            .unwrap()
    };
    // 8 settings, three repetitions each (the lab's spread).
    assert_eq!(runs.as_array().unwrap().len(), 24);
    assert_eq!(runs[0]["simulated"]["model"], "linux");
    // The tenants' cpuset ("1") is pinned on the whole host, where the
    // relay and the host's other work run beside it, as in the lab.
    let online = std::thread::available_parallelism().map_or(1, |n| n.get());
    if online >= 2 {
        assert_eq!(runs[0]["simulated"]["cpus"].as_u64(), Some(online as u64));
    }
    assert!(p999(0) < 5_000_000, "fixed work alone: {}", p999(0));
    assert!(p999(2) > 50_000_000, "bursty work alone: {}", p999(2));
    // Wake-up probe tenants run too: document 001's twelve settings, three
    // runs each, judged by wake-up latency.
    let out = ontime()
        .args(["sim", &format!("{dir}/doc-001.toml"), "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let runs: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 36);
    let t = &runs[0]["tenants"][0];
    assert!(t["polls"].as_u64().unwrap() >= 19_900, "{t}");
    assert!(t["latency"]["count"].as_u64().unwrap() >= 19_900, "{t}");
    assert!(t.get("interval_error").is_none(), "{t}");
    for bad in [
        vec!["sim".to_string(), format!("{dir}/crawl-default.toml")],
        vec![
            "sim".to_string(),
            format!("{dir}/doc-000-bursts.toml"),
            "--model".into(),
            "bogus".into(),
        ],
    ] {
        let out = ontime().args(&bad).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

/// Document 000's knee (finding 4) in simulation, with the paper's host
/// (8 CPUs, Dom0 as 8 vCPUs at 50 us a packet, credit at 30 ms): crawlers
/// that burst on the second with the work before each request hold at 7
/// VMs and break at 8, where the VMs' vCPUs and Dom0 exceed the CPUs;
/// credit at 1 ms keeps 8 VMs under 10 ms (finding 5); spread polls with
/// the work on the answer show no knee at all.
#[test]
fn bursts_on_the_second_give_document_000s_knee_at_eight_vms() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let text = std::fs::read_to_string(format!("{root}/scenarios/sim-doc-000-8core.toml")).unwrap();
    let sweep = "\"tenant.count\" = [4, 6, 7, 8, 9, 12, 14, 16, 17, 19, 20, 24]";
    assert!(text.contains("duration = \"1200s\"") && text.contains(sweep), "{text}");
    let dir = tempfile::tempdir().unwrap();
    let worst = |scenario: &Path, extra: &[&str]| worst_p999_per_run(&sim_on_doc000_host(scenario, "credit", extra));
    const MS: u64 = 1_000_000;
    let bursts = short_doc000_8core(dir.path(), "[7, 8]", false);
    let at_30 = worst(&bursts, &[]);
    assert!(
        at_30[0] < 5 * MS && at_30[1] > 30 * MS,
        "7 and 8 VMs at 30 ms: {at_30:?}"
    );
    let at_1 = worst(&bursts, &["--tslice", "1ms"]);
    assert!(at_1[1] < 10 * MS, "8 VMs at 1 ms: {at_1:?}");
    let spread = worst(&short_doc000_8core(dir.path(), "[7, 8]", true), &[]);
    assert!(spread.iter().all(|&e| e < MS), "spread polls: {spread:?}");
}

/// `scenarios/sim-doc-000-8core.toml` cut to 20 s at 100 polls/s and these
/// VM counts; `spread`: the crawler's default phase and work place instead
/// of bursts on the second.
fn short_doc000_8core(dir: &Path, counts: &str, spread: bool) -> PathBuf {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let text = std::fs::read_to_string(format!("{root}/scenarios/sim-doc-000-8core.toml")).unwrap();
    let mut short = String::new();
    for line in text.lines() {
        let count = format!("\"tenant.count\" = {counts}");
        short.push_str(match line {
            l if l.starts_with("duration") => "duration = \"20s\"",
            l if l.starts_with("\"tenant.crawl.rate\"") => "",
            l if l.starts_with("\"tenant.count\"") => &count,
            l if spread && (l.starts_with("phase") || l.starts_with("work_at")) => "",
            l => l,
        });
        short.push('\n');
    }
    let p = dir.join(format!("doc000-8core-{counts}-{spread}.toml"));
    std::fs::write(&p, short).unwrap();
    p
}

/// `ontime sim --json` of a scenario on document 000's host as the
/// simulator models it: 8 CPUs, Dom0 as 8 vCPUs at 50 us a packet.
fn sim_on_doc000_host(scenario: &Path, model: &str, extra: &[&str]) -> std::process::Output {
    ontime()
        .arg("sim")
        .arg(scenario)
        .args([
            "--cpus",
            "8",
            "--io-cost",
            "50us",
            "--io-vcpus",
            "8",
            "--model",
            model,
            "--json",
        ])
        .args(extra)
        .output()
        .unwrap()
}

/// Per simulated run, its worst tenant's interval error p99.9.
fn worst_p999_per_run(out: &std::process::Output) -> Vec<u64> {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let runs: Value = serde_json::from_slice(&out.stdout).unwrap();
    runs.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r["tenants"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| pct(&t["interval_error"], "p99.9").unwrap())
                .max()
                .unwrap()
        })
        .collect()
}

/// Two bursting VMs per core under a fair model interleave the same way
/// every second without host noise, so their interval error is exactly 0;
/// `--host-noise` takes only a calibration's noise (no stalls, I/O cost,
/// gateway work) and the interleaving, hence the error, varies.
#[test]
fn host_noise_alone_varies_how_bursts_interleave() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let dir = tempfile::tempdir().unwrap();
    let scenario = short_doc000_8core(dir.path(), "[16]", false);
    let calibration = format!("{root}/docs/results/sim/calibration-clock.json");
    let sim = |extra: &[&str]| sim_on_doc000_host(&scenario, "cfs", extra);
    let quiet = worst_p999_per_run(&sim(&[]));
    assert_eq!(quiet[0], 0, "no noise: the same interleaving every second");
    let out = sim(&["--host-noise", &calibration]);
    let noisy = worst_p999_per_run(&out)[0];
    assert!(noisy > 1_000_000, "with host noise: {noisy} ns");
    let runs: Value = serde_json::from_slice(&out.stdout).unwrap();
    let simulated = &runs[0]["simulated"];
    assert_eq!(simulated["host_noise"], true, "{simulated}");
    assert!(simulated["host_stalls"].is_null(), "{simulated}");
    assert!(simulated["host_work_per_poll_ns"].is_null(), "{simulated}");
    let both = sim(&["--host-noise", &calibration, "--calibration", &calibration]);
    assert!(!both.status.success());
    // The listing says what the host's noise came from.
    let text = ontime()
        .arg("sim")
        .arg(&scenario)
        .args(["--cpus", "8", "--model", "cfs", "--host-noise", &calibration])
        .output()
        .unwrap();
    let first = String::from_utf8_lossy(&text.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    assert!(
        first.contains("host noise of") && first.contains("calibration-clock.json"),
        "{first}"
    );
}

/// The tenants' real-time budget (RT group throttling in the Linux
/// model) comes from `--tenant-rt-budget`, else from the measured run a
/// run is simulated beside (`--into`: its run.json's
/// `tenant_rt_runtime_us` times the tenants), else from the calibration;
/// 0 turns it off, and each simulated run says what it used.
#[test]
fn sim_takes_the_tenants_real_time_budget_from_flag_run_or_calibration() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let scenario = format!("{root}/scenarios/doc-000-bursts.toml");
    let dir = tempfile::tempdir().unwrap();
    // The checks need every setting, not its length: one 2 s repetition
    // each keeps the debug build's test short (the measured twins of the
    // simulated runs are the first repetitions).
    let text = std::fs::read_to_string(&scenario).unwrap();
    assert!(text.contains("duration = \"30s\"") && text.contains("repetitions = 3"));
    let short = dir.path().join("short.toml");
    std::fs::write(
        &short,
        text.replace("duration = \"30s\"", "duration = \"2s\"")
            .replace("repetitions = 3", "repetitions = 1"),
    )
    .unwrap();
    let short = short.to_str().unwrap().to_string();
    let budgets = |extra: &[&str]| -> Vec<Option<u64>> {
        let out = ontime().args(["sim", &short, "--json"]).args(extra).output().unwrap();
        assert!(
            out.status.success(),
            "{extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let runs: Value = serde_json::from_slice(&out.stdout).unwrap();
        runs.as_array()
            .unwrap()
            .iter()
            .map(|r| r["simulated"]["tenant_rt_budget_ns"].as_u64())
            .collect()
    };
    assert!(budgets(&[]).iter().all(Option::is_none));
    assert!(budgets(&["--tenant-rt-budget", "900ms"])
        .iter()
        .all(|&b| b == Some(900_000_000)));
    // A calibration that recorded one (the committed one predates it).
    let mut cal: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{root}/docs/results/sim/calibration-vm2.json")).unwrap(),
    )
    .unwrap();
    cal["tenant_rt_budget_ns"] = 600_000_000u64.into();
    let cal_path = dir.path().join("calibration.json");
    std::fs::write(&cal_path, cal.to_string()).unwrap();
    let cal_arg = cal_path.to_str().unwrap();
    assert!(budgets(&["--calibration", cal_arg])
        .iter()
        .all(|&b| b == Some(600_000_000)));
    assert!(budgets(&["--calibration", cal_arg, "--tenant-rt-budget", "0"])
        .iter()
        .all(Option::is_none));
    // Beside the second VM's measured runs, which recorded their budget.
    let st = Command::new("tar")
        .arg("-xJf")
        .arg(format!("{root}/docs/results/sim/lab-runs-vm2.tar.xz"))
        .arg("-C")
        .arg(dir.path())
        .arg("doc-000-bursts")
        .status()
        .unwrap();
    assert!(st.success());
    let results = dir.path().join("doc-000-bursts");
    let out = ontime()
        .args(["sim", &short, "--calibration", cal_arg, "--into"])
        .arg(&results)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut seen = 0;
    for run in std::fs::read_dir(results.join("runs")).unwrap() {
        let rec: Value =
            serde_json::from_str(&std::fs::read_to_string(run.unwrap().path().join("run.json")).unwrap()).unwrap();
        if rec["simulated"].is_object() {
            // Its measured twin recorded 900 ms between its tenants (one
            // alone: 900 ms; three shared: 300 ms each), which goes before
            // the calibration's 600 ms.
            let used = rec["simulated"]["tenant_rt_budget_ns"].as_u64();
            assert_eq!(used, Some(900_000_000), "{rec}");
            seen += 1;
        }
    }
    assert_eq!(seen, 8, "one simulated run per setting");
    // A calibration fitted from such runs records it.
    let fitted = dir.path().join("fitted.json");
    let out = ontime()
        .args(["sim", "calibrate", "--json", "-o"])
        .arg(&fitted)
        .arg(&results)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let fitted: Value = serde_json::from_str(&std::fs::read_to_string(&fitted).unwrap()).unwrap();
    assert_eq!(fitted["tenant_rt_budget_ns"], 900_000_000u64, "{fitted}");
}

/// `ontime plan` places small tenants by document 000's rules, verified
/// by the simulator, writes a placement `plan check` reads back, compares
/// with packing by mean CPU, and refuses bad input with exit 2.
#[test]
fn plan_places_and_checks_small_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.toml");
    std::fs::write(
        &input,
        "[[host]]\nname = 'h'\ncores = 4\n[[tenant]]\nname = 't'\ncount = 10\nrate = 500\ncpu_per_poll = '1.4ms'\ntarget = '5ms'\npercentile = 'p99.9'\n",
    )
    .unwrap();
    let placed = dir.path().join("placed.toml");
    let mean = dir.path().join("mean.toml");
    let out = ontime()
        .arg("plan")
        .arg(&input)
        .arg("-o")
        .arg(&placed)
        .arg("--mean-cpu-output")
        .arg(&mean)
        .arg("--json")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    // 3 vCPUs + the I/O path per 4-core host: 10 tenants need 4 hosts;
    // 1 s means (0.7 CPU each) would pack them onto 2.
    assert_eq!(r["hosts"].as_array().unwrap().len(), 4, "{}", r["placement"]);
    assert_eq!(r["mean_cpu_packing"]["hosts"], 2);
    assert_eq!(r["mean_cpu_packing"]["broken_by_rules"], 2);
    let out = ontime().args(["plan", "check"]).arg(&placed).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("every placed tenant keeps its target"), "{text}");
    let out = ontime().args(["plan", "check"]).arg(&mean).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("misses: t-") && text.contains("vCPUs over pCPUs"),
        "{text}"
    );
    std::fs::write(&input, "[[host]]\nname = 'h'\ncores = 0\n").unwrap();
    for args in [
        vec!["plan".into(), input.display().to_string()],
        vec!["plan".into(), "check".into(), input.display().to_string()],
    ] {
        let out = ontime().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

/// A new user's profile: record a busy process by pid, then the report's
/// JSON, its pprof and flame graphs.
#[test]
fn profile_records_a_process_and_reports_text_json_pprof_and_flame_graphs() {
    if !is_root() {
        ontime_testkit::skip("needs root (BPF recorder and perf sampling)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut busy = Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap();
    let rec = dir.path().join("p.otrec");
    let out = ontime()
        .args(["profile", "record", "--pid"])
        .arg(format!("busy={}", busy.id()))
        .args(["-d", "1s", "-F", "400", "-o"])
        .arg(&rec)
        .output()
        .unwrap();
    let _ = busy.kill();
    let _ = busy.wait();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("stack samples"));
    let (pb, fg, json) = (
        dir.path().join("p.pb.gz"),
        dir.path().join("fg"),
        dir.path().join("p.json"),
    );
    let out = ontime()
        .args(["profile", "report"])
        .arg(&rec)
        .arg("--pprof")
        .arg(&pb)
        .arg("--figures")
        .arg(&fg)
        .arg("--result")
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Time classes") && text.contains("busy"), "{text}");
    let v = read_json(&json);
    let t = &v["tenants"][0];
    assert_eq!(t["name"], "busy");
    let (apparent, run) = (u(&t["apparent_ns"]), u(&t["run_ns"]));
    assert!(run > 0 && run <= apparent, "{t}");
    assert_eq!(v["profile"]["sample_period_ns"], 2_500_000);
    assert!(u(&v["profile"]["samples"]) > 100, "{}", v["profile"]);
    assert!(pb.exists() && fg.join("on-cpu.svg").exists());
    // One command: record, then the report with its pprof and figures.
    let mut busy = Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap();
    let one = dir.path().join("one.otrec");
    let out = ontime()
        .args(["profile", "record", "--report", "-d", "1s", "--pid"])
        .arg(format!("busy={}", busy.id()))
        .arg("-o")
        .arg(&one)
        .output()
        .unwrap();
    let _ = busy.kill();
    let _ = busy.wait();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Time classes"));
    assert!(dir.path().join("one.pb.gz").exists() && dir.path().join("one-figures/on-cpu.svg").exists());
}

/// Continuous profiling: windows tile the time line (no gap, no overlap,
/// every event inside its window), a SIGKILL leaves every finished window
/// whole and the rest readable, and `profile report DIR` reads them all.
#[test]
fn continuous_profile_windows_tile_and_survive_a_kill() {
    if !is_root() {
        ontime_testkit::skip("needs root (BPF recorder and perf sampling)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("windows");
    let mut busy = Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap();
    let rec = Proc::spawn(
        ontime()
            .args([
                "profile",
                "record",
                "--continuous",
                "--window",
                "1s",
                "-F",
                "200",
                "--pid",
            ])
            .arg(format!("busy={}", busy.id()))
            .arg("-o")
            .arg(&out),
    );
    // Killed once a third window is open: two finished ones at least,
    // however long the recorder took to start.
    ontime_testkit::wait_until("a third window", Duration::from_secs(60), || {
        ontime_trace::store::window_files(&out).is_ok_and(|f| f.len() >= 3)
    });
    rec.signal(libc::SIGKILL);
    let _ = rec.wait_output(Duration::from_secs(10));
    let _ = busy.kill();
    let _ = busy.wait();
    let files = ontime_trace::store::window_files(&out).unwrap();
    assert!(files.len() >= 3, "{files:?}");
    let recs: Vec<ontime_trace::recording::Recording> = files
        .iter()
        .map(|f| ontime_trace::recording::Recording::read(f).unwrap())
        .collect();
    let whole = recs.iter().take_while(|r| r.end.is_some()).count();
    assert!(whole >= files.len() - 2, "finished windows: {whole} of {}", files.len());
    assert!(
        recs[whole..].iter().all(|r| r.end.is_none()),
        "only the last windows are open"
    );
    for (i, r) in recs.iter().enumerate() {
        let start = r.meta.start_ns;
        let end = r.end.as_ref().map(|e| e.end_ns).unwrap_or(u64::MAX);
        assert!(
            r.events.iter().all(|e| e.ts >= start && e.ts < end),
            "window {i}: an event outside [{start}, {end})"
        );
        assert!(
            r.samples.samples.iter().all(|s| s.ts >= start && s.ts < end),
            "window {i}: a sample outside"
        );
        if let (Some(e), Some(next)) = (&r.end, recs.get(i + 1)) {
            assert_eq!(e.end_ns, next.meta.start_ns, "window {i} and the next meet exactly");
            assert_eq!(e.end_ns - start, 1_000_000_000);
        }
    }
    let json = dir.path().join("w.json");
    let o = ontime()
        .args(["profile", "report"])
        .arg(&out)
        .arg("--result")
        .arg(&json)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = read_json(&json);
    assert_eq!(v["windows"].as_array().unwrap().len(), files.len());
    assert_eq!(v["seams_not_tiling"], 0);
    // A speed: reported, not judged here (bench/profile_analysis_speed.py).
    assert!(v["hosts_per_analyser"].is_u64(), "{v}");
}

/// The tables in docs/results.md come from committed packs: `lab report
/// PACK --markdown` prints one row per setting with its runs' median and
/// range, and a pack written by `--pack` from the unpacked runs gives the
/// same table. An HTML report of a pack, or a pack of the wrong name, is
/// bad input.
#[test]
fn committed_packs_give_their_tables_and_pack_again_the_same() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let pack = format!("{root}/docs/results/doc-001-vm/runs.tar.xz");
    let out = ontime().args(["lab", "report", &pack, "--markdown"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        table.starts_with("| setting | runs | worst wake-up latency p99 |"),
        "{table}"
    );
    for variant in [
        "native",
        "vm-idle",
        "vm-kernel",
        "vm-emulated",
        "vm-virtio",
        "vm-virtio-io-rt",
        "vm-virtio-rt",
    ] {
        assert!(
            table.contains(&format!("| variant={variant} | 3 |")),
            "{variant}: three runs\n{table}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let st = Command::new("tar")
        .arg("-xJf")
        .arg(&pack)
        .arg("-C")
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(st.success());
    let again = dir.path().join("again.tar.xz");
    let out = ontime()
        .args(["lab", "report"])
        .arg(dir.path().join("doc-001-vm"))
        .arg("--pack")
        .arg(&again)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = ontime()
        .args(["lab", "report"])
        .arg(&again)
        .arg("--markdown")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), table);
    for args in [vec![pack.as_str()], vec![pack.as_str(), "--pack", "/tmp/x.tar"]] {
        let out = ontime().args(["lab", "report"]).args(&args).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
