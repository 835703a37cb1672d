//! Regression tests of the defects hostile tests of the binary found:
//! memory without bound from accepted input, a closed stderr, an
//! overloaded crawler, nonsense plans, wrong exit codes, corrupt input
//! accepted, inputs that block, and outputs left half-written.
//! Each says which defect it guards. Bad input is exit 2 with one line that
//! names the flag, key or file and what is allowed.

mod common;
use common::{mkfifo, ontime, p, refused, run, write};
use ontime_testkit::{free_port, is_root, skip, KillOnDrop};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// A tenant of two crawler tenants at 20 polls/s, 1 s long, for sweeps.
const SMALL: &str = "name = 'small'\nduration = '1s'\n[tenant]\ncount = 2\n[tenant.crawl]\nrate = 20\n";

/// Defect 1: 4 keys x 100 values reached 24 GB in `lab run --dry-run` and
/// `sim` before anything ran.
#[test]
fn a_sweep_too_large_to_plan_is_refused_before_it_is_expanded() {
    let dir = tempfile::tempdir().unwrap();
    let values = (1..=100).map(|v| v.to_string()).collect::<Vec<_>>().join(", ");
    let text = format!(
        "{SMALL}[sweep]\n\"tenant.count\" = [{values}]\n\"tenant.crawl.rate\" = [{values}]\n\"tenant.vcpus\" = [{values}]\n\"duration\" = [{}]\n",
        (1..=100).map(|v| format!("'{v}s'")).collect::<Vec<_>>().join(", ")
    );
    let sc = write(dir.path(), "huge.toml", &text);
    refused(
        &run(&["lab", "run", "--dry-run", p(&sc)]),
        &["more than 10000 combinations"],
    );
    refused(&run(&["sim", p(&sc)]), &["more than 10000 combinations"]);
    // Combinations within the bound, repetitions beyond it.
    let reps = write(
        dir.path(),
        "reps.toml",
        &format!(
            "{}\n[sweep]\n\"tenant.crawl.rate\" = [{values}]\n",
            SMALL.replace("duration = '1s'", "duration = '1s'\nrepetitions = 200")
        ),
    );
    refused(
        &run(&["lab", "run", "--dry-run", p(&reps)]),
        &["20000 runs, more than 10000"],
    );
}

/// Defects 1 and 7: plan inputs a machine cannot hold or that mean nothing.
#[test]
fn nonsense_plans_are_refused_with_the_key_and_range() {
    let dir = tempfile::tempdir().unwrap();
    let plan = |host: &str, tenant: &str| {
        write(
            dir.path(),
            "in.toml",
            &format!("[[host]]\nname = 'h'\n{host}\n[[tenant]]\nname = 't'\ncpu_per_poll = '1ms'\n{tenant}\n"),
        )
    };
    let cases: [(&str, &str, &[&str]); 7] = [
        ("cores = 4", "rate = 1e12\ntarget = '10ms'", &["rate", "at most"]),
        (
            "cores = 4",
            "rate = 10\ncount = 1000000000000000\ntarget = '10ms'",
            &["count", "out of range"],
        ),
        (
            "cores = 100000000",
            "rate = 10\ntarget = '10ms'",
            &["cores", "1 .. 256"],
        ),
        (
            "cores = 4\nio_cpus = 1e300",
            "rate = 10\ntarget = '10ms'",
            &["io_cpus", "0 .. 4"],
        ),
        (
            "cores = 4\ncount = 0",
            "rate = 10\ntarget = '10ms'",
            &["count = 0", "out of range"],
        ),
        ("cores = 4", "rate = 10\ntarget = '0s'", &["target", "out of range"]),
        (
            "cores = 4",
            "rate = 10\nvcpus = 0\ntarget = '10ms'",
            &["vcpus", "out of range"],
        ),
    ];
    for (host, tenant, says) in cases {
        let f = plan(host, tenant);
        refused(&run(&["plan", p(&f)]), says);
        refused(&run(&["plan", "check", p(&f)]), says);
    }
}

