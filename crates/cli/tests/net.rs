//! `ontime net` end to end, as root: a lab run with channels between
//! tenants and to the building side, the `net channel` client against its
//! controller while it runs (admitted, refused with the reason, removed), a
//! sending tenant following its misses from inside its own namespace, the
//! results and the report; and a SIGKILLed controller whose leftovers (BPF
//! programs, namespaces, socket, token) `lab clean` removes. Root tests
//! skip elsewhere with a reason.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());
const SOCKET: &str = "/run/ontime/net-controller.sock";

mod common;
use common::{leftovers, ontime, CleanOnDrop};

fn root_or_skip() -> bool {
    common::lab_root_or_skip(&["iperf3"])
}

/// Waits until the controller answers with at least `n` channels: its
/// readiness, seen through its own API.
fn wait_for_channels(n: usize) {
    ontime_testkit::wait_until("the controller's channels", Duration::from_secs(60), || {
        ontime()
            .args(["net", "channel", "list", "--json"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| serde_json::from_slice::<Vec<serde_json::Value>>(&o.stdout).ok())
            .is_some_and(|l| l.len() >= n)
    });
}

/// BPF programs named like the data path's, loaded now.
fn channel_programs() -> Vec<String> {
    let out = Command::new("bpftool").args(["prog", "show"]).output();
    let Ok(out) = out else { return Vec::new() };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(" name stamp ") || l.contains(" name check "))
        .map(str::to_string)
        .collect()
}

