//! The fleet end to end on a real nats-server (JetStream, a temporary
//! store): three agents as separate processes (one recording a real
//! process, two replaying recorded windows at real time), two analyse
//! workers. One worker is killed with SIGKILL mid-stream, the server is
//! stopped for 10 s and started again, a garbage message is published:
//! every window an agent had is analysed exactly once, nothing is lost,
//! the garbage lands in the dead letters. Root (BPF) and nats-server
//! needed; skipped elsewhere with the reason. Every process and store is
//! removed at the end, also when the test fails.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ontime_testkit::KillOnDrop;

fn ontime() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ontime"))
}

/// A process whose output goes to `log` (no pipe to fill), killed on drop.
fn spawn_logged(cmd: &mut Command, log: &Path) -> KillOnDrop {
    let out = std::fs::File::create(log).unwrap();
    let err = out.try_clone().unwrap();
    KillOnDrop(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}")),
    )
}

struct Server {
    port: u16,
    store: PathBuf,
    log: PathBuf,
    proc: Option<KillOnDrop>,
}

impl Server {
    fn start(dir: &Path, port: u16, conf: Option<&Path>) -> Server {
        let mut s = Server {
            port,
            store: dir.join("store"),
            log: dir.join("nats.log"),
            proc: None,
        };
        s.run(conf);
        s
    }

    fn run(&mut self, conf: Option<&Path>) {
        let mut cmd = Command::new("nats-server");
        cmd.args(["-js", "-a", "127.0.0.1", "-p", &self.port.to_string(), "-sd"])
            .arg(&self.store);
        if let Some(c) = conf {
            cmd.arg("-c").arg(c);
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        // Ready means this server said so in its own log (a restart
        // appends): a port that accepts connections may be another
        // test's server, if this one could not bind it.
        let ready_before = self.readies();
        let mut proc = KillOnDrop(
            cmd.stdin(Stdio::null())
                .stdout(Stdio::from(log.try_clone().unwrap()))
                .stderr(Stdio::from(log))
                .spawn()
                .expect("nats-server"),
        );
        let mut exited = None;
        ontime_testkit::wait_until("nats-server ready", Duration::from_secs(20), || {
            exited = proc.0.try_wait().ok().flatten();
            exited.is_some() || self.readies() > ready_before
        });
        if let Some(status) = exited {
            panic!(
                "nats-server on port {} exited at start ({status}):\n{}",
                self.port,
                self.log_text()
            );
        }
        self.proc = Some(proc);
    }

    /// How many times a server of this directory said it was ready.
    fn readies(&self) -> usize {
        self.log_text().matches("Server is ready").count()
    }

    /// Its log so far, for a failing assertion to show.
    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn stop(&mut self) {
        if let Some(p) = self.proc.take() {
            p.signal(libc::SIGTERM);
            p.wait_output(Duration::from_secs(20));
        }
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// A server on a free port with `conf` as its configuration, in a
    /// directory of its own (removed when the TempDir is dropped).
    fn with_conf(conf: &str) -> (tempfile::TempDir, Server) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("nats.conf");
        std::fs::write(&file, conf).unwrap();
        let server = Server::start(dir.path(), ontime_testkit::free_port(), Some(&file));
        (dir, server)
    }
}

/// `ontime analyse` with no window to wait for: it makes the fleet's
/// streams and stops. `extra`: connection options.
fn analyse_nothing(url: &str, extra: &[&str]) -> std::process::Output {
    ontime()
        .args(["analyse", "--max-windows", "0", "--nats", url])
        .args(extra)
        .output()
        .unwrap()
}

/// Publishes `payload` on `subject` with the plain NATS protocol (as any
/// client could, bypassing ontime's own).
fn raw_publish(port: u16, subject: &str, payload: &[u8]) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut info = [0u8; 4096];
    let _ = s.read(&mut info).unwrap();
    write!(
        s,
        "CONNECT {{\"verbose\":false}}\r\nPUB {subject} {}\r\n",
        payload.len()
    )
    .unwrap();
    s.write_all(payload).unwrap();
    s.write_all(b"\r\nPING\r\n").unwrap();
    let mut pong = [0u8; 64];
    let n = s.read(&mut pong).unwrap();
    assert!(String::from_utf8_lossy(&pong[..n]).contains("PONG"), "no PONG");
}

