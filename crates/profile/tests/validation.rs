//! Document 002's check on this host: three tenants pinned to one CPU,
//! each a compute program with two known functions that times itself.
//! Needs root (BPF, perf sampling) and a C compiler; skips elsewhere with
//! the reason.

use ontime_core::export::TextReport;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use ontime_testkit::skip;
use ontime_trace::recorder::{record, NoSink, RecordOptions};
use ontime_trace::recording::Recording;
use ontime_trace::targets::{TargetGroup, Targets};

/// Rounds and unit of work: about 0.4 s of CPU alone on this VM.
const ROUNDS: &str = "130";
const UNIT: &str = "1000000";

/// Compiles the compute program (frame pointers at -O0) into `dir`.
/// Root and the compute program built in a fresh directory (kept alive by
/// the caller), or a skip with its reason.
fn root_and_compute() -> Option<(tempfile::TempDir, PathBuf)> {
    if !ontime_testkit::root_or_skip("BPF recorder and perf sampling") {
        return None;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(bin) = build_compute(dir.path()) else {
        skip("no C compiler (cc) to build the compute program");
        return None;
    };
    Some((dir, bin))
}

fn build_compute(dir: &Path) -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/compute.c");
    let bin = dir.join("compute");
    let ok = Command::new("cc")
        .args(["-O0", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(bin)
}

fn last_cpu() -> usize {
    ontime_core::limits::online_cpus().max(1) - 1
}

/// A compute process pinned to `cpu`; with `wait`, it starts on a byte.
fn spawn_pinned(bin: &Path, cpu: usize, wait: bool) -> Child {
    let mut cmd = Command::new(bin);
    cmd.args([ROUNDS, UNIT]);
    if wait {
        cmd.arg("wait");
    }
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn().expect("spawn compute")
}

/// (elapsed, on-CPU, run delay) as the program printed them.
fn outcome(child: Child) -> (u64, u64, u64) {
    let out = child.wait_with_output().expect("compute ran");
    assert!(out.status.success(), "compute failed: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Vec<u64> = text.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    assert_eq!(v.len(), 3, "compute printed {text:?}");
    (v[0], v[1], v[2])
}

/// Kills what is still running when the test fails.
struct Reaper(Vec<Child>);
impl Drop for Reaper {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// (on-CPU, run delay) of a live task, from /proc/<pid>/schedstat.
fn schedstat(pid: u32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).expect("schedstat");
    let v: Vec<u64> = text.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    (v[0], v[1])
}

/// The hypervisor's steal of `cpu` so far (/proc/stat).
/// The unit of /proc/stat's counters (USER_HZ = 100).
const PROC_STAT_TICK_NS: u64 = 10_000_000;

fn hypervisor_steal_ns(cpu: usize) -> u64 {
    ontime_core::cputime::CpuTimes::of_cpu(cpu).map_or(0, |t| t.steal_ns)
}

/// The profiler's sampling rate in these tests (see the recording's
/// options).
const SAMPLE_HZ: u32 = 250;

#[test]
fn three_tenants_on_one_cpu_steal_two_thirds_and_correct_to_their_own_cpu_time() {
    let Some((dir, bin)) = root_and_compute() else {
        return;
    };
    let cpu = last_cpu();
    let mut reaper = Reaper((0..3).map(|_| spawn_pinned(&bin, cpu, true)).collect());
    let groups: Vec<TargetGroup> = reaper
        .0
        .iter()
        .enumerate()
        .map(|(i, c)| TargetGroup::process(&format!("t{i}"), c.id()))
        .collect();
    let file = dir.path().join("p.otrec");
    let opts = RecordOptions {
        targets: Targets::of(groups),
        output: Some(file.clone()),
        // Each sample costs ~20 us on this VM (bench/results.md): at 1 kHz
        // that is 2 % more CPU than the unsampled reference run alone, so
        // sample at 250 Hz (0.5 %).
        sample_hz: Some(SAMPLE_HZ),
        measure_overhead: false,
        ..Default::default()
    };
    let stop = AtomicBool::new(false);
    // The kernel's accounting when the recording starts: the programs wait
    // in read(2) by then, but their start-up (exec, loading, each behind
    // the ones spawned before on the same CPU) is already counted there.
    let pids: Vec<u32> = reaper.0.iter().map(Child::id).collect();
    let mut at_start: Vec<(u64, u64)> = Vec::new();
    // When the recording started and when each program was seen to have
    // exited: the time line of a tenant cannot be longer than that.
    let mut recording_from: Option<Instant> = None;
    let mut exited_at: Vec<Option<Instant>> = vec![None; pids.len()];
    let mut hv_steal_before = 0u64;
    let mut stdins: Vec<_> = reaper.0.iter_mut().map(|c| c.stdin.take().expect("stdin")).collect();
    let summary = std::thread::scope(|s| {
        let rec = s.spawn(|| {
            record(&opts, &stop, Some(Duration::from_secs(30)), &mut NoSink, &mut |_| {
                recording_from = Some(Instant::now());
                at_start = pids.iter().map(|&p| schedstat(p)).collect();
                hv_steal_before = hypervisor_steal_ns(cpu);
                for i in &mut stdins {
                    let _ = i.write_all(b"g");
                }
            })
        });
        // Wait for the three to finish, then stop the recording.
        loop {
            for (c, at) in reaper.0.iter_mut().zip(&mut exited_at) {
                if at.is_none() && c.try_wait().ok().flatten().is_some() {
                    *at = Some(Instant::now());
                }
            }
            if exited_at.iter().all(Option::is_some) || rec.is_finished() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(200));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        rec.join().expect("recorder thread").expect("recording works")
    });
    // What this VM's hypervisor took from the CPU meanwhile: the kernel's
    // on-CPU count leaves it out, the profiler's time line cannot.
    // /proc/stat counts in USER_HZ ticks (10 ms): the difference of two
    // readings is uncertain by one tick (a quiet CI run read 10 ms where
    // the corrected time was 21 ms above the kernel's count).
    let hv_steal = (hypervisor_steal_ns(cpu).saturating_sub(hv_steal_before) + PROC_STAT_TICK_NS) as f64;
    // About 1.2 s of the busy CPU at 250 Hz: some 300 samples.
    assert!(summary.samples > 150, "samples: {summary:?}");
    // (elapsed, on-CPU and run delay while recorded).
    let ran: Vec<(u64, u64, u64)> = std::mem::take(&mut reaper.0)
        .into_iter()
        .map(outcome)
        .zip(&at_start)
        .map(|((e, c, d), &(c0, d0))| (e, c - c0, d - d0))
        .collect();

    // Everything below is read after the processes exited: the recorded
    // mappings must still name their functions.
    let rec = Recording::read(&file).expect("read recording");
    let p = ontime_profile::profile(&rec).expect("profile");
    eprintln!(
        "{}",
        ontime_profile::ProfileText {
            report: &p.report,
            top: 10,
            view: ontime_profile::FunctionView::Inclusive,
        }
        .text()
    );
    let total_cpu: u64 = ran.iter().map(|r| r.1).sum();
    // This VM's kernel drops a switch event now and then; the analysis
    // places that time by inference and states how much: the comparisons
    // with the kernel's own accounting allow for it.
    let slack = p.report.profile.error_bound_ns as f64;
    eprintln!("error bound {slack} ns");
    for (i, &(elapsed, on_cpu, run_delay)) in ran.iter().enumerate() {
        let name = format!("t{i}");
        let t = p
            .report
            .tenants
            .iter()
            .find(|t| t.name == name)
            .expect("tenant in the report");
        let steal = t.steal_runqueue_ns as f64;
        let apparent = t.apparent_ns as f64;
        eprintln!(
            "{name}: elapsed {elapsed} apparent {apparent} steal {steal} run delay {run_delay} run {} on-CPU {on_cpu} idle {} others' CPU {} corrected {} by {:?}",
            t.run_ns,
            t.idle_ns,
            total_cpu - on_cpu,
            t.corrected_ns,
            t.steal_by
        );
        // Steal is at least the two others' two thirds of the time (more
        // when the host's own work also ran on that CPU).
        let share = steal / apparent;
        assert!((0.6..1.0).contains(&share), "{name}: steal share {share:.3}");
        // The time line covers the program's own elapsed time, plus its
        // wake-up and exit outside its clock (each a wait behind the others,
        // longer the busier the host: no ratio bounds them), and no more
        // than the program existed while recorded.
        let lifetime = exited_at[i].zip(recording_from).map_or(f64::INFINITY, |(end, start)| {
            end.duration_since(start).as_nanos() as f64
        });
        assert!(
            apparent + slack >= elapsed as f64 && apparent <= lifetime + slack,
            "{name}: apparent {apparent} vs elapsed {elapsed} and lifetime while recorded {lifetime}"
        );
        // Steal equals the kernel's run delay for the task, and about the
        // other tenants' CPU time (the host's own work on that CPU aside;
        // 3 %: their CPU while this one had not yet been woken by its byte
        // or had already exited is not its steal; and what the hypervisor
        // took while another tenant held the CPU is wall time this one
        // waited, which the kernel's count of their CPU leaves out).
        // The program reads its schedstat when its clock stops; a wait
        // behind the others between that read and its exit is steal on the
        // time line but not in the run delay it printed. That wait lies
        // outside its clock, in apparent - elapsed (a CI run with stress-ng
        // beside it: steal 23.5 ms above run delay, 24.5 ms outside).
        let after_read = (apparent - elapsed as f64).max(0.0);
        let tolerance = 0.01 * run_delay as f64 + slack;
        assert!(
            (run_delay as f64 - tolerance..=run_delay as f64 + after_read + tolerance).contains(&steal),
            "{name}: steal {steal} vs schedstat run delay {run_delay} (+ up to {after_read} outside its clock)"
        );
        let by_tenants = t.steal_by.other_tenant_ns as f64;
        let others = (total_cpu - on_cpu) as f64;
        // What the others ran after this one exited, until the last did,
        // is their CPU but not its steal (a CI run beside a build: the
        // first to exit went 74 ms before the last, 64 ms below their
        // CPU); the exits are seen to within the loop's 20 ms.
        let last_exit = exited_at.iter().flatten().max().copied();
        let after_exit = exited_at[i]
            .zip(last_exit)
            .map_or(0.0, |(mine, last)| last.duration_since(mine).as_nanos() as f64 + 20e6);
        let tolerance = 0.03 * others + slack + hv_steal;
        assert!(
            by_tenants <= others + tolerance && by_tenants >= others - after_exit - tolerance,
            "{name}: steal by other tenants {by_tenants} vs their CPU {others}, of it up to {after_exit} after its exit (hypervisor steal on the CPU {hv_steal})"
        );
        // Corrected time (document 002: apparent minus steal) is the time
        // the program had a CPU: the kernel's own on-CPU count for it, which
        // leaves out what this VM's hypervisor took while it ran (measured
        // from /proc/stat; on a quiet host about 2 %).
        // As for steal, the program's own on-CPU count stops at its read;
        // what it ran after (its exit) is on the time line, within
        // apparent - elapsed (a CI run: 7.4 ms above a 348 ms count).
        let corrected = apparent - steal;
        let tolerance = 0.02 * on_cpu as f64 + slack + hv_steal;
        assert!(
            (on_cpu as f64 - tolerance..=on_cpu as f64 + after_read + tolerance).contains(&corrected),
            "{name}: corrected {corrected} vs the kernel's on-CPU {on_cpu} (+ up to {after_read} outside its clock; hypervisor steal on the CPU {hv_steal})"
        );
        // Whether this also equals the time alone (document 002: within
        // 3 %) compares two runs taken at different moments on a VM whose
        // speed moves by a third between runs: bench/profile_correction.py
        // measures it with its spread.
    }
    // The two known functions, 2:1 by their work, named after the exit.
    let f = |name: &str| {
        p.report
            .functions
            .iter()
            .filter(|r| r.function == name)
            .map(|r| r.inclusive.on_cpu_ns)
            .sum::<u64>() as f64
    };
    let (a, b) = (f("compute_a"), f("compute_b"));
    assert!(a > 0.0 && b > 0.0, "compute_a {a} compute_b {b} named");
    // Each function's on-CPU time is its samples times the period, so
    // compute_a's share of the two is a proportion of n samples, 2/3 by
    // the work: three standard errors allowed. About 330 samples when the
    // three have the CPU to themselves (+-0.08; the ratio 2:1 within
    // 1.4-2.9); a busy CI host had them sampled out of phase with their
    // rounds and read 2.67, which a fixed +-0.25 on the ratio (one
    // standard error) refused.
    let n = (a + b) * SAMPLE_HZ as f64 / 1e9;
    let share = a / (a + b);
    let allowed = 3.0 * (2.0 / 9.0 / n).sqrt();
    assert!(
        (share - 2.0 / 3.0).abs() <= allowed,
        "compute_a : compute_b = {:.2} (share {share:.3} of {n:.0} samples, 2/3 +- {allowed:.3} allowed)",
        a / b
    );

    // The pprof opens in go tool pprof and shows steal by function.
    let pb = dir.path().join("p.pb.gz");
    p.write_pprof(&pb).expect("write pprof");
    match Command::new("go")
        .args(["tool", "pprof", "-top", "-sample_index=steal"])
        .arg(&pb)
        .output()
    {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "go tool pprof failed: {out:?}");
            assert!(text.contains("Type: steal") && text.contains("spin"), "{text}");
        }
        Err(_) => skip("go tool pprof not installed (scripts/setup.sh installs golang-go)"),
    }
}

/// Processes that live shorter than a drain (100 ms) are symbolised from
/// the mappings the kernel reported when they mapped their files.
#[test]
fn short_lived_processes_are_still_named() {
    let Some((dir, bin)) = root_and_compute() else {
        return;
    };
    // A shell that waits for a byte, then runs forty 5 ms computations.
    let script = format!(
        "read _; for i in $(seq 40); do {} 2 1000000 >/dev/null; done",
        bin.display()
    );
    let mut reaper = Reaper(vec![Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .spawn()
        .expect("spawn sh")]);
    let mut stdin = reaper.0[0].stdin.take().expect("stdin");
    let file = dir.path().join("short.otrec");
    let opts = RecordOptions {
        targets: Targets::of(vec![TargetGroup::process("loop", reaper.0[0].id())]),
        output: Some(file.clone()),
        sample_hz: Some(1000),
        measure_overhead: false,
        ..Default::default()
    };
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let rec = s.spawn(|| {
            record(&opts, &stop, Some(Duration::from_secs(30)), &mut NoSink, &mut |_| {
                let _ = stdin.write_all(b"\n");
            })
        });
        let sh = &mut reaper.0[0];
        while sh.try_wait().ok().flatten().is_none() && !rec.is_finished() {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(200));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        rec.join().expect("recorder").expect("recording");
    });
    let rec = Recording::read(&file).expect("read");
    let pids: std::collections::HashSet<u32> = rec.samples.samples.iter().map(|s| s.pid).collect();
    assert!(pids.len() > 10, "samples of many short processes: {}", pids.len());
    // Most were gone before the recorder could read /proc: their mappings
    // are the kernel's reports (a recorded process without a comm).
    let mapped = pids
        .iter()
        .filter(|p| rec.maps.get(p).is_some_and(|m| !m.maps.is_empty()))
        .count();
    let reported = pids
        .iter()
        .filter(|p| rec.maps.get(p).is_some_and(|m| m.comm.is_empty() && !m.maps.is_empty()))
        .count();
    eprintln!(
        "{} sampled processes, {mapped} with mappings, {reported} from the kernel's reports",
        pids.len()
    );
    // A process forked without exec (the shell's $(...)) has none of its
    // own: its parent's are used, through the fork events.
    assert!(
        mapped + 2 >= pids.len() && reported > 10,
        "mappings of most sampled processes"
    );
    let p = ontime_profile::profile(&rec).expect("profile");
    let named = |f: &str| {
        p.report
            .functions
            .iter()
            .any(|r| r.function == f && r.inclusive.samples > 0)
    };
    assert!(
        named("compute_a") && named("compute_b"),
        "{:?}",
        p.report.functions.iter().map(|r| &r.function).collect::<Vec<_>>()
    );
}