/// Defects 8 and 1: `gateway --threads 1000000` aborted (rc 134);
/// `--buildings 100000000` grew 0.5 GB/s and ignored SIGINT.
#[test]
fn a_gateway_too_large_is_refused_before_it_is_built() {
    refused(&run(&["gateway", "--threads", "1000000"]), &["threads", "1 .. 1024"]);
    refused(
        &run(&["gateway", "--buildings", "100000000"]),
        &["buildings", "1 .. 10000"],
    );
    refused(
        &run(&["gateway", "--buildings", "100", "--points", "1000000"]),
        &["points", "out of range"],
    );
    refused(
        &run(&[
            "gateway",
            "--buildings",
            "100",
            "--port-per-building",
            "--listen",
            "127.0.0.1:65500",
        ]),
        &["past port 65535"],
    );
}

/// Defect 9: `sim --model rtds --budget 20ms --period 10ms` was accepted,
/// `--budget 0s` gave rc 0 and every value n/a, `--cpus 100000` ran for
/// minutes.
#[test]
fn simulator_settings_outside_the_models_ranges_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sc = write(dir.path(), "s.toml", SMALL);
    let sim = |more: &[&str]| {
        let mut a = vec!["sim", p(&sc)];
        a.extend_from_slice(more);
        run(&a)
    };
    refused(
        &sim(&["--model", "rtds", "--budget", "20ms", "--period", "10ms"]),
        &["--budget", "out of range"],
    );
    refused(
        &sim(&["--model", "rtds", "--budget", "0s"]),
        &["--budget", "out of range"],
    );
    refused(&sim(&["--cpus", "100000"]), &["--cpus", "1 .. 256"]);
    refused(
        &sim(&["--model", "credit", "--tslice", "0s"]),
        &["--tslice", "out of range"],
    );
    refused(
        &sim(&["--model", "cfs", "--tslice", "5ms"]),
        &["--tslice does not apply"],
    );
    let ok = sim(&["--model", "rtds", "--budget", "4ms", "--period", "10ms"]);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
}

/// Defect 2: with stderr closed (`2>&1 | head -1`), SIGINT did nothing
/// (the signal thread's message panicked) and `lab run` exited 101.
#[test]
fn a_closed_stderr_neither_stops_the_stop_nor_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let result = dir.path().join("r.json");
    let port = free_port();
    let mut child = ontime()
        .args([
            "crawl",
            "--with-gateway",
            "--url",
            &format!("http://127.0.0.1:{port}/b0"),
        ])
        .args(["--rate", "50", "-D", "60s", "--no-dma-latency", "--result"])
        .arg(&result)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read the first line, then close both pipes as `head -1` does.
    let mut first = [0u8; 1];
    let mut err = child.stderr.take().unwrap();
    err.read_exact(&mut first).unwrap();
    drop(err);
    drop(child.stdout.take());
    let child = KillOnDrop(child);
    child.signal(libc::SIGINT);
    let out = child.wait_output(Duration::from_secs(60));
    assert!(out.status.success(), "stopped crawl: {:?}", out.status);
    assert!(
        result.exists(),
        "the result is written although nothing could be printed"
    );

    // lab run prints its plan on stderr first.
    let sc = write(dir.path(), "s.toml", SMALL);
    let mut lab = ontime()
        .args(["lab", "run", "--dry-run"])
        .arg(&sc)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(lab.stderr.take());
    drop(lab.stdout.take());
    let status = lab.wait().unwrap();
    assert!(status.success(), "lab run with closed pipes: {status:?}");
}

/// Defect 6: `crawl --rate 1e6 -D 3s` ran ~105 s with 763 MB and reported
/// 2743.9 % of one core on 2 CPUs. The run ends at its duration with every
/// planned poll accounted (sent or missed), and the CPU shares are taken
/// over the time it really took.
#[test]
fn an_overloaded_crawl_ends_at_its_duration_and_accounts_every_poll() {
    let dir = tempfile::tempdir().unwrap();
    let result = dir.path().join("r.json");
    let port = free_port();
    let out = KillOnDrop::spawn(
        ontime()
            .args([
                "crawl",
                "--with-gateway",
                "--url",
                &format!("http://127.0.0.1:{port}/b0"),
            ])
            .args(["--rate", "1e6", "-D", "2s", "--no-dma-latency", "--result"])
            .arg(&result),
    )
    .wait_output(Duration::from_secs(300));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&result).unwrap()).unwrap();
    let n = |k: &str| {
        r.pointer(k)
            .and_then(serde_json::Value::as_u64)
            .unwrap_or_else(|| panic!("{k} in {r}"))
    };
    assert_eq!(n("/duration_ns"), 2_000_000_000);
    assert_eq!(n("/polls/planned"), 2_000_000, "every poll of the plan is accounted");
    assert_eq!(n("/polls/ok") + n("/missed"), n("/polls/planned"));
    assert!(n("/polls/not_sent") > 0, "an overloaded thread misses polls: {r}");
    let wall = n("/wall_ns") as f64;
    let cpus = ontime_core::limits::online_cpus() as f64;
    assert!(
        n("/process_cpu_ns") as f64 <= wall * cpus * 1.05,
        "CPU beyond the machine: {r}"
    );
}