fn http_get(port: u16, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

fn fleet_json(url: &str) -> serde_json::Value {
    let out = ontime()
        .args(["fleet", "report", "--json", "--nats", url])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn agent_config(dir: &Path, host: &str, url: &str, what: &str) -> PathBuf {
    let p = dir.join(format!("{host}.toml"));
    std::fs::write(
        &p,
        format!(
            "host = '{host}'\nwindow = '1s'\n{what}\n[spool]\ndir = '{}'\nmax_bytes = '256M'\n[nats]\nservers = ['{url}']\n",
            dir.join(format!("spool-{host}")).display()
        ),
    )
    .unwrap();
    p
}

/// A directory of one replayable window: a second of one tenant's
/// recording, made in memory (no root, no BPF).
fn replay_windows(dir: &Path) -> PathBuf {
    use ontime_trace::recording::{Group, GroupKind, Meta, Recording};
    let windows = dir.join("windows");
    std::fs::create_dir_all(&windows).unwrap();
    let tenant = Group {
        name: "t0".into(),
        kind: GroupKind::Tenant,
        source: vec![],
        vcpu_names: false,
    };
    let meta = Meta::of_this_host("bpf", 1_000_000_000, vec![tenant]);
    Recording::of_events(meta, Default::default(), vec![], 2_000_000_000)
        .write(&ontime_trace::store::window_file(&windows, 1))
        .unwrap();
    windows
}

fn worker(dir: &Path, url: &str, name: &str) -> KillOnDrop {
    spawn_logged(
        ontime()
            .args([
                "analyse",
                "--ack-wait",
                "3s",
                "--name",
                name,
                "--nats",
                url,
                "--scratch",
            ])
            .arg(dir.join("scratch"))
            .arg("--result")
            .arg(dir.join(format!("{name}.json"))),
        &dir.join(format!("{name}.log")),
    )
}

/// `ontime agent -c CONFIG --result LOG.json`, its output to `log`.
fn agent_logged(config: &Path, log: &Path) -> KillOnDrop {
    spawn_logged(
        ontime()
            .args(["agent", "-c"])
            .arg(config)
            .arg("--result")
            .arg(log.with_extension("json")),
        log,
    )
}

/// Stops a process started with `--result LOG.json` and reads its summary.
fn summary_of(p: KillOnDrop, log: &Path) -> serde_json::Value {
    p.signal(libc::SIGINT);
    let out = p.wait_output(Duration::from_secs(60));
    let text = std::fs::read_to_string(log).unwrap_or_default();
    assert!(out.status.success(), "{}: {text}", log.display());
    let json = std::fs::read_to_string(log.with_extension("json")).unwrap_or_default();
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn three_agents_two_workers_every_window_once_through_a_kill_and_an_outage() {
    if !ontime_testkit::root_or_skip("the recording agent (BPF)") || !ontime_testkit::tools_or_skip(&["nats-server"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut server = Server::start(d, ontime_testkit::free_port(), None);
    let url = server.url();

    // A process to record, and windows for the replaying agents.
    let busy: Child = Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap();
    let busy = KillOnDrop(busy);
    let rec = d.join("recorded");
    let out = ontime()
        .args([
            "profile",
            "record",
            "--continuous",
            "--window",
            "1s",
            "-D",
            "3s",
            "--rate",
            "99",
        ])
        .arg("--pid")
        .arg(format!("busy={}", busy.id()))
        .arg("-o")
        .arg(&rec)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let metrics_port = ontime_testkit::free_port();
    let configs = [
        agent_config(
            d,
            "h1",
            &url,
            &format!("[record]\npids = ['busy={}']\nprofile_hz = 99", busy.id()),
        ),
        agent_config(
            d,
            "h2",
            &url,
            &format!(
                "prometheus = '127.0.0.1:{metrics_port}'\n[replay]\ndir = '{}'",
                rec.display()
            ),
        ),
        agent_config(d, "h3", &url, &format!("[replay]\ndir = '{}'", rec.display())),
    ];
    let mut agents: Vec<(KillOnDrop, PathBuf)> = configs
        .iter()
        .zip(["h1", "h2", "h3"])
        .map(|(c, h)| {
            let log = d.join(format!("agent-{h}.log"));
            let mut cmd = ontime();
            cmd.args(["agent", "-c"])
                .arg(c)
                .arg("--result")
                .arg(log.with_extension("json"));
            (spawn_logged(&mut cmd, &log), log)
        })
        .collect();
    let w1 = worker(d, &url, "w1");
    let w2 = worker(d, &url, "w2");
    ontime_testkit::wait_until("results from all three hosts", Duration::from_secs(90), || {
        fleet_json(&url)["hosts"].as_array().is_some_and(|h| h.len() == 3)
    });
    // The agent's own exposition: the recorded tenant's latest window.
    let metrics = http_get(metrics_port, "/metrics");
    assert!(
        metrics.contains("ontime_tenant_steal_ratio{host=\"h2\",tenant=\"busy\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ontime_agent_windows_published_total{host=\"h2\"}"),
        "{metrics}"
    );
    // A worker dies mid-stream; its window in hand is redelivered.
    w1.signal(libc::SIGKILL);
    drop(w1);
    raw_publish(server.port, "ontime.windows.h9", b"this is not a window notice");
    // The server goes away for 10 s; the agents spool.
    server.stop();
    std::thread::sleep(Duration::from_secs(10));
    server.run(None);
    let w3 = worker(d, &url, "w3");
    // Some windows after the outage, then the agents stop.
    std::thread::sleep(Duration::from_secs(5));
    let mut expected = 0u64;
    let mut per_host = Vec::new();
    for (a, log) in agents.drain(..) {
        let s = summary_of(a, &log);
        assert_eq!(s["dropped"], 0, "{s}");
        let published = s["published"].as_u64().unwrap() - s["duplicates"].as_u64().unwrap();
        assert_eq!(
            published + s["left_in_spool"].as_u64().unwrap(),
            s["windows"].as_u64().unwrap(),
            "every window published or still spooled: {s}"
        );
        expected += published;
        per_host.push(published);
    }
    ontime_testkit::wait_until("every published window analysed", Duration::from_secs(120), || {
        fleet_json(&url)["results"].as_u64() == Some(expected)
    });
    let v = fleet_json(&url);
    eprintln!(
        "fleet: {expected} window(s) analysed once each: {per_host:?} per host, {} dead letter(s)",
        v["dead_letters"]
    );
    assert_eq!(v["duplicate_results"], 0, "{v:#}");
    assert!(v["dead_letters"].as_u64().unwrap() >= 1, "{v:#}");
    for (h, n) in v["hosts"].as_array().unwrap().iter().zip(&per_host) {
        assert_eq!(h["windows"].as_u64(), Some(*n), "{h:#}");
        assert!(!h["tenants"].as_array().unwrap().is_empty(), "{h:#}");
    }
    // The recording host's windows had stacks: its pprof is there.
    assert!(v["hosts"][0]["latest_pprof"].is_string(), "{v:#}");
    let s2 = summary_of(w2, &d.join("w2.log"));
    let s3 = summary_of(w3, &d.join("w3.log"));
    assert!(s2["dead"].as_u64().unwrap() + s3["dead"].as_u64().unwrap() >= 1);
    // The HTML report shows every host.
    let html = d.join("fleet.html");
    let out = ontime()
        .args(["fleet", "report", "--nats", &url, "-o"])
        .arg(&html)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&html).unwrap();
    for h in ["h1", "h2", "h3"] {
        assert!(text.contains(&format!(">{h}")), "{h} missing from the report");
    }
    plan_from_the_fleet(d, &url, &v);
    server.stop();
}

/// `ontime plan --from-fleet`: a tenant's CPU and busiest 100 ms come
/// from the fleet's results; a name several hosts have is refused; the
/// written placement carries the figures, so `plan check` needs no fleet.
fn plan_from_the_fleet(d: &Path, url: &str, v: &serde_json::Value) {
    let row = &v["hosts"][0]["tenants"][0];
    let (mean, peak) = (
        row["mean_cpus"].as_f64().unwrap(),
        row["peak_100ms_cpus_max"].as_f64().unwrap(),
    );
    assert!(mean > 0.0 && peak >= mean, "{row:#}");
    let input = d.join("plan.toml");
    let text = "[[host]]\nname = 'h'\ncores = 4\nio_cpus = 1\n[[tenant]]\nname = 'busy'\nvcpus = 2\nrate = 50\nfleet = 'h1/busy'\ntarget = '100ms'\npercentile = 'p99'\n";
    std::fs::write(&input, text).unwrap();
    let placed = d.join("placed.toml");
    let out = ontime()
        .args(["plan", "--from-fleet", "--nats", url, "--json", "-o"])
        .arg(&placed)
        .arg(&input)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let note = r["inputs"][0].as_str().unwrap_or_default();
    assert!(note.contains("h1/busy"), "{r:#}");
    eprintln!("plan from the fleet: {note}");
    let host = &r["hosts"][0];
    assert!(host.is_object(), "the tenant is placed: {r:#}");
    assert!(
        (host["peak_100ms_cpu"].as_f64().unwrap() - peak.min(2.0)).abs() < 1e-9,
        "the measured peak {peak} is the plan's: {host:#}"
    );
    assert!(
        (host["mean_cpu"].as_f64().unwrap() - mean).abs() < 0.01 * mean.max(0.01),
        "the measured mean {mean} is the plan's: {host:#}"
    );
    let check = ontime().args(["plan", "check"]).arg(&placed).output().unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    std::fs::write(&input, text.replace("'h1/busy'", "'busy'")).unwrap();
    let out = ontime()
        .args(["plan", "--from-fleet", "--nats", url])
        .arg(&input)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("name one as HOST/TENANT"),
        "{err}"
    );
}

/// A server that requires a user and password refuses a wrong one with
/// a clear error, and the agent publishes nothing unauthenticated.
#[test]
fn a_wrong_credential_is_refused_with_a_clear_error() {
    if !ontime_testkit::tools_or_skip(&["nats-server"]) {
        return;
    }
    let (dir, mut server) = Server::with_conf("authorization { user: ontime, password: right }\n");
    let url = server.url();
    let pw = dir.path().join("pw");
    std::fs::write(&pw, "wrong\n").unwrap();
    let out = ontime()
        .args(["fleet", "report", "--nats", &url, "--user", "ontime", "--password-file"])
        .arg(&pw)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("refused the credentials"), "{err}");
    // Without any credential: refused too.
    let out = ontime().args(["fleet", "report", "--nats", &url]).output().unwrap();
    assert!(!out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The agent, which connects in the background to spool while the
    // server is away, names the refusal and stops (it said "jetstream
    // request timed out" and spooled for ever).
    let windows = replay_windows(dir.path());
    let config = agent_config(
        dir.path(),
        "h1",
        &url,
        &format!("[replay]\ndir = '{}'", windows.display()),
    );
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("{text}user = 'ontime'\npassword_file = '{}'\n", pw.display()),
    )
    .unwrap();
    let out = KillOnDrop::spawn(ontime().args(["agent", "-c"]).arg(&config)).wait_output(Duration::from_secs(120));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("the server refused the credentials"), "{err}");
    // The right one works.
    std::fs::write(&pw, "right\n").unwrap();
    let pw = pw.to_string_lossy();
    let out = analyse_nothing(&url, &["--user", "ontime", "--password-file", &pw]);
    assert!(
        out.status.success(),
        "{}\nnats-server's log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.log_text()
    );
    server.stop();
}

/// A server with little storage (JetStream reserves each stream's size
/// bound; by default 75 % of the disk free at its start) still takes the
/// fleet's streams, with smaller bounds the operator is told about.
#[test]
fn a_server_with_little_storage_gets_smaller_streams_and_says_so() {
    if !ontime_testkit::tools_or_skip(&["nats-server"]) {
        return;
    }
    let (_dir, mut server) = Server::with_conf("jetstream { max_file_store: 1GB }\n");
    let url = server.url();
    let out = analyse_nothing(&url, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("ONTIME_RESULTS 512 MiB, ONTIME_DEAD 64 MiB"), "{err}");
    // Made once: the next start finds them as they are.
    let out = analyse_nothing(&url, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("usual bounds"), "{err}");
    server.stop();
}

/// Window files in an agent's spool, over its runs.
fn spooled(spool: &Path) -> usize {
    std::fs::read_dir(spool)
        .map(|runs| {
            runs.filter_map(|r| r.ok())
                .filter_map(|r| ontime_trace::store::window_files(&r.path()).ok())
                .map(|w| w.len())
                .sum()
        })
        .unwrap_or(0)
}

/// With the server unreachable, a stop ends the agent and nothing is
/// recorded after it: it waited out two 10 s publishes and recorded all the
/// while. How long the stop takes is a timing, not a test (this machine may
/// be busy); the agent's grace is 5 s by construction (`Watch::bounded`).
#[test]
fn an_agent_stops_recording_at_a_stop_while_the_server_is_away() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let windows = replay_windows(d);
    // Nothing listens there: every connection attempt is refused.
    let url = format!("nats://127.0.0.1:{}", ontime_testkit::free_port());
    let config = agent_config(d, "h1", &url, &format!("[replay]\ndir = '{}'", windows.display()));
    let log = d.join("agent-h1.log");
    let agent = agent_logged(&config, &log);
    let spool = d.join("spool-h1");
    ontime_testkit::wait_until("two windows spooled", Duration::from_secs(120), || spooled(&spool) >= 2);
    let at_stop = spooled(&spool) as u64;
    let s = summary_of(agent, &log);
    // At most the window being copied when the signal came.
    let windows = s["windows"].as_u64().unwrap();
    assert!(windows <= at_stop + 1, "{windows} windows, {at_stop} at the stop: {s}");
    assert_eq!(s["published"], 0, "{s}");
    assert_eq!(s["left_in_spool"].as_u64(), Some(windows), "{s}");
}

