//! The field-bus protocols against implementations ontime did not write:
//! the crawler reads a pymodbus server's registers, and mbpoll (libmodbus)
//! reads ontime's Modbus gateway, and `ontime wire record` judges pollers
//! ontime did not write (a pymodbus client, curl polling nginx, mbpoll in
//! a shell loop) from their packets. The peers come from scripts/setup.sh
//! (pymodbus in /var/cache/ontime/fieldbus, mbpoll from Debian); without
//! them the tests skip with the reason. Assertions are on values, counts
//! and outcomes, never on timings.

use ontime_testkit::KillOnDrop;
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const PEERS: &str = "/var/cache/ontime/fieldbus/bin/python";

fn ontime() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ontime"))
}

/// A pymodbus server on a free port of the loopback (unit 1, holding
/// register i = i, input register i = 2150 + i, 1000 of each), or None
/// (skipped) without pymodbus.
fn pymodbus_server() -> Option<(KillOnDrop, u16)> {
    let port = ontime_testkit::free_port();
    let server = peer("pymodbus", &["modbus-server", "--port", &port.to_string()], || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    })?;
    Some((server, port))
}

/// scripts/fieldbus-peer.py with `args`, once `ready`; None (the test
/// skipped) where setup.sh has not installed the peers.
fn peer(what: &str, args: &[&str], ready: impl FnMut() -> bool) -> Option<KillOnDrop> {
    if !Path::new(PEERS).exists() {
        ontime_testkit::skip(&format!(
            "{what} is not installed (scripts/setup.sh installs it into /var/cache/ontime/fieldbus)"
        ));
        return None;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/fieldbus-peer.py");
    let p = KillOnDrop::spawn(Command::new(PEERS).arg(script).args(args));
    ontime_testkit::wait_until(&format!("the {what} peer"), Duration::from_secs(30), ready);
    Some(p)
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// The crawler reads holding and input registers in runs of at most 125,
/// stores the values the server holds, counts a read past the server's
/// registers as the exception it answered, and judges interval error from
/// its own send times (the protocol carries no receive time).
#[test]
fn crawl_reads_a_pymodbus_servers_registers() {
    let Some((_server, port)) = pymodbus_server() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("crawl.toml");
    std::fs::write(
        &config,
        format!(
            "period = \"50ms\"\ntimeout = \"2s\"\npoints_per_request = 125\n\
             [[gateway]]\nurl = \"modbus://127.0.0.1:{port}/1\"\npoints = 250\n\
             [[gateway]]\nurl = \"modbus://127.0.0.1:{port}/1/input\"\npoint_ids = [10, 11, 12, 40]\n\
             [[gateway]]\nurl = \"modbus://127.0.0.1:{port}/1\"\npoint_ids = [999, 1000]\n"
        ),
    )
    .unwrap();
    let store = dir.path().join("store.db");
    let out = ontime()
        .args(["crawl", "-D", "2s", "--json", "-c"])
        .arg(&config)
        .arg("--store")
        .arg(&store)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let polls = &r["polls"];
    // Five reads a period: 0-124, 125-249, 10-12, 40, and 999-1000.
    assert_eq!(u(&r["streams"]), 5, "{r:#}");
    assert!(u(&polls["ok"]) >= 20, "{polls}");
    let exceptions = u(&polls["modbus_exceptions"]["illegal-data-address"]);
    assert!(
        exceptions >= 5,
        "the read past register 999 is refused each period: {polls}"
    );
    assert_eq!(u(&polls["device_error"]), exceptions, "{polls}");
    assert_eq!(u(&polls["malformed"]), 0, "{polls}");
    assert_eq!(u(&r["receive_stamps"]["crawler_send"]), u(&polls["ok"]), "{r:#}");
    assert!(u(&r["interval_error"]["count"]) > 0, "{r:#}");

    // Every value stored is the one the server holds at its address.
    let db = rusqlite::Connection::open(&store).unwrap();
    let urls: Vec<(i64, String)> = db
        .prepare("SELECT id, url FROM gateways")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut checked = 0;
    let mut stmt = db.prepare("SELECT series, value FROM samples").unwrap();
    let rows = stmt
        .query_map([], |row| Ok((row.get::<_, i64>(0)?, row.get::<_, f64>(1)?)))
        .unwrap();
    for row in rows {
        let (series, value) = row.unwrap();
        let (gw, address) = (series >> 32, (series & 0xffff_ffff) as f64);
        let url = &urls.iter().find(|(id, _)| *id == gw).unwrap().1;
        let expected = if url.ends_with("/input") {
            2150.0 + address
        } else {
            address
        };
        assert_eq!(value, expected, "{url} register {address}");
        checked += 1;
    }
    assert!(checked >= 20 * 125, "{checked} values stored");
}

/// A server that stops (SIGSTOP) answers slowly when it resumes within the
/// timeout, and not at all past it: those polls are missed, each counted.
#[test]
fn a_paused_modbus_server_is_slow_then_its_polls_are_missed() {
    let Some((server, port)) = pymodbus_server() else {
        return;
    };
    paused_twice_is_slow_then_missed(&server, &format!("modbus://127.0.0.1:{port}/1"));
}

/// Crawls `url` (10 points every 50 ms, 500 ms timeout, 5 s) while
/// `device` is stopped for 250 ms (within the timeout: slow answers) and
/// then for 1.5 s (past it: 1 s of polls missed).
fn paused_twice_is_slow_then_missed(device: &KillOnDrop, url: &str) {
    let crawl = KillOnDrop::spawn(ontime().args([
        "crawl",
        "--url",
        url,
        "--points",
        "10",
        "--period",
        "50ms",
        "--timeout",
        "500ms",
        "-D",
        "5s",
        "--json",
    ]));
    std::thread::sleep(Duration::from_millis(1500));
    device.signal(libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(250));
    device.signal(libc::SIGCONT);
    std::thread::sleep(Duration::from_millis(750));
    device.signal(libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(1500));
    device.signal(libc::SIGCONT);
    let out = crawl.wait_output(Duration::from_secs(60));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let polls = &r["polls"];
    // 1.5 s stopped against a 500 ms timeout: the polls of its first second.
    assert!(u(&polls["timeout"]) >= 5, "{polls}");
    assert_eq!(u(&polls["planned"]), u(&polls["ok"]) + u(&r["missed"]), "{polls}");
    assert!(u(&polls["ok"]) >= 20, "it answered before and after: {polls}");
    // The 250 ms stop: the poll sent at its start waited for the resume.
    assert!(u(&r["response_time"]["max_ns"]) >= 100_000_000, "{r:#}");
}

/// mbpoll (libmodbus) reads ontime's Modbus gateway: each unit's registers
/// are its points' values in hundredths, as the gateway computed them at
/// the receive time it logged; a read past them and an unknown unit get
/// the exceptions the specification names.
#[test]
fn mbpoll_reads_ontimes_modbus_gateway() {
    if !ontime_testkit::tools_or_skip(&["mbpoll"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("gw.log");
    let port = ontime_testkit::free_port();
    let gateway = KillOnDrop::spawn(
        ontime()
            .args([
                "gateway",
                "--protocol",
                "modbus",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--buildings",
                "2",
                "--points",
                "100",
                "--log",
            ])
            .arg(&log),
    );
    ontime_testkit::wait_until("the gateway", Duration::from_secs(10), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let mbpoll = |unit: &str, start: &str, count: &str| {
        let out = Command::new("mbpoll")
            .args(["-m", "tcp", "-a", unit, "-0", "-r", start, "-c", count, "-t", "4", "-1"])
            .args(["-p", &port.to_string(), "127.0.0.1"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    let (ok, text) = mbpoll("2", "0", "100");
    assert!(ok, "{text}");
    let read: Vec<(u32, u16)> = text
        .lines()
        .filter_map(|l| {
            let (i, v) = l.trim().strip_prefix('[')?.split_once("]:")?;
            Some((i.parse().ok()?, v.trim().parse().ok()?))
        })
        .collect();
    assert_eq!(read.len(), 100, "{text}");
    let (ok, text) = mbpoll("2", "95", "10");
    assert!(!ok && text.contains("Illegal data address"), "{text}");
    let (ok, text) = mbpoll("9", "0", "10");
    assert!(!ok && text.contains("Gateway path unavailable"), "{text}");
    gateway.signal(libc::SIGINT);
    let out = gateway.wait_output(Duration::from_secs(10));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // Unit 2 is building b1; its one read logged every register, and each
    // value is the gateway's at the logged receive time.
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(' ').collect())
        .collect();
    assert_eq!(lines.len(), 100, "only the good read is a measurement:\n{text}");
    for (l, (i, v)) in lines.iter().zip(&read) {
        assert_eq!((l[1], l[2].parse::<u32>().unwrap()), ("b1", *i), "{l:?}");
        let recv_ns: u64 = l[0].parse().unwrap();
        let value = ontime_gateway::points::value(*i, 70, recv_ns);
        assert_eq!(*v, ontime_gateway::modbus::register_of(value), "register {i}");
    }
}

/// A bacpypes3 BACnet/IP device on a free UDP port of the loopback with
/// `objects` analog inputs (present value 20 + i / 4), or None (skipped)
/// without bacpypes3.
fn bacpypes3_device(objects: u32, extra: &[&str]) -> Option<(KillOnDrop, u16)> {
    let port = free_udp_port();
    let (port_s, objects_s) = (port.to_string(), objects.to_string());
    let mut args = vec![
        "bacnet-device",
        "--port",
        &port_s,
        "--instance",
        "1001",
        "--objects",
        &objects_s,
    ];
    args.extend_from_slice(extra);
    // Bound by the device once this bind is refused.
    let device = peer("bacpypes3", &args, || {
        std::net::UdpSocket::bind(("127.0.0.1", port)).is_err()
    })?;
    Some((device, port))
}

fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The crawler asks the device's largest APDU (Who-Is), reads as many
/// present values as fit it unsegmented in each request, stores the
/// values the device holds, and counts an unknown object's error in its
/// place as a point fault; a device that answers nothing is refused before
/// the run, saying so.
#[test]
fn crawl_reads_a_bacpypes3_devices_present_values_in_chunks_of_its_apdu() {
    let Some((_device, port)) = bacpypes3_device(60, &["--max-apdu", "480", "--no-segmentation"]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("crawl.toml");
    std::fs::write(
        &config,
        format!(
            "period = \"100ms\"\ntimeout = \"2s\"\npoints_per_request = 100\n\
             [[gateway]]\nurl = \"bacnet://127.0.0.1:{port}/1001\"\npoints = 60\n\
             [[gateway]]\nurl = \"bacnet://127.0.0.1:{port}/1001\"\npoint_ids = [58, 59, 60, 61]\n"
        ),
    )
    .unwrap();
    let store = dir.path().join("store.db");
    let out = ontime()
        .args(["crawl", "-D", "2s", "--json", "-c"])
        .arg(&config)
        .arg("--store")
        .arg(&store)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let gw = &r["config"]["gateways"][0]["protocol"];
    assert_eq!(
        (gw["max_apdu"].as_u64(), gw["max_apdu_from"].as_str()),
        (Some(480), Some("i-am")),
        "{gw}"
    );
    // 60 objects, 22 to a 480-byte answer: three requests; and one more.
    assert_eq!(u(&r["streams"]), 4, "{r:#}");
    let polls = &r["polls"];
    assert!(u(&polls["ok"]) >= 20, "{polls}");
    assert_eq!(u(&polls["device_error"]) + u(&polls["malformed"]), 0, "{polls}");
    // Objects 60 and 61 do not exist: two errors in each answer.
    assert_eq!(u(&polls["point_faults"]) % 2, 0, "{polls}");
    assert!(u(&polls["point_faults"]) >= 10, "{polls}");
    assert_eq!(u(&r["receive_stamps"]["crawler_send"]), u(&polls["ok"]), "{r:#}");

    let db = rusqlite::Connection::open(&store).unwrap();
    let mut stmt = db
        .prepare("SELECT series, value FROM samples WHERE value IS NOT NULL")
        .unwrap();
    let mut checked = 0;
    for row in stmt
        .query_map([], |row| Ok((row.get::<_, i64>(0)?, row.get::<_, f64>(1)?)))
        .unwrap()
    {
        let (series, value) = row.unwrap();
        let instance = (series & 0xffff_ffff) as f64;
        assert_eq!(value, 20.0 + instance / 4.0, "analog-input {instance}");
        checked += 1;
    }
    assert!(checked >= 20 * 60, "{checked} values stored");

    // Nobody at the address: no I-Am, refused before anything runs.
    let out = ontime()
        .args(["crawl", "-D", "1s", "--url"])
        .arg(format!("bacnet://127.0.0.1:{}/7", free_udp_port()))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("did not answer Who-Is") && err.contains("max_apdu"),
        "{err}"
    );
}

/// A device that stops (SIGSTOP) answers slowly when it resumes within the
/// timeout, and not at all past it: those polls are missed, each counted.
#[test]
fn a_paused_bacnet_device_is_slow_then_its_polls_are_missed() {
    let Some((device, port)) = bacpypes3_device(10, &[]) else {
        return;
    };
    paused_twice_is_slow_then_missed(&device, &format!("bacnet://127.0.0.1:{port}/1001"));
}

/// bacpypes3 reads ontime's BACnet gateway: each analog input's present
/// value is the gateway's value at the receive time it logged (a REAL).
#[test]
fn bacpypes3_reads_ontimes_bacnet_gateway() {
    if !Path::new(PEERS).exists() {
        ontime_testkit::skip(
            "bacpypes3 is not installed (scripts/setup.sh installs it into /var/cache/ontime/fieldbus)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("gw.log");
    let port = free_udp_port();
    let gateway = KillOnDrop::spawn(
        ontime()
            .args([
                "gateway",
                "--protocol",
                "bacnet",
                "--listen",
                &format!("127.0.0.1:{port}"),
            ])
            .args(["--points", "20", "--log"])
            .arg(&log),
    );
    ontime_testkit::wait_until("the gateway", Duration::from_secs(10), || {
        std::net::UdpSocket::bind(("127.0.0.1", port)).is_err()
    });
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/fieldbus-peer.py");
    let out = Command::new(PEERS)
        .args([script, "bacnet-read", "--port", &free_udp_port().to_string()])
        .args(["--device-port", &port.to_string(), "--objects", "0-9"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    let read: Vec<(u32, f64)> = text
        .lines()
        .filter_map(|l| {
            let (i, v) = l.trim().split_once(' ')?;
            Some((i.parse().ok()?, v.parse().ok()?))
        })
        .collect();
    assert_eq!(read.len(), 10, "{text}");
    gateway.signal(libc::SIGINT);
    let out = gateway.wait_output(Duration::from_secs(10));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(' ').collect())
        .collect();
    assert_eq!(lines.len(), 10, "{text}");
    for (l, (i, v)) in lines.iter().zip(&read) {
        assert_eq!(l[2].parse::<u32>().unwrap(), *i, "{l:?}");
        let recv_ns: u64 = l[0].parse().unwrap();
        let value = ontime_gateway::points::value(*i, 70, recv_ns) as f32;
        assert_eq!(*v as f32, value, "analog-input {i}");
    }
}

/// `ontime wire record` on the loopback with `args`, writing its result
/// to `result`; returns once it says it captures, so no request the test
/// makes after this goes unseen. Stopped with SIGINT, as a user's Ctrl-C.
fn wire_capturing(args: &[&str], result: &Path) -> KillOnDrop {
    use std::io::BufRead;
    let mut wire = KillOnDrop::spawn(ontime().args(["wire", "record"]).args(args).arg("--result").arg(result));
    let stderr = wire.0.stderr.take().expect("stderr is piped");
    let (ready, started) = std::sync::mpsc::channel();
    // Drained to its end, so the capture never writes into a closed pipe.
    std::thread::spawn(move || {
        let mut seen = String::new();
        let mut ready = Some(ready);
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("capturing") {
                if let Some(r) = ready.take() {
                    let _ = r.send(Ok(()));
                }
            }
            seen += &line;
            seen.push('\n');
        }
        if let Some(r) = ready {
            let _ = r.send(Err(seen));
        }
    });
    match started.recv_timeout(ontime_testkit::MIN_HANG_BOUND) {
        Ok(Ok(())) => wire,
        Ok(Err(stderr)) => panic!("the capture ended before it captured: {stderr}"),
        Err(e) => panic!("the capture did not start: {e}"),
    }
}

/// Ends a capture as Ctrl-C does and reads its result.
fn wire_stopped(wire: KillOnDrop, result: &Path) -> Value {
    wire.signal(libc::SIGINT);
    let out = wire.wait_output(Duration::from_secs(30));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    serde_json::from_str(&std::fs::read_to_string(result).unwrap()).unwrap()
}

/// The times a poller logged, one number (ns) a line.
fn logged_times(log: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(log).unwrap();
    text.lines()
        .map(|l| l.trim().parse().unwrap_or_else(|_| panic!("not a time: {l}")))
        .collect()
}

/// A percentile of a summary in a result.
fn pct(s: &Value, name: &str) -> Option<u64> {
    s["percentiles_ns"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .and_then(|p| p["value_ns"].as_u64())
}

/// Checks every point of a capture against the send times the poller
/// logged: each of its requests seen, every slot it skipped while stopped
/// (its log's longest gap) reported missed, as many missed in all but for
/// gaps that round either way, and p50 and p99 of interval
/// error within 200 us or 10 % of the log's. The log is judged by the
/// interval rule the product uses, with each point's period as the
/// capture inferred it, so what is compared is the two sets of times.
/// Returns the slots the stop skipped.
fn agrees_with_log(r: &Value, points: usize, times: &[u64]) -> u64 {
    let all = r["points"].as_array().unwrap();
    assert_eq!(all.len(), points, "{r:#}");
    let longest = times.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    let mut stopped = 0;
    for p in all {
        let period = u(&p["period_ns"]);
        let mut own = ontime_core::stats::LatencyHistogram::new();
        let skipped = ontime_core::interval::from_timestamps(times, period, &mut own);
        let own = own.summary(None);
        stopped = ((longest as f64 / period as f64).round() as u64).saturating_sub(1);
        assert_eq!(u(&p["requests"]), times.len() as u64, "{p}");
        // On a busy host a gap near one and a half periods may round one
        // way in the log and the other on the wire: the totals can differ
        // by such gaps, the stop's slots cannot go unreported.
        let missed = u(&p["missed"]);
        let ambiguous = ontime_testkit::ambiguous_gaps(times, period, 2_000_000);
        assert!(
            missed + ambiguous >= stopped && missed.abs_diff(skipped) <= ambiguous,
            "the {stopped} slots skipped while stopped reported missed; {missed} in all on the wire, \
             {skipped} in the log, {ambiguous} gaps could round either way: {p}"
        );
        for q in ["p50", "p99"] {
            let (wire, log) = (
                pct(&p["interval_error"], q).unwrap_or_else(|| panic!("no {q}: {p}")),
                own.percentile(q[1..].parse().unwrap()).unwrap(),
            );
            let tolerance = (log / 10).max(200_000);
            assert!(
                wire.abs_diff(log) <= tolerance,
                "{q}: {wire} ns from the packets, {log} ns from the poller's log: {p}"
            );
        }
    }
    stopped
}

/// `ontime wire record` measures a poller it did not write from its
/// packets: a pymodbus client reading every 20 ms on an absolute
/// schedule, which logs its own send times and skips the slots it could
/// not keep while stopped (SIGSTOP, 300 ms). Its interval error agrees
/// with the poller's own log and every slot it skipped is reported missed.
#[test]
fn wire_record_agrees_with_a_pollers_own_log() {
    if !ontime_testkit::root_or_skip("a packet capture (AF_PACKET)") {
        return;
    }
    let Some((_server, port)) = pymodbus_server() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (log, result) = (dir.path().join("poller.log"), dir.path().join("wire.json"));
    let wire = wire_capturing(&["--modbus-port", &port.to_string()], &result);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/fieldbus-peer.py");
    let poller = KillOnDrop::spawn(
        Command::new(PEERS)
            .args([script, "modbus-poll", "--port", &port.to_string()])
            .args(["--period-ms", "20", "--seconds", "4", "--log"])
            .arg(&log),
    );
    let logged = || std::fs::read_to_string(&log).map_or(0, |t| t.lines().count());
    ontime_testkit::wait_until("100 polls logged", Duration::from_secs(30), || logged() >= 100);
    poller.signal(libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(300));
    poller.signal(libc::SIGCONT);
    let out = poller.wait_output(Duration::from_secs(30));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = wire_stopped(wire, &result);
    let times = logged_times(&log);
    let skipped = agrees_with_log(&r, 4, &times);
    assert!(skipped >= 5, "the stop skipped slots: {skipped}");
}

/// The send times curl's own trace (`--trace-time`) gives its requests,
/// in ns of the day.
fn curl_send_times(trace: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(trace).unwrap_or_default();
    let mut day = 0;
    let mut times: Vec<u64> = Vec::new();
    for line in text.lines().filter(|l| l.contains("=> Send header")) {
        let clock = line.split(' ').next().unwrap();
        let (hms, micros) = clock.split_once('.').unwrap_or_else(|| panic!("{line}"));
        let s = hms
            .split(':')
            .map(|f| f.parse::<u64>().unwrap_or_else(|_| panic!("{line}")))
            .fold(0, |acc, f| acc * 60 + f);
        let mut t = day + s * 1_000_000_000 + micros.parse::<u64>().unwrap() * 1_000;
        if times.last().is_some_and(|&last| t < last) {
            day += 86_400 * 1_000_000_000;
            t += 86_400 * 1_000_000_000;
        }
        times.push(t);
    }
    times
}

/// curl polling nginx at 50 requests a second on one keep-alive
/// connection (`--rate 50/s`), stopped for 300 ms partway: the HTTP
/// requests seen on the wire agree with the send times curl's own trace
/// logged, and the slots it skipped are reported missed.
#[test]
fn wire_record_agrees_with_curl_polling_nginx() {
    if !ontime_testkit::root_or_skip("a packet capture (AF_PACKET)") || !ontime_testkit::tools_or_skip(&["curl"]) {
        return;
    }
    let port = ontime_testkit::free_port();
    let Some(_nginx) = ontime_testkit::Nginx::start(port, r#"{"value":21.5}"#) else {
        ontime_testkit::skip("nginx is not installed (scripts/setup.sh installs nginx-light)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (trace, result) = (dir.path().join("curl.trace"), dir.path().join("wire.json"));
    let wire = wire_capturing(&["--http-port", &port.to_string()], &result);
    let url = format!("http://127.0.0.1:{port}/points");
    let curl = KillOnDrop::spawn(
        Command::new("curl")
            .args(["-s", "--rate", "50/s", "--trace-time", "--trace-ascii"])
            .arg(&trace)
            .args(std::iter::repeat_n(&url, 300)),
    );
    ontime_testkit::wait_until("100 requests sent", Duration::from_secs(30), || {
        curl_send_times(&trace).len() >= 100
    });
    curl.signal(libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(300));
    curl.signal(libc::SIGCONT);
    let out = curl.wait_output(Duration::from_secs(60));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = wire_stopped(wire, &result);
    let times = curl_send_times(&trace);
    assert_eq!(times.len(), 300, "curl's trace lists every request");
    let skipped = agrees_with_log(&r, 1, &times);
    assert!(skipped >= 5, "the stop skipped slots: {skipped}");
}

/// mbpoll (libmodbus) run once per turn of a shell loop, as operators
/// script it: every request it sends is seen for each of the four
/// registers it reads, and the period inferred from the packets is the
/// one the same inference finds in the loop's log (within 5 %; a loop
/// of sleeps has no period of its own, and on a busy host a long turn
/// counts as missed slots). The loop logs its time before mbpoll starts,
/// so its log carries mbpoll's start-up and is not the send time the
/// percentiles would be compared with.
#[test]
fn wire_record_follows_mbpoll_in_a_loop() {
    if !ontime_testkit::root_or_skip("a packet capture (AF_PACKET)") || !ontime_testkit::tools_or_skip(&["mbpoll"]) {
        return;
    }
    let Some((_server, port)) = pymodbus_server() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (log, result) = (dir.path().join("loop.log"), dir.path().join("wire.json"));
    let wire = wire_capturing(&["--modbus-port", &port.to_string()], &result);
    let script = format!(
        "for i in $(seq 60); do date +%s%N >> '{}'; mbpoll -m tcp -p {port} -a 1 -r 1 -c 4 -1 127.0.0.1 > /dev/null || exit 1; sleep 0.02; done",
        log.display()
    );
    let out = KillOnDrop::spawn(Command::new("sh").args(["-c", &script])).wait_output(Duration::from_secs(120));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let r = wire_stopped(wire, &result);
    let times = logged_times(&log);
    assert_eq!(times.len(), 60);
    // The first 60 requests are the ones the period is inferred from.
    let own = ontime_wire::infer_period(&times).unwrap() as f64;
    let points = r["points"].as_array().unwrap();
    assert_eq!(points.len(), 4, "holding registers 0-3: {r:#}");
    for p in points {
        assert_eq!(u(&p["requests"]), 60, "{p}");
        let period = u(&p["period_ns"]) as f64;
        assert!(
            (period / own - 1.0).abs() <= 0.05,
            "period {period} ns from the packets, {own} ns from the loop's log: {p}"
        );
    }
}