/// Defect 10: bad input exited 1, named no file, or said "unexpected
/// argument".
#[test]
fn bad_input_is_exit_2_and_names_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let text = write(dir.path(), "t.txt", "hello\n");
    let binary = dir.path().join("bin");
    std::fs::write(&binary, [0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0xff, 0xfe, 0, 0]).unwrap();
    let d = p(dir.path());
    refused(&run(&["gateway", "analyze", d, "--period", "1s"]), &["is a directory"]);
    refused(
        &run(&["gateway", "analyze", p(&text), "--period", "1s"]),
        &["t.txt:1", "not a receive-log line"],
    );
    refused(
        &run(&["gateway", "analyze", p(&text), "--period", "1s", "--timeout", "0s"]),
        &["--timeout", "out of range"],
    );
    refused(&run(&["lab", "run", d]), &["is a directory"]);
    refused(&run(&["lab", "run", p(&binary)]), &["bin is not a scenario", "UTF-8"]);
    refused(&run(&["lab", "report", d]), &["no runs/ directory"]);
    std::fs::create_dir_all(dir.path().join("runs/000-rep1")).unwrap();
    refused(&run(&["lab", "report", d]), &["holds no finished run"]);
    std::fs::copy(&binary, dir.path().join("runs/000-rep1/run.json")).unwrap();
    refused(&run(&["lab", "report", d]), &["run.json is not a lab run record"]);
    let missing = dir.path().join("no-such-dir");
    refused(
        &run(&["io", "workload", "--tool", "dd", "--rw", "read", "--dir", p(&missing)]),
        &["--dir", "no such directory"],
    );
    refused(
        &run(&["crawl", "--url", "http://127.0.0.1:1/b0", "--rate", "-5"]),
        &["--rate", "positive"],
    );
    refused(&run(&["gateway", "--delay", "-1s"]), &["cannot be negative"]);
}

/// Defect 11: a crafted receive log gave "missed 18446744073709551614"
/// (the forged recording is the trace crate's unit test).
#[test]
fn a_crafted_receive_log_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = write(
        dir.path(),
        "recv.log",
        "1000000000 b0 0 1 0 - -\n2000000000 b0 0 1 18446744073709551615 - -\n",
    );
    refused(
        &run(&["gateway", "analyze", p(&log), "--period", "1s"]),
        &["poll numbers jump"],
    );
}