fn json(p: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

#[test]
fn channels_between_tenants_end_to_end() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip() {
        return;
    }
    let _clean = CleanOnDrop;
    let dir = tempfile::tempdir().unwrap();
    let sc = dir.path().join("net.toml");
    // A: to the building side; F: between tenants at the channel MTU
    // (1468 + 28 = 1496 bytes of IP); M: declares 0.1 Mbit/s, sends 60 on a
    // 50 Mbit/s link, so its own buffer (16 ms) makes it miss its 2 ms, and
    // its earlier deadlines hold A and F back past theirs until the
    // controller raises them to priority.
    std::fs::write(
        &sc,
        "name = 'net-e2e'\nduration = '8s'\n[host]\nrelay_delay = '0ms'\nrelay_policy = 'fifo:90'\n[tenant]\ncount = 4\n\
[net]\nlink_mbit = 50\nbuffer = '100K'\nbest_effort_mbit = 10\nvcpu_policy = 'fifo:10'\n\
[[net.flow]]\nname = 'A'\nfrom = 0\nport = 5001\nrate_mbit = 1\nsize = 500\ndeadline = '50ms'\n\
[[net.flow]]\nname = 'F'\nfrom = 1\nto = 't2'\nport = 5002\nrate_mbit = 1\nsize = 1468\ndeadline = '50ms'\n\
[[net.flow]]\nname = 'M'\nfrom = 0\nport = 5003\nrate_mbit = 60\ndeclared_rate_mbit = 0.1\nsize = 1000\nburst = 10\ndeadline = '2ms'\n",
    )
    .unwrap();
    let results = dir.path().join("r");
    let runner = ontime()
        .args(["lab", "run", "--report"])
        .arg(&sc)
        .arg("-o")
        .arg(&results)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The scenario's three flows have their channels (1, 2, 3).
    wait_for_channels(3);

    // The sending tenant follows its misses from inside its namespace.
    let follower = Command::new("ip")
        .args(["netns", "exec", "ontime-t0"])
        .arg(env!("CARGO_BIN_EXE_ontime"))
        .args(["net", "misses", "--from", "t0", "--count", "3", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    let add = ontime()
        .args([
            "net", "channel", "add", "--from", "t3", "--to", "building", "--port", "6000",
        ])
        .args(["--rate-mbit", "1", "--deadline", "20ms"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&add.stdout);
    assert!(add.status.success(), "{out} {}", String::from_utf8_lossy(&add.stderr));
    assert!(
        out.starts_with("admitted: channel 4 (t3 -> building port 6000"),
        "{out}"
    );
    let refused = ontime()
        .args(["net", "channel", "add", "--from", "t3", "--port", "6001"])
        .args(["--rate-mbit", "60", "--deadline", "20ms"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(err.contains("refused: link capacity"), "{err}");
    let unknown = ontime()
        .args([
            "net",
            "channel",
            "add",
            "--from",
            "t9",
            "--rate-mbit",
            "1",
            "--deadline",
            "20ms",
        ])
        .output()
        .unwrap();
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("unknown sender 't9'"));
    let list = ontime().args(["net", "channel", "list"]).output().unwrap();
    let l = String::from_utf8_lossy(&list.stdout);
    assert!(list.status.success());
    assert!(l.contains("t1->t2:5002") && l.contains("t3->building:6000"), "{l}");
    let rm = ontime().args(["net", "channel", "rm", "4"]).output().unwrap();
    assert!(rm.status.success(), "{}", String::from_utf8_lossy(&rm.stderr));

    let f = follower.wait_with_output().unwrap();
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&f.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(f.status.success(), "{}", String::from_utf8_lossy(&f.stderr));
    assert_eq!(lines.len(), 3);
    assert!(
        lines.iter().all(|m| m["from"] == "t0" && m["channel"] == 3),
        "{lines:?}"
    );
    // Each miss comes with its overrun's parts, which add up to it.
    for m in &lines {
        let parts: u64 = m["why"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["ns"].as_u64().unwrap())
            .sum();
        assert_eq!(parts, m["overrun_ns"].as_u64().unwrap(), "{m}");
    }

    let st = runner.wait_with_output().unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    let run = results.join("runs/000-rep1");
    let rec = json(&run.join("run.json"));
    assert_eq!(rec["workload"], "net");
    let net = json(&run.join("net.json"));
    let chan = |id: u64| {
        net["channels"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap()
            .clone()
    };
    let actions: Vec<String> = net["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| format!("{} {}", a["kind"].as_str().unwrap(), a["message"].as_str().unwrap()))
        .collect();
    for (name, id) in [("A", 1), ("F", 2)] {
        let r = json(&run.join(format!("flow-{name}.json")));
        let s = json(&run.join(format!("flow-{name}.send.json")));
        let c = chan(id);
        // Every datagram was stamped; what arrived was checked, on time or
        // late (a receiving ring can overflow while M floods the link: the
        // receiver counts that as lost, never as received).
        let k = &c["counts"];
        let (sent, received) = (s["sent"].as_u64().unwrap(), r["received"].as_u64().unwrap());
        assert_eq!(k["stamped"].as_u64().unwrap(), sent, "{name}: {c}");
        assert!(
            received + r["lost"].as_u64().unwrap() <= sent,
            "{name}: no datagram counted twice"
        );
        assert!(received * 10 >= sent * 9, "{name}: {received} of {sent} arrived");
        let checked = k["on_time"].as_u64().unwrap() + k["missed"].as_u64().unwrap();
        assert!(
            (received..=sent).contains(&checked),
            "{name}: {checked} checked, {received} received: {c}"
        );
        // The receiver's clock and the check both saw late datagrams.
        assert!(r["misses"].as_u64().unwrap() > 0, "{name}");
        assert!(
            k["missed"].as_u64().unwrap() > 0,
            "{name} waits behind M's earlier deadlines: {c}"
        );
        assert!(
            actions
                .iter()
                .any(|a| a.starts_with(&format!("escalated channel {id}:"))),
            "{name} is raised to priority: {actions:?}"
        );
        assert_eq!(c["priority"], true);
    }
    let m = chan(3);
    assert!(m["counts"]["missed"].as_u64().unwrap() > 0, "{m}");
    assert!(
        actions.iter().any(|a| a.starts_with("exceeds channel 3")),
        "{actions:?}"
    );
    assert!(
        !actions.iter().any(|a| a.starts_with("escalated channel 3")),
        "a channel beyond its declaration is not escalated: {actions:?}"
    );
    assert!(actions.iter().any(|a| a.starts_with("refused")), "{actions:?}");
    // Why they missed, from the relay's record of each missed frame: M
    // queued behind its own earlier frames, A behind M's.
    let why = |id: u64| {
        let c = net["miss_causes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["channel"] == id)
            .unwrap_or_else(|| panic!("channel {id} has no miss causes: {}", net["miss_causes"]))
            .clone();
        assert!(c["with_path"].as_u64().unwrap() > 0, "{c}");
        let sum: u64 = c["parts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["ns"].as_u64().unwrap())
            .sum();
        assert_eq!(sum, c["overrun_ns"].as_u64().unwrap(), "{c}");
        c["parts"][0]["part"].as_str().unwrap().to_string()
    };
    assert_eq!(why(3), "behind_own_channel");
    assert_eq!(why(1), "behind_other_channels");
    // The channel senders' threads were made real-time (document 003's
    // real-time VMs).
    assert!(
        actions
            .iter()
            .any(|a| a.starts_with("vcpu channel 1:") && a.ends_with("of t0 set to fifo:10")),
        "{actions:?}"
    );
    assert_eq!(net["malformed_dropped"], 0);
    assert_eq!(net["stamp_failures"], 0);
    let html = std::fs::read_to_string(results.join("report/report.html")).unwrap();
    assert!(html.contains("Real-time channels (document 003)"));
    // Nothing left: namespaces, programs, the controller's files.
    assert!(leftovers().contains("nothing of the lab's is left"));
    assert!(channel_programs().is_empty(), "{:?}", channel_programs());
    assert!(!Path::new(SOCKET).exists());
}

/// A flow through a relay stalled 200 ms now and then, with the flight
/// recorder on: the receiver logs its datagrams' lateness, which triggers
/// the recorder, and the late datagrams are explained on the windows it
/// kept, the relay named.
#[test]
fn a_flows_late_datagrams_are_explained_on_the_flight_recorders_windows() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip() {
        return;
    }
    let _clean = CleanOnDrop;
    let dir = tempfile::tempdir().unwrap();
    let sc = dir.path().join("net-flight.toml");
    std::fs::write(
        &sc,
        "name = 'net-flight'\nduration = '12s'\n[host]\nrelay_delay = '0ms'\n[tenant]\ncount = 2\n\
[observe]\nrecorder = 'ontime'\nflight = 'on'\nkeep_around = '1s'\n\
[net]\nlink_mbit = 50\nchannels = 'none'\n\
[[net.flow]]\nname = 'A'\nfrom = 0\nto = 't1'\nport = 5001\nrate_mbit = 1\nsize = 500\ndeadline = '50ms'\n\
[[inject]]\ncause = 'relay-stall'\nlength = '200ms'\nevery = '4s'\nstart_after = '3s'\n",
    )
    .unwrap();
    let results = dir.path().join("r");
    let st = ontime()
        .args(["lab", "run"])
        .arg(&sc)
        .arg("-o")
        .arg(&results)
        .output()
        .unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    let run = results.join("runs/000-rep1");
    assert!(run.join("flow-A.hlog").exists());
    let rec = json(&run.join("run.json"));
    let ring = &rec["observe"]["flight"];
    // Which windows go depends on how busy the host is (any datagram
    // past 50 ms keeps its own): only that the stalls triggered it.
    assert!(ring["triggers"].as_u64().unwrap() > 0, "{ring}");
    assert!(ring["kept"].as_u64().unwrap() > 0, "{ring}");
    let x = json(&run.join("net-explain.json"));
    let flow = &x["flows"][0];
    assert_eq!(flow["flow"], "A", "{x:#}");
    let e = &flow["explanation"];
    assert!(e["explained"].as_u64().unwrap() > 0, "{e:#}");
    let sum: u64 = e["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["ns"].as_u64().unwrap())
        .sum();
    assert_eq!(sum, e["lateness_ns"].as_u64().unwrap(), "{e:#}");
    // The stalled relay held the datagrams asleep: its thread is named.
    let held = e["causes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["detail"] == "relay_wait")
        .unwrap_or_else(|| panic!("the relay is not named: {e:#}"));
    assert_eq!(held["culprit"]["group"], "host-io", "{e:#}");
    assert!(leftovers().contains("nothing of the lab's is left"));
}

#[test]
fn a_killed_controller_leaves_what_clean_removes() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip() {
        return;
    }
    let _clean = CleanOnDrop;
    let dir = tempfile::tempdir().unwrap();
    let mut ctl = ontime()
        .args(["net", "controller", "-D", "60s", "-o"])
        .arg(dir.path().join("r"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_channels(0);
    let add = ontime()
        .args(["net", "channel", "add", "--from", "t0", "--port", "5000"])
        .args(["--rate-mbit", "2", "--deadline", "5ms"])
        .output()
        .unwrap();
    assert!(add.status.success(), "{}", String::from_utf8_lossy(&add.stderr));
    assert_eq!(channel_programs().len(), 2, "stamp and check loaded");
    ctl.kill().unwrap();
    ctl.wait().unwrap();
    let before = leftovers();
    assert!(before.contains("ontime-t0"), "{before}");
    assert!(before.contains(SOCKET), "{before}");
    let clean = ontime().args(["lab", "clean"]).output().unwrap();
    assert!(clean.status.success());
    let after = leftovers();
    assert!(after.contains("nothing of the lab's is left"), "{after}");
    let t0 = Instant::now();
    // Programs go when their last link does (the namespaces' devices).
    while !channel_programs().is_empty() && t0.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(channel_programs().is_empty(), "{:?}", channel_programs());
    assert!(!Path::new(SOCKET).exists() && !Path::new("/run/ontime/net-controller.token").exists());
    let procs = Command::new("pgrep").args(["-f", "net controller"]).output().unwrap();
    assert!(procs.stdout.is_empty(), "{}", String::from_utf8_lossy(&procs.stdout));
}
