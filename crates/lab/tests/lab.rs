//! The lab's kernel objects: created, measured and removed without
//! leftovers. These need root (namespaces, cgroups, packet sockets) and skip
//! with a reason elsewhere. They share global names, so they run one at a
//! time.

use ontime_lab::cgroup::Limits;
use ontime_lab::relay::{Relay, RelaySettings};
use ontime_lab::sandbox::{Lab, TenantSpec};
use ontime_lab::{clean, names};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

fn root_or_skip() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: the lab needs root");
        return false;
    }
    if ontime_core::caps::which("ethtool").is_none() {
        eprintln!("skipped: ethtool is not installed (scripts/setup.sh installs it)");
        return false;
    }
    true
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
    let lab = Lab::create(&[TenantSpec { limits: limits.clone() }, TenantSpec { limits }])
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
    let r = Lab::create(&[TenantSpec::default(), TenantSpec { limits: bad }]);
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

#[test]
fn relay_delay_holds_within_half_a_millisecond_at_p99() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip() {
        return;
    }
    let lab = Lab::create(&[TenantSpec::default()]).unwrap();
    let delay_ns = 10_000_000u64;
    let relay = Relay::start(
        &lab.building,
        &[lab.tenants[0].net.clone()],
        RelaySettings {
            delay_ns,
            ..Default::default()
        },
    )
    .unwrap();
    let server_addr = format!("{}:9999", names::building_addr());
    let bind = server_addr.clone();
    let server = in_netns(&names::building_netns(), move || {
        let s = std::net::UdpSocket::bind(&bind).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut buf = [0u8; 64];
        while let Ok((n, from)) = s.recv_from(&mut buf) {
            if &buf[..n] == b"end" {
                break;
            }
            s.send_to(&buf[..n], from).unwrap();
        }
    });
    std::thread::sleep(Duration::from_millis(100));
    let client = in_netns(&names::tenant_netns(0), move || {
        let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut one_way = Vec::new();
        let mut buf = [0u8; 64];
        for i in 0u32..400 {
            let t0 = Instant::now();
            s.send_to(&i.to_le_bytes(), &server_addr).unwrap();
            if s.recv_from(&mut buf).is_ok() {
                one_way.push(t0.elapsed().as_nanos() as u64 / 2);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = s.send_to(b"end", &server_addr);
        one_way
    });
    let mut one_way = client.join().unwrap();
    server.join().unwrap();
    let report = relay.stop().unwrap();
    lab.destroy();
    assert!(one_way.len() >= 390, "only {} of 400 echoes came back", one_way.len());
    one_way.sort_unstable();
    let p99 = one_way[one_way.len() * 99 / 100];
    let p50 = one_way[one_way.len() / 2];
    assert!(p50 >= delay_ns, "one way p50 {p50} ns is below the delay");
    assert!(
        p99.abs_diff(delay_ns) <= 500_000,
        "one way p99 {p99} ns is not within 0.5 ms of {delay_ns} ns"
    );
    // The relay's own measurement agrees.
    let rp99 = report.delay.get("p99").unwrap();
    assert!(rp99.abs_diff(delay_ns) <= 500_000, "relay's p99 {rp99} ns");
    assert!(report.frames >= 780, "frames {}", report.frames);
    assert!(clean::find().unwrap().is_empty());
}