/// Defect 12: `--pprof` and `--figures` left 0-byte files after ENOSPC.
#[test]
fn a_full_disk_leaves_no_half_written_profile_or_figure() {
    if !is_root() {
        skip("recording a profile and mounting a small tmpfs need root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("p.otrec");
    let busy = KillOnDrop::spawn(Command::new("sh").args(["-c", "while :; do :; done"]));
    let out = run(&[
        "profile",
        "record",
        "--pid",
        &format!("busy={}", busy.id()),
        "-D",
        "2s",
        "-F",
        "200",
        "-o",
        p(&rec),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    drop(busy);
    let Some(full) = ontime_testkit::SmallTmpfs::mount("4k") else {
        skip("cannot mount tmpfs here");
        return;
    };
    // Fill it, so even a small file cannot be written whole.
    let _ = std::fs::write(full.path().join("filler"), vec![0u8; 64 << 10]);
    let pprof = full.path().join("p.pb.gz");
    let figures = full.path().join("figs");
    let out = run(&["profile", "report", p(&rec), "--pprof", p(&pprof)]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!pprof.exists(), "a 0-byte pprof was left");
    let out = run(&["profile", "report", p(&rec), "--figures", p(&figures)]);
    assert_ne!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    for f in std::fs::read_dir(&figures).into_iter().flatten().flatten() {
        let len = f.metadata().unwrap().len();
        assert!(len > 0, "{} left empty", f.path().display());
    }
}

/// `gateway --delay 1000000h` was accepted, and with `--spike 5000000h`
/// the delay of an answer overflowed a u64: each injected delay is at most
/// an hour, named by flag or key.
#[test]
fn injected_delays_beyond_an_hour_are_refused() {
    refused(
        &run(&["gateway", "--delay", "1000000h"]),
        &["--delay", "out of range", "3600.000 s"],
    );
    refused(
        &run(&["gateway", "--delay", "1h", "--spike", "5000000h"]),
        &["--spike", "out of range"],
    );
    refused(
        &run(&["gateway", "--spike-probability", "2"]),
        &["--spike-probability", "0 .. 1"],
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "gw.toml",
        "[faults]\ndelay_random = \"1000000h\"\n[[building]]\nname = \"b0\"\npoints = 10\n",
    );
    refused(
        &run(&["gateway", "--config", p(&cfg)]),
        &["gw.toml", "faults.delay_random", "out of range"],
    );
    refused(
        &run(&[
            "crawl",
            "--with-gateway",
            "--url",
            "http://127.0.0.1:1/b0",
            "--gateway-delay",
            "1000000h",
        ]),
        &["--gateway-delay", "out of range"],
    );
}

/// Gateway building names with spaces or newlines broke the receive
/// log's format: a name is an identifier, refused otherwise.
#[test]
fn building_names_that_would_break_the_receive_log_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (i, name) in ["\"two words\"", "\"b0\\n1 b1 0 1\"", "\"a\\tb\""].iter().enumerate() {
        let cfg = write(
            dir.path(),
            &format!("gw{i}.toml"),
            &format!("[[building]]\nname = {name}\npoints = 10\n"),
        );
        refused(
            &run(&["gateway", "--config", p(&cfg)]),
            &["building name", "is not a name"],
        );
    }
    refused(
        &run(&["crawl", "--with-gateway", "--url", "http://127.0.0.1:1/a%20b"]),
        &["--with-gateway", "building name \"a%20b\""],
    );
}

/// A crawl URL holding `\r\nX-Injected: 1` was sent: a listener received
/// `POST /b0\r\nX-Injected: 1...`. Refused before anything is sent.
#[test]
fn urls_with_control_characters_or_spaces_are_refused() {
    // A listener that would see the request if one were sent.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    for url in [
        format!("http://127.0.0.1:{port}/b0\r\nX-Injected: 1"),
        format!("http://127.0.0.1:{port}/b0 HTTP/1.0"),
    ] {
        refused(
            &run(&["crawl", "--url", &url, "-D", "1s", "--no-dma-latency"]),
            &["url", "no space, control or non-ASCII character"],
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "c.toml",
        &format!("[[gateway]]\nurl = \"http://127.0.0.1:{port}/b0\\r\\nX-Injected: 1\"\npoints = 10\n"),
    );
    refused(
        &run(&["crawl", "--config", p(&cfg), "-D", "1s", "--no-dma-latency"]),
        &["c.toml", "gateway #1", "control"],
    );
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_err(), "a connection reached the listener");
}

/// `io advise` hung on a FIFO run.json and read /dev/zero through a
/// symlinked run.json until memory ran out: both are refused at once.
#[test]
fn io_advise_refuses_a_fifo_or_a_device_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("runs/000-rep1");
    std::fs::create_dir_all(&run_dir).unwrap();
    let record = run_dir.join("run.json");
    let c = std::ffi::CString::new(record.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let check = |out: &Output| {
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("not a regular file"), "{err}");
    };
    check(&run(&["io", "advise", p(dir.path())]));
    std::fs::remove_file(&record).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &record).unwrap();
    check(&run(&["io", "advise", p(dir.path())]));
}