#[test]
fn bad_agent_configs_are_refused_with_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let base = "host = 'a'\n[replay]\ndir = '/'\n[spool]\ndir = '/tmp/x'\n";
    let record = "host = 'a'\n[record]\nprofile_hz = 0\n[spool]\ndir = '/tmp/x'\n";
    let probe = "[[probe]]\nname = 'plc'\n";
    let cases: [(String, &[&str]); 15] = [
        (
            "host = 'a.b'\n[replay]\ndir = '/'\n[spool]\ndir = '/tmp/x'\n".into(),
            &["subject token"],
        ),
        ("host = 'a'\n[spool]\ndir = '/tmp/x'\n".into(), &["nothing to publish"]),
        (
            "host = 'a'\nwindow = '10ms'\n[replay]\ndir = '/'\n[spool]\ndir = '/tmp/x'\n".into(),
            &["use 1s to 1h"],
        ),
        (format!("{base}max_bytes = 'lots'\n"), &["spool.max_bytes"]),
        (format!("{base}max_bytes = '0'\n"), &["spool.max_bytes", "above 0"]),
        // TOML errors: one line naming the file, the line and the key
        // (they were five lines, the key nowhere).
        (
            "host = 'a'\nwindw = '1s'\n".into(),
            &["c5.toml:2:", "unknown field `windw`"],
        ),
        (
            format!("{base}max_bytes = 300\n"),
            &["c6.toml:6:", "spool.max_bytes", "invalid type"],
        ),
        // What could never connect is refused at start, not retried for ever.
        (
            format!("{base}[nats]\nservers = []\n"),
            &["nats.servers", "no server given"],
        ),
        (
            format!("{base}[nats]\ntls_ca = '/no/such/ca.pem'\n"),
            &["nats.tls_ca", "/no/such/ca.pem"],
        ),
        (
            format!("{base}[nats]\nuser = 'u'\npassword_file = '/dev/zero'\n"),
            &["nats.password_file", "not a regular file"],
        ),
        // The flight recorder's probes.
        (format!("{base}{probe}"), &["[[probe]] needs [record]"]),
        (format!("{record}[flight]\n"), &["add a [[probe]]"]),
        (
            format!("{record}{probe}late_over = 'soon'\n"),
            &["probe \"plc\"", "late_over"],
        ),
        (format!("{record}{probe}cpus = [999]\n"), &["CPU 999 is not online"]),
        (format!("{record}{probe}{probe}"), &["two probes named \"plc\""]),
    ];
    for (i, (text, says)) in cases.iter().enumerate() {
        let p = dir.path().join(format!("c{i}.toml"));
        std::fs::write(&p, text).unwrap();
        let out = KillOnDrop::spawn(ontime().args(["agent", "-c"]).arg(&p)).wait_output(Duration::from_secs(120));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "case {i}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "case {i}: one line: {err}");
        for s in *says {
            assert!(err.contains(s), "case {i}: expected {s:?} in: {err}");
        }
    }
}

