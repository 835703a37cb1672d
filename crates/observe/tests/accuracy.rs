//! Accuracy of the recorder and the analysis against the kernel's own
//! per-thread accounting (/proc/<tid>/schedstat), on a contended workload:
//! two tenants (cgroups) of three busy processes each on a host with fewer
//! cores. Needs root (BPF, cgroups); skips with one line otherwise.
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use ontime_sched::analyze::AnalysisOptions;
use ontime_trace::recorder::{record, Mechanism, NoSink, RecordOptions};
use ontime_trace::recording::Recording;
use ontime_trace::targets::{CgroupRoot, TargetGroup, Targets};

/// Kills the workload and removes the cgroups, also when an assertion fails.
struct Workload {
    children: Vec<(String, Child)>,
    cgroups: Vec<PathBuf>,
}

impl Drop for Workload {
    fn drop(&mut self) {
        for (_, c) in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Children first, then the parent directory.
        for dir in self.cgroups.iter().rev() {
            for _ in 0..50 {
                if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

fn signal_all(w: &Workload, sig: i32) {
    for (_, c) in &w.children {
        unsafe { libc::kill(c.id() as i32, sig) };
    }
}

/// Waits until every child is stopped (state T): SIGSTOP is delivered
/// when each next runs.
fn wait_stopped(w: &Workload) {
    ontime_testkit::wait_until("the workers to stop", Duration::from_secs(30), || {
        w.children.iter().all(|(_, c)| {
            std::fs::read_to_string(format!("/proc/{}/stat", c.id()))
                .is_ok_and(|st| st.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('T')))
        })
    });
}

/// (sum_exec_runtime, run_delay) in ns.
fn schedstat(pid: u32) -> (u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).expect("schedstat readable");
    let mut it = s.split_whitespace().map(|v| v.parse::<u64>().expect("number"));
    (it.next().expect("runtime"), it.next().expect("run_delay"))
}

/// Time the hypervisor stole from all CPUs so far (/proc/stat), ns.
fn host_steal_ns() -> u64 {
    ontime_core::cputime::CpuTimes::now().expect("/proc/stat").steal_ns
}

/// `ours` is within `rel` of `theirs`, plus `bound_ns` (what the analysis
/// says it may be off by, for events that went missing).
fn within(ours: u64, theirs: u64, rel: f64, bound_ns: u64, what: &str) {
    let diff = ours.abs_diff(theirs).saturating_sub(bound_ns) as f64;
    eprintln!(
        "{what}: ontime {ours} schedstat {theirs} ({:+.4}%)",
        (ours as f64 - theirs as f64) * 100.0 / theirs.max(1) as f64
    );
    assert!(
        diff <= theirs as f64 * rel,
        "{what}: ontime {ours} ns vs schedstat {theirs} ns (off by {:.3}%)",
        diff * 100.0 / theirs.max(1) as f64
    );
}

/// The two mechanisms take turns: each workload must have the CPUs to itself.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn bpf_on_cpu_and_run_delay_match_schedstat() {
    if !ontime_testkit::root_or_skip("BPF and cgroups") {
        return;
    }
    on_cpu_and_run_delay_match_schedstat(Mechanism::Bpf);
}

/// The fallback where BPF cannot load, forced here so it is tested on a
/// kernel that has BPF too.
#[test]
fn perf_on_cpu_and_run_delay_match_schedstat() {
    if !ontime_testkit::root_or_skip("perf tracepoints and cgroups") {
        return;
    }
    on_cpu_and_run_delay_match_schedstat(Mechanism::Perf);
}

fn on_cpu_and_run_delay_match_schedstat(mechanism: Mechanism) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let root = CgroupRoot::detect().expect("a cgroup hierarchy");
    let base = root.path.join(format!("ontime-test-observe-{}", std::process::id()));
    let mut w = Workload {
        children: Vec::new(),
        cgroups: vec![base.clone()],
    };
    std::fs::create_dir(&base).expect("create test cgroup");
    if !root.v1 {
        let _ = std::fs::write(root.path.join("cgroup.subtree_control"), "+cpu");
        let _ = std::fs::write(base.join("cgroup.subtree_control"), "+cpu");
    }
    let mut groups = Vec::new();
    for name in ["a", "b"] {
        let dir = base.join(name);
        std::fs::create_dir(&dir).expect("create tenant cgroup");
        w.cgroups.push(dir.clone());
        for _ in 0..3 {
            let child = Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .spawn()
                .expect("spawn sh");
            std::fs::write(dir.join("cgroup.procs"), child.id().to_string()).expect("move into cgroup");
            w.children.push((name.to_string(), child));
        }
        groups.push(TargetGroup {
            name: name.into(),
            cgroups: vec![dir],
            pids: vec![],
            source: vec![],
            vcpu_names: false,
        });
    }
    // Stopped tasks do not run or wait: the schedstat snapshots and the
    // recording then cover exactly the same stretch of their lives.
    signal_all(&w, libc::SIGSTOP);
    wait_stopped(&w);
    let before: Vec<(u64, u64)> = w.children.iter().map(|(_, c)| schedstat(c.id())).collect();
    let steal_before = host_steal_ns();

    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("acc.otrec");
    let opts = RecordOptions {
        targets: Targets {
            groups,
            everything: false,
            host_io: vec![],
        },
        output: Some(file.clone()),
        drain_every: Duration::from_millis(100),
        measure_overhead: false,
        mechanism,
        sample_hz: None,
        window: None,
        windows_done: None,
    };
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let rec = s.spawn(|| {
            record(
                &opts,
                &stop,
                Some(Duration::from_millis(3600)),
                &mut NoSink,
                &mut |_| {
                    signal_all(&w, libc::SIGCONT);
                },
            )
        });
        // Let them run ~3 s, then freeze them well before the recording ends.
        std::thread::sleep(Duration::from_millis(3200));
        signal_all(&w, libc::SIGSTOP);
        let summary = rec.join().expect("recorder thread").expect("recording works");
        eprintln!("{mechanism:?}: events {} lost {}", summary.events, summary.lost);
        assert_eq!(summary.lost, 0, "no events lost");
    });
    wait_stopped(&w);
    let after: Vec<(u64, u64)> = w.children.iter().map(|(_, c)| schedstat(c.id())).collect();
    // In a VM (this CI's kind) the kernel's task clock leaves out what the
    // hypervisor stole while a thread held its CPU (paravirt steal
    // accounting), while a switch-to-switch recording counts it as on-CPU:
    // allow for the steal of the stretch, rounded up to a tick.
    // SAFETY: sysconf has no preconditions.
    let tick = 1_000_000_000 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let steal = host_steal_ns().saturating_sub(steal_before);
    // /proc/stat truncates to ticks: a stretch can show none of a steal
    // just under one. On a host that never saw steal (bare metal), none.
    let steal_allowance = if steal_before > 0 { steal + tick } else { 0 };
    eprintln!("hypervisor steal during the recording: {steal} ns");

    let rec = Recording::read(&file).expect("read recording");
    assert_eq!(rec.meta.mechanism, format!("{mechanism:?}").to_lowercase());
    let a = ontime_sched::analyze(
        &rec,
        &AnalysisOptions {
            windows: vec![1_000_000, 100_000_000],
            series: false,
        },
    );
    eprintln!("notes: {:?}", a.notes);
    // Exact to 1 % when every switch reached the recorder. This VM's kernel
    // sometimes drops a switch event (BPF and perf alike, more under load);
    // the analysis then places the time by inference and states how much
    // (error_bound_ns, seen up to 6 % of a thread's on-CPU time in 3 s under
    // load). The test holds it to that claim.
    eprintln!("error bound {} ns", a.error_bound_ns);
    let tolerance = 0.01;
    let mut total_on = 0;
    for (i, (group, child)) in w.children.iter().enumerate() {
        let g = a.groups.iter().find(|g| &g.name == group).expect("group in report");
        let t = g
            .threads
            .iter()
            .find(|t| t.tid == child.id())
            .unwrap_or_else(|| panic!("thread {} in report", child.id()));
        let (on, delay) = (after[i].0 - before[i].0, after[i].1 - before[i].1);
        // It ran at all (about 1 s on an idle 2-CPU host; less when the
        // host is busy with other work, which changes nothing below).
        assert!(on > 100_000_000, "the workload ran ({on} ns)");
        within(
            t.on_cpu_ns,
            on,
            tolerance,
            a.error_bound_ns + steal_allowance,
            &format!("on-CPU of {}", child.id()),
        );
        within(
            t.run_delay_ns,
            delay,
            tolerance,
            a.error_bound_ns,
            &format!("run delay of {}", child.id()),
        );
        total_on += on;
    }
    // Six busy tasks on fewer cores: the tenants contended.
    for g in a.tenants() {
        assert!(g.contention.any.count > 0, "{} shows contention", g.name);
        // Window usages add up to the recorded on-CPU time.
        for u in &g.usage {
            let summed = u.mean.expect("windows") * u.windows as f64 * u.window_ns as f64;
            within(
                summed as u64,
                g.on_cpu_ns,
                0.001,
                0,
                &format!("{} windows of {} ns", g.name, u.window_ns),
            );
            assert!(u.max.expect("max") <= rec.meta.cpus as f64 + 1e-6);
        }
    }
    let cpus = rec.meta.cpus as u64;
    assert!(total_on <= cpus * 3_400_000_000, "no more CPU than the host has");
}