/// One getValues read of points 1 and 2 of /b0 on `port`, once a gateway
/// listens there.
fn read_two_points(port: u16) {
    use std::io::Write;
    let mut stream = None;
    ontime_testkit::wait_until("the gateway listening", Duration::from_secs(120), || {
        stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok();
        stream.is_some()
    });
    let mut s = stream.unwrap();
    let body = r#"{"points":[1,2]}"#;
    write!(
        s,
        "POST /b0/getValues HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// A gateway receive log cut by kill -9 was analysed as if whole. Now it
/// is analysed and said to be partial; a log closed by SIGTERM is whole.
#[test]
fn a_receive_log_cut_by_a_kill_is_analysed_as_partial() {
    let dir = tempfile::tempdir().unwrap();
    for (signal, partial) in [(libc::SIGKILL, true), (libc::SIGTERM, false)] {
        let log = dir.path().join(format!("recv{signal}.log"));
        let port = free_port();
        let gw = KillOnDrop::spawn(
            ontime()
                .args(["gateway", "--listen", &format!("127.0.0.1:{port}"), "--log"])
                .arg(&log),
        );
        read_two_points(port);
        read_two_points(port);
        // Flushed within 100 ms: wait until the four points are on disk.
        ontime_testkit::wait_until("the reads in the log", Duration::from_secs(60), || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .filter(|l| !l.starts_with('#'))
                .count()
                >= 4
        });
        gw.signal(signal);
        let _ = gw.wait_output(Duration::from_secs(60));
        let out = run(&["gateway", "analyze", p(&log), "--period", "1s"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            text.contains("partial: the log ends without its end mark (cut by a kill or a full disk)"),
            partial,
            "signal {signal}: {text}"
        );
    }
}

/// On a full disk `crawl --polls`, `--hlog` and `--store` did not name the
/// file ("database or disk is full", "cannot flush histogram log") and
/// left no result. Each is named; a file cut during the run is listed in
/// the result as incomplete, and the crawl exits 1.
#[test]
fn a_full_disk_under_the_crawls_files_names_each_file() {
    if !is_root() {
        skip("mounting a small tmpfs needs root");
        return;
    }
    let Some(full) = ontime_testkit::SmallTmpfs::mount("64k") else {
        skip("cannot mount tmpfs here");
        return;
    };
    // Fill it, so not one more byte can be written.
    let _ = std::fs::write(full.path().join("filler"), vec![0u8; 1 << 20]);
    let dir = tempfile::tempdir().unwrap();
    let crawl = |flag: &str, file: &Path, result: &Path| {
        let port = free_port();
        run(&[
            "crawl",
            "--with-gateway",
            "--url",
            &format!("http://127.0.0.1:{port}/b0"),
            "--rate",
            "100",
            "-D",
            "2s",
            "--no-dma-latency",
            flag,
            p(file),
            "--result",
            p(result),
        ])
    };
    for (flag, name) in [("--polls", "p.csv"), ("--hlog", "c.hlog")] {
        let file = full.path().join(name);
        let result = dir.path().join(format!("{name}.json"));
        let out = crawl(flag, &file, &result);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        let last = err.lines().last().unwrap_or("");
        let shown = file.display().to_string();
        assert!(
            last.contains(flag) && last.contains(&shown) && last.contains("space"),
            "{err}"
        );
        let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&result).unwrap()).unwrap();
        let cut = r["incomplete_files"][0].as_str().unwrap_or_default();
        assert!(cut.starts_with(flag) && cut.contains(&shown), "{r}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(&format!("incomplete: {flag}")),
            "the summary says so"
        );
    }
    // The store is made before the run starts: refused at once, by name.
    let store = full.path().join("s.db");
    let out = crawl("--store", &store, &dir.path().join("s.json"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--store: cannot") && err.contains(&store.display().to_string()),
        "{err}"
    );
}

/// `lab run` accepted `relay_threads = 1000000` (4.3 GB, then "cannot
/// start thread", exit 1), `rate = 1e-300`, `work_per_poll = "100h"`,
/// and names that wrote results outside the results directory
/// (`../../escaped-by-name`) or into it (`""`). Each is refused at
/// planning, in --dry-run too, before anything is made.
#[test]
fn lab_run_refuses_scenario_values_no_run_can_take() {
    let dir = tempfile::tempdir().unwrap();
    let name = |n: &str| SMALL.replace("name = 'small'", &format!("name = {n}"));
    let cases: [(String, &[&str]); 6] = [
        (
            format!("{SMALL}[host]\nrelay_threads = 1000000\n"),
            &["host.relay_threads = 1000000", "1 .. 64"],
        ),
        (
            SMALL.replace("rate = 20", "rate = 1e-300"),
            &["tenant.crawl.rate", "out of range", "one poll per"],
        ),
        (
            SMALL.replace("rate = 20", "rate = 20\nwork_per_poll = '100h'"),
            &["tenant.crawl.work_per_poll", "out of range"],
        ),
        (
            name("'../../escaped-by-name'"),
            &["name = \"../../escaped-by-name\"", "results directory"],
        ),
        (name("''"), &["name = \"\"", "results directory"]),
        (name("'.hidden'"), &["name = \".hidden\"", "results directory"]),
    ];
    for (text, says) in cases {
        let sc = write(dir.path(), "s.toml", &text);
        refused(&run(&["lab", "run", "--dry-run", p(&sc)]), says);
    }
    // Without --dry-run, from a working directory two levels down: refused
    // before the results directory (results/NAME) is made.
    let deep = dir.path().join("a/b");
    std::fs::create_dir_all(&deep).unwrap();
    let sc = write(dir.path(), "esc.toml", &name("'../../escaped-by-name'"));
    let out = KillOnDrop::spawn(ontime().current_dir(&deep).args(["lab", "run", p(&sc)]))
        .wait_output(Duration::from_secs(120));
    refused(&out, &["results directory"]);
    assert!(!dir.path().join("a/escaped-by-name").exists());
    assert!(!deep.join("results").exists());
}

/// The report crate's committed lab results (two crawler runs), copied.
fn lab_results(dir: &Path) -> PathBuf {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../report/tests/fixtures/golden-lab");
    let to = dir.join("results");
    for run in ["000-count=1-rep1", "001-count=2-rep1"] {
        std::fs::create_dir_all(to.join("runs").join(run)).unwrap();
        for f in std::fs::read_dir(from.join("runs").join(run)).unwrap() {
            let f = f.unwrap();
            std::fs::copy(f.path(), to.join("runs").join(run).join(f.file_name())).unwrap();
        }
    }
    to
}

/// `lab report` hung on a FIFO run.json or t0.json and read /dev/zero
/// through a symlinked run.json until OOM; a 9 MB run.json listing
/// 200 000 tenants took 4.3 GB; a corrupt t0.hlog was exit 1. Each is now
/// bad input naming the file, at once.
#[test]
fn lab_report_reads_results_files_under_the_input_rule() {
    let dir = tempfile::tempdir().unwrap();
    let results = lab_results(dir.path());
    let run0 = results.join("runs/000-count=1-rep1");
    let report = || run(&["lab", "report", p(&results), "--markdown"]);
    let ok = report();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));

    // A record claiming more tenants than a run may have.
    let record = std::fs::read_to_string(run0.join("run.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&record).unwrap();
    v["tenants"] = (0..=10_000u64)
        .map(|i| serde_json::json!({"index": i, "result": null, "exit": 0}))
        .collect();
    std::fs::write(run0.join("run.json"), v.to_string()).unwrap();
    refused(&report(), &["000-count=1-rep1/run.json", "10001 tenants", "10000"]);
    std::fs::write(run0.join("run.json"), &record).unwrap();

    // Files that are not regular files: refused without blocking.
    mkfifo(&run0.join("t0.hlog"));
    refused(&report(), &["t0.hlog is not a regular file"]);
    std::fs::remove_file(run0.join("t0.hlog")).unwrap();
    mkfifo(&run0.join("t0.json"));
    refused(&report(), &["t0.json is not a regular file"]);
    std::fs::remove_file(run0.join("t0.json")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", run0.join("run.json").with_extension("tmp")).unwrap();
    std::fs::rename(run0.join("run.json").with_extension("tmp"), run0.join("run.json")).unwrap();
    refused(&report(), &["run.json is not a regular file"]);

    // A corrupt histogram log names itself and its line.
    let results = lab_results(&dir.path().join("again"));
    let run0 = results.join("runs/000-count=1-rep1");
    std::fs::write(run0.join("t0.hlog"), "garbage\n").unwrap();
    refused(
        &run(&["lab", "report", p(&results), "--markdown"]),
        &["t0.hlog is not a valid histogram log", "line 1"],
    );

    // An output directory that is a file: bad input naming the flag.
    let file = write(dir.path(), "not-a-dir", "x");
    refused(
        &run(&["lab", "report", p(&results), "-o", p(&file)]),
        &["--out", "is a file"],
    );
}

/// `observe report --plots /etc/passwd` and `cyclic --load-workers
/// 100000` were exit 1 after work had started.
#[test]
fn output_directories_and_load_workers_are_checked_first() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "figures", "x");
    let rec = dir.path().join("none.otrec");
    refused(
        &run(&["observe", "report", p(&rec), "--plots", p(&file)]),
        &["--plots", "is a file"],
    );
    refused(
        &run(&["cyclic", "-D", "1s", "--load-workers", "100000"]),
        &["--load-workers = 100000", "1 .. 1024"],
    );
}