/// Connection flags are checked before any connection: a URL that is not
/// NATS's, a missing or garbage credentials, nkey or password file, and
/// /dev/zero as a password file (read until memory ran out) are bad input,
/// exit 2 with one line naming the flag (they were exit 1).
#[test]
fn bad_connection_flags_are_bad_input_before_connecting() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage");
    std::fs::write(&garbage, "not a key\n").unwrap();
    let missing = dir.path().join("missing");
    let (g, m) = (garbage.to_str().unwrap(), missing.to_str().unwrap());
    let cases: [(&[&str], &str); 9] = [
        (
            &["--nats", "http://127.0.0.1:4222"],
            "--nats \"http://127.0.0.1:4222\": not a NATS URL",
        ),
        (&["--nats", "nats://127.0.0.1:99999"], "not a NATS URL"),
        (&["--creds", m], "--creds: "),
        (&["--creds", g], "not a NATS credentials file"),
        (&["--nkey", m], "--nkey: "),
        (&["--nkey", g], "not an nkey seed"),
        (&["--user", "u", "--password-file", m], "--password-file: "),
        (&["--user", "u", "--password-file", "/dev/zero"], "not a regular file"),
        (&["--tls-ca", m], "--tls-ca: "),
    ];
    for (args, says) in cases {
        let out =
            KillOnDrop::spawn(ontime().args(["fleet", "report"]).args(args)).wait_output(Duration::from_secs(120));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.contains(says), "{args:?}: expected {says:?} in: {err}");
    }
    // The worker too, before it waits for any window.
    let out = KillOnDrop::spawn(
        ontime()
            .args([
                "analyse",
                "--max-windows",
                "0",
                "--nats",
                "http://127.0.0.1:4222",
                "--scratch",
            ])
            .arg(dir.path().join("scratch")),
    )
    .wait_output(Duration::from_secs(120));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("not a NATS URL"), "{err}");
}

