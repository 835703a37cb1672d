//! The lab's kernel objects: created, measured and removed without
//! leftovers. These need root (namespaces, cgroups, packet sockets) and skip
//! with a reason elsewhere. They share global names, so they run one at a
//! time.

use ontime_lab::cgroup::Limits;
use ontime_lab::sandbox::{Lab, TenantSpec};
use ontime_lab::{clean, names};
use ontime_net::{Relay, RelaySettings};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

/// Root and the tools, on a host without lab objects (a lab killed before
/// the suite would fail these tests for a reason not their own).
fn root_or_skip() -> bool {
    let ok = ontime_testkit::root_or_skip("the lab") && ontime_testkit::tools_or_skip(&["ethtool", "ip"]);
    if ok {
        let found = clean::clean(false).expect("lab clean before the test");
        if !found.is_empty() {
            eprintln!(
                "test: removed what an earlier lab left: {:?}",
                found.names().collect::<Vec<_>>()
            );
        }
    }
    ok
}

#[test]
fn create_and_destroy_leave_nothing() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip() {
        return;
    }
    let limits = Limits {
        memory_bytes: Some(128 << 20),
        cpu_quota: Some(0.5),
        ..Default::default()
    };
    let lab = Lab::create(&[
        TenantSpec {
            limits: limits.clone(),
            ..Default::default()
        },
        TenantSpec {
            limits,
            ..Default::default()
        },
    ])
    .map_err(|e| format!("{e:#}"))
    .unwrap();
    let found = clean::find().unwrap();
    assert_eq!(found.netns.len(), 3, "{found:?}");
    assert_eq!(found.links.len(), 3, "{found:?}");
    let cg = lab.tenants[1].cgroup.as_ref().expect("a cgroup");
    if cg.version == ontime_lab::cgroup::Version::V1 {
        let mem = std::fs::read_to_string(cg.dirs[2].join("memory.limit_in_bytes")).unwrap();
        assert_eq!(mem.trim(), (128u64 << 20).to_string());
        let quota = std::fs::read_to_string(cg.dirs[0].join("cpu.cfs_quota_us")).unwrap();
        assert_eq!(quota.trim(), "50000");
    }
    lab.destroy();
    let after = clean::find().unwrap();
    assert!(after.is_empty(), "left behind: {after:?}");
}

#[test]
fn a_failure_half_way_removes_what_was_made() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip() {
        return;
    }
    // Tenant 1 asks for a CPU that does not exist: its cgroup fails after
    // the building side and tenant 0 were made.
    let bad = Limits {
        cpuset: vec![4095],
        ..Default::default()
    };
    let r = Lab::create(&[
        TenantSpec::default(),
        TenantSpec {
            limits: bad,
            ..Default::default()
        },
    ]);
    assert!(r.is_err());
    let after = clean::find().unwrap();
    assert!(after.is_empty(), "left behind: {after:?}");
}

/// Runs `f` on a thread inside network namespace `ns`.
fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> std::thread::JoinHandle<T> {
    let file = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
    std::thread::spawn(move || {
        use std::os::fd::AsRawFd;
        // SAFETY: setns on this thread only, with a valid namespace fd.
        assert_eq!(unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) }, 0);
        f()
    })
}

/// The relay applies its delay to every frame, in both directions, and
/// accounts for every frame; its own measurement agrees with the echo's. No
/// latency limit: this asserts what the relay does, not how promptly a noisy
/// host schedules it (timing targets live in bench/).
#[test]
fn relay_applies_its_delay_to_every_frame_and_accounts_for_each() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip() {
        return;
    }
    let lab = Lab::create(&[TenantSpec::default()]).unwrap();
    let delay_ns = 10_000_000u64;
    let relay = Relay::start(
        lab.building.port(),
        &[lab.tenants[0].net.port()],
        RelaySettings {
            delay_ns,
            ..Default::default()
        },
    )
    .unwrap();
    let server_addr = format!("{}:9999", names::building_addr());
    let bind = server_addr.clone();
    let (bound_tx, bound) = std::sync::mpsc::channel();
    let server = in_netns(&names::building_netns(), move || {
        let s = std::net::UdpSocket::bind(&bind).unwrap();
        let _ = bound_tx.send(());
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut buf = [0u8; 64];
        let mut echoed = 0u64;
        while let Ok((n, from)) = s.recv_from(&mut buf) {
            if &buf[..n] == b"end" {
                break;
            }
            s.send_to(&buf[..n], from).unwrap();
            echoed += 1;
        }
        echoed
    });
    bound
        .recv_timeout(Duration::from_secs(30))
        .expect("the echo server is bound");
    const SENT: u32 = 200;
    let client = in_netns(&names::tenant_netns(0), move || {
        let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut round_trips = Vec::new();
        let mut buf = [0u8; 64];
        for i in 0..SENT {
            let t0 = Instant::now();
            s.send_to(&i.to_le_bytes(), &server_addr).unwrap();
            if s.recv_from(&mut buf).is_ok() {
                round_trips.push(t0.elapsed().as_nanos() as u64);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let _ = s.send_to(b"end", &server_addr);
        round_trips
    });
    let round_trips = client.join().unwrap();
    let echoed = server.join().unwrap();
    let report = relay.stop().unwrap();
    lab.destroy();
    assert!(clean::find().unwrap().is_empty());

    // Every datagram crossed the relay (UDP on veth loses nothing here).
    assert_eq!(echoed, SENT as u64, "the server saw {echoed} of {SENT}");
    assert_eq!(
        round_trips.len(),
        SENT as usize,
        "{} of {SENT} echoes came back",
        round_trips.len()
    );
    // The delay was applied both ways, to every frame: none came back early.
    let fastest = *round_trips.iter().min().unwrap();
    assert!(
        fastest >= 2 * delay_ns,
        "a round trip of {fastest} ns beat twice the delay"
    );
    // Every frame is accounted for: each datagram and echo (and the "end"),
    // nothing dropped.
    assert_eq!(report.dropped, 0);
    assert!(report.frames > 2 * SENT as u64, "frames {}", report.frames);
    // The relay's own measurement agrees with the echo: it never released a
    // frame early, and its median lies between the delay and the echo's
    // median one-way time (which contains it).
    let rmin = report.delay.min_ns.unwrap_or(0);
    assert!(rmin >= delay_ns, "relay min {rmin} ns");
    let mut sorted = round_trips.clone();
    sorted.sort_unstable();
    let echo_p50_one_way = sorted[sorted.len() / 2] / 2;
    let rp50 = report.delay.get("p50").unwrap();
    assert!(
        rp50 <= echo_p50_one_way + delay_ns,
        "relay p50 {rp50} ns, echo one-way p50 {echo_p50_one_way} ns"
    );
    // Each direction is reported from the kernel's receive stamps: the
    // datagrams came in from the tenant, the echoes from the building, and
    // what the relay added to a frame beyond its delay is part of what its
    // round trip took beyond twice the delay.
    let names: Vec<&str> = report.directions.iter().map(|d| d.direction.as_str()).collect();
    assert_eq!(names, ["from tenants", "from building"]);
    for d in &report.directions {
        assert!(d.frames >= SENT as u64, "{}: {} frames", d.direction, d.frames);
        assert!(d.stamped > 0, "{}: no kernel receive stamps", d.direction);
        let late_p50 = d.late.get("p50").unwrap();
        assert!(
            late_p50 <= 2 * echo_p50_one_way - 2 * delay_ns,
            "{}: late p50 {late_p50} ns beyond the delay, echo round trip p50 {} ns",
            d.direction,
            2 * echo_p50_one_way
        );
    }
}
