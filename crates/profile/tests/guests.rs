//! Document 002's check with real QEMU guests: three TCG guests (Debian's
//! kernel, a busybox initramfs spinning in its init; the kit is built
//! by scripts/guest-kit.sh) pinned to one CPU each steal about two thirds of
//! their vCPU's time, and an idle guest's blank time is halt (idle), not
//! steal. TCG has no VM exits, so this checks halt against runqueue steal;
//! exit-based steal is tested on synthetic events (attribute.rs). Needs
//! root, qemu-system-x86_64 and the kit; skips elsewhere with the reason.

use ontime_core::export::TextReport;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use ontime_testkit::skip;
use ontime_trace::recorder::{record, NoSink, RecordOptions};
use ontime_trace::recording::Recording;
use ontime_trace::targets::{find_guest, Targets};

fn kit() -> PathBuf {
    std::env::var_os("ONTIME_GUEST_KIT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/ontime/guest-kit"))
}

/// QEMU guests, killed when dropped (also when the test fails).
struct Guests(Vec<Child>);
impl Drop for Guests {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn boot(kit: &Path, name: &str, work: &str, log: &Path) -> Child {
    Command::new("qemu-system-x86_64")
        .args(["-name", &format!("guest={name},debug-threads=on")])
        .args([
            "-machine",
            "q35",
            "-accel",
            "tcg",
            "-smp",
            "1",
            "-m",
            "128",
            "-nodefaults",
        ])
        .args(["-display", "none", "-monitor", "none"])
        .arg("-kernel")
        .arg(kit.join("vmlinuz"))
        .arg("-initrd")
        .arg(kit.join("initrd.gz"))
        .args(["-append", &format!("console=ttyS0 quiet ontime.work={work}")])
        .arg("-serial")
        .arg(format!("file:{}", log.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start qemu-system-x86_64")
}

/// Pins every thread of `pid` to `cpu`.
fn pin_all_threads(pid: u32, cpu: usize) {
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("threads")
        .flatten()
    {
        let tid: i32 = t.file_name().to_string_lossy().parse().expect("tid");
        // SAFETY: a zeroed cpu_set_t with one CPU set, passed by pointer.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
}

#[test]
fn tcg_guests_on_one_cpu_steal_two_thirds_and_an_idle_guest_halts() {
    if !ontime_testkit::root_or_skip("BPF recorder and perf sampling") {
        return;
    }
    if Command::new("qemu-system-x86_64").arg("--version").output().is_err() {
        skip("qemu-system-x86_64 not installed (scripts/setup.sh installs it)");
        return;
    }
    let kit = kit();
    if !kit.join("vmlinuz").exists() || !kit.join("initrd.gz").exists() {
        skip("no guest kit: run scripts/guest-kit.sh (scripts/setup.sh does)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let tag = std::process::id();
    let specs: Vec<(String, &str)> = (0..4)
        .map(|i| (format!("ontime-g{i}-{tag}"), if i < 3 { "busy" } else { "idle" }))
        .collect();
    let logs: Vec<PathBuf> = (0..4).map(|i| dir.path().join(format!("g{i}.log"))).collect();
    let guests = Guests(
        specs
            .iter()
            .zip(&logs)
            .map(|((name, work), log)| boot(&kit, name, work, log))
            .collect(),
    );
    // Boot on every CPU, then pin: booting four guests on one CPU is slow.
    let start = Instant::now();
    while !logs.iter().all(|l| {
        std::fs::read_to_string(l)
            .map(|t| t.contains("ontime-guest-ready"))
            .unwrap_or(false)
    }) {
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "guests did not boot in 180 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let cpu = ontime_core::limits::online_cpus().max(1) - 1;
    for g in &guests.0 {
        pin_all_threads(g.id(), cpu);
    }
    std::thread::sleep(Duration::from_millis(500));

    let groups = specs
        .iter()
        .map(|(n, _)| find_guest(n).expect("guest found by name"))
        .collect();
    let file = dir.path().join("g.otrec");
    let opts = RecordOptions {
        targets: Targets::of(groups),
        output: Some(file.clone()),
        sample_hz: Some(1000),
        measure_overhead: false,
        ..Default::default()
    };
    record(
        &opts,
        &AtomicBool::new(false),
        Some(Duration::from_secs(4)),
        &mut NoSink,
        &mut |_| {},
    )
    .expect("recording");
    drop(guests);

    let rec = Recording::read(&file).expect("read recording");
    let p = ontime_profile::profile(&rec).expect("profile");
    eprintln!(
        "{}",
        ontime_profile::ProfileText {
            report: &p.report,
            top: 8,
            view: ontime_profile::FunctionView::Program,
        }
        .text()
    );
    for (name, work) in &specs {
        let vcpu = p
            .report
            .threads
            .iter()
            .find(|t| &t.tenant == name && t.name == "CPU 0/TCG")
            .unwrap_or_else(|| panic!("{name}: no CPU 0/TCG thread in the profile"));
        let a = vcpu.apparent_ns as f64;
        let (steal, idle) = (vcpu.steal_runqueue_ns as f64 / a, vcpu.idle_ns as f64 / a);
        eprintln!("{name} ({work}): steal {steal:.3} idle {idle:.3}");
        if *work == "busy" {
            // Three equal guests on one CPU steal 2/3 from each other;
            // whatever else runs there (a busy host) only adds to it.
            assert!(
                (0.55..0.9).contains(&steal),
                "{name}: steal share {steal:.3}, about 2/3 or more expected"
            );
        } else {
            assert!(
                idle > 0.9 && steal < 0.1,
                "{name}: an idle guest halts: idle {idle:.3} steal {steal:.3}"
            );
        }
        let tenant = p.report.tenants.iter().find(|t| &t.name == name).expect("tenant");
        assert_eq!(tenant.threads, 1, "{name}: its one vCPU thread is what the tenant sums");
        assert_eq!(tenant.steal_host_ns, None, "TCG has no VM exits");
    }
}

/// The in-guest agent in a real guest: its dump (over the serial console)
/// names guest kernel addresses by the guest's own symbols, and user
/// addresses by the process's mappings and the guest's files. Guest PCs
/// need KVM to be recorded; here they are taken from the dump itself (the
/// symbol's own address, a mapped address), so what is tested is the join.
#[test]
fn the_agents_dump_names_guest_addresses() {
    if Command::new("qemu-system-x86_64").arg("--version").output().is_err() {
        skip("qemu-system-x86_64 not installed (scripts/setup.sh installs it)");
        return;
    }
    let kit = kit();
    if !kit.join("root/bin/ontime-guest-agent").exists() {
        skip("no guest kit with the agent: run scripts/guest-kit.sh (scripts/setup.sh does)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("agent.log");
    let name = format!("ontime-agent-{}", std::process::id());
    let _guest = Guests(vec![boot(&kit, &name, "agent", &log)]);
    let start = Instant::now();
    let text = loop {
        let t = std::fs::read_to_string(&log).unwrap_or_default();
        if t.contains("ontime-guest-dump end") {
            break t;
        }
        assert!(start.elapsed() < Duration::from_secs(240), "no complete dump in 240 s");
        std::thread::sleep(Duration::from_millis(300));
    };
    let dump = ontime_profile::guest::GuestDump::parse(&text).expect("a dump");
    assert!(dump.complete && dump.kernel.contains("-amd64"), "{}", dump.kernel);
    assert!(
        dump.kallsyms.len() > 10_000,
        "guest kernel symbols: {}",
        dump.kallsyms.len()
    );
    let schedule = dump
        .kallsyms
        .iter()
        .find(|(_, n)| n == "schedule")
        .map(|(a, _)| *a)
        .expect("the guest's schedule()");
    // The shell running the agent, and its busybox mapping.
    let (pid, text_map) = dump
        .processes
        .values()
        .find_map(|p| {
            p.maps
                .iter()
                .find(|m| m.path == "/bin/busybox")
                .map(|m| (p.pid, m.clone()))
        })
        .expect("a process mapping /bin/busybox");
    let g = ontime_profile::guest::GuestSymbols::new(dump, Some(kit.join("root")));
    let k = g.frame(None, schedule + 4);
    assert_eq!((k.function.as_str(), k.named), ("schedule", true));
    let u = g.frame(Some(pid), text_map.start + 0x10);
    assert!(u.module.contains("/bin/busybox"), "{u:?}");
    // busybox-static is stripped: the file names no function, so the frame
    // keeps file and offset rather than a guess.
    if !u.named {
        assert!(u.function.starts_with("busybox+0x"), "{u:?}");
    }
    assert!(!g.frame(None, text_map.start).named, "no process given: no name");
}