/// An agent's probe on CPU 1 below a SCHED_FIFO hog (busy 80 ms every 3
/// s): its late wake-ups travel with the windows, a worker explains them
/// on each window's own recording, and the fleet report names the hog,
/// waited behind on CPU 1. With `[flight]`, every window is published or
/// counted quiet. Who and which cause, never timings.
#[test]
fn an_agents_probe_has_its_late_wakeups_explained_by_the_fleet() {
    if !ontime_testkit::root_or_skip("the recording agent (BPF) and a SCHED_FIFO probe")
        || !ontime_testkit::tools_or_skip(&["nats-server", "python3"])
    {
        return;
    }
    if ontime_core::limits::online_cpus() < 2 {
        ontime_testkit::skip("needs two CPUs (the probe and its hog on CPU 1)");
        return;
    }
    let Some(hog) = ontime_testkit::FifoHog::start_resting(2.92) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server = Server::start(d, ontime_testkit::free_port(), None);
    let url = server.url();
    let config = agent_config(
        d,
        "rt1",
        &url,
        "[record]\nprofile_hz = 0\n[[probe]]\nname = 'plc'\ncpus = [1]\npolicy = 'fifo:40'\nlate_over = '5ms'\n[flight]\nkeep_around = '200ms'",
    );
    let w = worker(d, &url, "w1");
    let log = d.join("agent.log");
    let agent = agent_logged(&config, &log);
    std::thread::sleep(Duration::from_secs(10));
    let s = summary_of(agent, &log);
    drop(hog);
    let probes = &s["probes"];
    assert_eq!(probes["starts"], 1, "{s}");
    assert!(
        probes["windows_late"].as_u64() > Some(0),
        "no window held a late wake-up: {s}"
    );
    // Which windows are quiet depends on this machine's own noise (a busy
    // VM has late wake-ups of its own): the accounts must add up, each
    // late window published (the choice itself: the unit tests).
    // Spooled (published, or left for the next start: the last window,
    // finished at the stop) or deleted as quiet, every one.
    let published = s["published"].as_u64().unwrap();
    assert_eq!(
        s["windows"].as_u64().unwrap() + probes["windows_quiet"].as_u64().unwrap(),
        probes["windows_seen"].as_u64().unwrap(),
        "{s}"
    );
    assert!(s["windows"].as_u64() >= probes["windows_late"].as_u64(), "{s}");
    let mut v = serde_json::Value::Null;
    ontime_testkit::wait_until("every published window analysed", Duration::from_secs(60), || {
        v = fleet_json(&url);
        v["results"].as_u64() == Some(published)
    });
    summary_of(w, &d.join("w1.log"));
    let host = &v["hosts"][0];
    // The host's tenants are the probe's own, not one per process: the
    // agent records every thread only to name culprits.
    let tenants: Vec<&str> = host["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tenant"].as_str().unwrap())
        .collect();
    assert_eq!(tenants, ["probe-plc"], "{v}");
    let probe = &host["probes"][0];
    assert_eq!(probe["probe"], "plc", "{v}");
    let pooled = &probe["pooled"];
    assert!(pooled["explained"].as_u64() > Some(0), "{v}");
    let top = &pooled["causes"][0];
    assert_eq!(top["cause"], "waited_for_cpu", "{v}");
    assert_eq!(top["culprit"]["comm"], "python3", "{v}");
    let worst = &probe["worst"][0];
    assert!(
        worst["causes"].as_str().is_some_and(|c| c.contains("behind python3")),
        "{v}"
    );
    let text = ontime().args(["fleet", "report", "--nats", &url]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("probe plc:") && text.contains("behind python3"), "{text}");
}
