//! `ontime lab` end to end: a short scenario produces a report; a SIGKILLed
//! runner's leftovers are removed by `lab clean`; bad scenarios are refused
//! before anything is created. Root tests skip elsewhere with a reason; they
//! share the lab's global names, so they run one at a time.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

mod common;
use common::{leftovers, ontime, CleanOnDrop};

fn root_or_skip() -> bool {
    common::lab_root_or_skip(&[])
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Runs a scenario with `--report`; returns the temp dir (keep it), the
/// scenario file and the results directory.
fn run_lab(text: &str) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let sc = write(dir.path(), "scenario.toml", text);
    let results = dir.path().join("results");
    let out = ontime()
        .args(["lab", "run"])
        .arg(&sc)
        .arg("-o")
        .arg(&results)
        .arg("--report")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (dir, sc, results)
}

fn rr_timeslice() -> String {
    std::fs::read_to_string("/proc/sys/kernel/sched_rr_timeslice_ms")
        .unwrap()
        .trim()
        .to_string()
}

fn read_json(p: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[test]
fn short_crawl_scenario_produces_a_report() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip() {
        return;
    }
    let _clean = CleanOnDrop;
    let (_dir, sc, results) = run_lab(
        "name = 'short'\nduration = '3s'\n[tenant]\ncount = 1\n[tenant.crawl]\nrate = 50\n[observe]\nprofile = 500\n[sweep]\n\"tenant.count\" = [1, 2]\n[targets]\nmax = '10s'\n\"p99\" = '1ns'\n",
    );
    // Stacks were sampled: each run has its profile, and the report says
    // where the worst run's tenants' time went.
    for run in ["000-count=1-rep1", "001-count=2-rep1"] {
        let p = read_json(&results.join("runs").join(run).join("profile.json"));
        assert_eq!(p["profile"]["sample_period_ns"], 2_000_000, "{run}");
        assert!(p["tenants"].as_array().is_some_and(|t| !t.is_empty()), "{run}: {p}");
        assert!(results.join("runs").join(run).join("profile.pb.gz").exists());
    }
    let html = std::fs::read_to_string(results.join("report/report.html")).unwrap();
    // The verdict comes first: a 1 ns p99 target is missed by every run,
    // and the worst miss names a tenant and its measured value.
    let verdict = html.find("<h2 id=verdict>").expect("no verdict");
    assert!(verdict < html.find("<h2>Environment").unwrap());
    assert!(
        html.contains("<b>missed</b>") && !html.contains("<b>met</b>"),
        "verdict wrong"
    );
    assert!(html.contains(": p99 ") && html.contains("&gt; 1 ns"), "no worst miss");
    assert!(
        html.contains("Interval error vs tenant.count"),
        "no figure in the report"
    );
    assert!(html.contains("not instruction emulation"), "the model note is missing");
    assert!(html.contains("relay delay measured"));
    assert!(
        html.contains("n/a"),
        "3 s runs cannot support p99.999: the report must say so"
    );
    assert!(results.join("report/figure-1.png").exists());
    for run in ["000-count=1-rep1", "001-count=2-rep1"] {
        let rec = read_json(&results.join("runs").join(run).join("run.json"));
        assert_eq!(rec["complete"], true, "{run}: {rec}");
    }
    // Every crawl run reports its gateway's receive stamps, kernel vs
    // handler, and the report shows them.
    let rec = read_json(&results.join("runs/001-count=2-rep1/run.json"));
    let st = &rec["gateway"]["stamps"];
    assert_eq!(
        st["kernel"].as_u64().unwrap() + st["user"].as_u64().unwrap(),
        rec["gateway"]["requests"].as_u64().unwrap(),
        "{st}"
    );
    assert!(st["kernel"].as_u64().unwrap() > 0, "kernel stamps on veth: {st}");
    assert!(html.contains("gateway receive stamps"));
    assert!(html.contains("Where the tenants' time went"), "no profile section");
    let t1 = read_json(&results.join("runs/001-count=2-rep1/t1.json"));
    assert_eq!(t1["polls"]["planned"], 150);
    assert_eq!(t1["missed"], 0, "{}", t1["polls"]);
    // --resume skips both.
    let again = ontime()
        .args(["lab", "run"])
        .arg(&sc)
        .arg("-o")
        .arg(&results)
        .arg("--resume")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&again.stderr).contains("0 run(s) done, 2 skipped"));
    assert!(leftovers().contains("nothing of the lab's is left"), "{}", leftovers());

    // Calibrate the simulator from these measured runs, simulate the same
    // scenario into the results, and the report draws both side by side.
    let cal = results.join("calibration.json");
    let out = ontime().args(["sim", "calibrate"]).arg(&results).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let c = read_json(&cal);
    assert_eq!(c["quiet_runs"].as_array().unwrap().len(), 2, "{c}");
    assert!(c["noise_samples"].as_u64().unwrap() >= 200, "{c}");
    assert!(c["host_noise"]["points"].as_array().unwrap().len() >= 3, "{c}");
    assert!(c["cpu_per_poll_overhead_ns"].as_u64().unwrap() > 0, "{c}");
    // Runs record the host's CPU: with the scheduler view, the host's
    // other work per poll is fitted too.
    let rec = read_json(&results.join("runs/000-count=1-rep1/run.json"));
    assert!(rec["host_cpu"]["wall_ns"].as_u64().unwrap() > 2_000_000_000, "{rec}");
    if c["io_cost_samples"].as_u64().unwrap() > 0 {
        assert_eq!(c["host_work_samples"], 2, "{c}");
    }
    // Where the kernel queued waking threads whose last CPU was busy
    // while another idled, when the recordings saw any.
    if c["wake_stay_samples"].as_u64().unwrap() > 0 {
        let share = c["wake_stay_share"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&share), "{c}");
    }
    if c["wake_preempt_samples"].as_u64().unwrap() > 0 {
        let share = c["wake_preempt_share"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&share), "{c}");
    }
    let out = ontime()
        .arg("sim")
        .arg(&sc)
        .arg("--calibration")
        .arg(&cal)
        .arg("--into")
        .arg(&results)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rec = read_json(&results.join("runs/sim-linux-001-count=2-rep1/run.json"));
    assert_eq!(rec["simulated"]["host_noise"], true, "{rec}");
    assert_eq!(rec["simulated"]["wake_stay_share"], c["wake_stay_share"], "{rec}");
    assert_eq!(rec["simulated"]["wake_preempt_share"], c["wake_preempt_share"], "{rec}");
    assert_eq!(rec["simulated"]["starts_measured"], true, "{rec}");
    let t1 = read_json(&results.join("runs/sim-linux-001-count=2-rep1/t1.json"));
    assert!(t1["polls"].as_u64().unwrap() >= 140, "{t1}");
    // The scheduler view of a simulated run comes from the engine's
    // switches through the same analysis as a recording's.
    let view = read_json(&results.join("runs/sim-linux-001-count=2-rep1/observe.json"));
    let groups = view["groups"].as_array().unwrap();
    assert_eq!(groups.iter().filter(|g| g["kind"] == "tenant").count(), 2, "{view}");
    assert!(groups[0]["on_cpu_ns"].as_u64().unwrap() > 0, "{view}");
    // ... and its events are a recording observe reads like a lab run's.
    let out = ontime()
        .args(["observe", "report", "--json"])
        .arg(results.join("runs/sim-linux-001-count=2-rep1/observe.otrec"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let again: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let on_cpu = |v: &serde_json::Value| -> Vec<u64> {
        v["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["on_cpu_ns"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(
        on_cpu(&again),
        on_cpu(&view),
        "the recording analyses as the engine's view did"
    );
    let out = ontime().args(["lab", "report"]).arg(&results).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let html = std::fs::read_to_string(results.join("report/report.html")).unwrap();
    assert!(html.contains("source=sim:linux") && html.contains("source=lab"));
    assert!(html.contains("Simulated, not measured"));
    assert!(html.contains("2 of 4 runs were simulated"), "no note on simulated runs");

    // A record with a field of the wrong type is refused, naming the file,
    // instead of reported as zero samples.
    let rec_path = results.join("runs/000-count=1-rep1/run.json");
    let text = std::fs::read_to_string(&rec_path).unwrap();
    std::fs::write(
        &rec_path,
        text.replacen("\"complete\": true", "\"complete\": \"yes\"", 1),
    )
    .unwrap();
    let out = ontime().args(["lab", "report"]).arg(&results).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("000-count=1-rep1/run.json") && err.contains("complete"),
        "{err}"
    );
}

#[test]
fn short_cyclic_scenario_plots_a_histogram() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip() {
        return;
    }
    let _clean = CleanOnDrop;
    let rr_before = rr_timeslice();
    let changed = if rr_before == "7" { 9 } else { 7 };
    let (_dir, _sc, results) = run_lab(&format!(
        "name = 'cyc'\nduration = '2s'\n[host]\nrr_timeslice = '{changed}ms'\n[tenant]\ncount = 1\npolicy = 'fifo:80'\n[tenant.cyclic]\ninterval = '1ms'\n"
    ));
    // The RR time slice was in force for the run and is back after it.
    let rec = read_json(&results.join("runs/000-rep1/run.json"));
    assert_eq!(rec["environment"]["rr_timeslice_ms"], changed, "{}", rec["environment"]);
    assert_eq!(rr_timeslice(), rr_before);
    let html = std::fs::read_to_string(results.join("report/report.html")).unwrap();
    assert!(html.contains("Wake-up latency histogram"));
    let t0 = read_json(&results.join("runs/000-rep1/t0.json"));
    assert_eq!(t0["latency"]["count"], 2000);
    // Pooled from the exact histogram log, which every cyclic tenant writes.
    assert!(results.join("runs/000-rep1/t0.hlog").exists());
    assert!(!html.contains("no histogram log"), "pooled from log bins");
    assert!(leftovers().contains("nothing of the lab's is left"));
}

#[test]
fn sigkilled_runner_leaves_what_clean_removes() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip() {
        return;
    }
    let _clean = CleanOnDrop;
    // The run changes the RR time slice; killed, it cannot put it back:
    // `lab clean` must.
    let rr_before = rr_timeslice();
    let changed = if rr_before == "7" { 9 } else { 7 };
    let dir = tempfile::tempdir().unwrap();
    let sc = write(
        dir.path(),
        "long.toml",
        &format!("name = 'long'\nduration = '60s'\n[host]\nrr_timeslice = '{changed}ms'\n[tenant]\ncount = 2\nmemory = '128M'\n[tenant.crawl]\nrate = 20\n[[load]]\nprofile = 'net'\nplace = 'tenants'\n"),
    );
    let mut runner = common::spawn_lab(&sc, &dir.path().join("r"));
    // Ready once both tenants' probes and the load run: all that `lab
    // clean` must then find and stop.
    let running = |pattern: &str| {
        Command::new("pgrep")
            .args(["-f", pattern])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).lines().count())
            .unwrap_or(0)
    };
    ontime_testkit::wait_until("the lab's probes and load", Duration::from_secs(60), || {
        running("ontime probe .*/t[0-9]*.probe.json") >= 2 && running("stress-ng --udp") >= 1
    });
    // A second lab while this one runs is refused before it makes anything.
    let second = ontime()
        .args(["lab", "run"])
        .arg(&sc)
        .arg("-o")
        .arg(dir.path().join("r2"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "{err}");
    assert!(
        err.contains(&format!("a lab is already running (pid {})", runner.id())),
        "{err}"
    );
    assert!(
        !dir.path().join("r2").exists(),
        "the refused run made its results directory"
    );
    runner.kill().unwrap();
    runner.wait().unwrap();
    let before = leftovers();
    assert!(
        before.contains("would remove"),
        "a SIGKILLed runner should leave namespaces behind: {before}"
    );
    assert_eq!(rr_timeslice(), changed.to_string(), "the run set the RR time slice");
    assert!(before.contains("sched_rr_timeslice_ms"), "{before}");
    let out = ontime().args(["lab", "clean"]).output().unwrap();
    assert!(out.status.success());
    assert_eq!(rr_timeslice(), rr_before, "lab clean puts the RR time slice back");
    assert!(leftovers().contains("nothing of the lab's is left"), "{}", leftovers());
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&ns.stdout).contains("ontime"));
    let ps = Command::new("pgrep")
        .args(["-f", "ontime probe .*/t[0-9]*.probe.json"])
        .output()
        .unwrap();
    assert!(
        ps.stdout.is_empty(),
        "probes survived: {}",
        String::from_utf8_lossy(&ps.stdout)
    );
    let sn = Command::new("pgrep").args(["-f", "stress-ng --udp"]).output().unwrap();
    assert!(
        sn.stdout.is_empty(),
        "loads survived: {}",
        String::from_utf8_lossy(&sn.stdout)
    );
}

/// `ontime lab run SC -o RESULTS`, returned once a tenant's probe runs.
fn lab_run_until_its_probe_runs(sc: &Path, results: &Path) -> ontime_testkit::KillOnDrop {
    let runner = ontime_testkit::KillOnDrop::spawn(ontime().args(["lab", "run"]).arg(sc).arg("-o").arg(results));
    ontime_testkit::wait_until("the tenant's probe", Duration::from_secs(60), || {
        Command::new("pgrep")
            .args(["-f", "ontime probe .*/t[0-9]*.probe.json"])
            .output()
            .is_ok_and(|o| !o.stdout.is_empty())
    });
    runner
}

/// Defect 4: `lab clean` while a lab ran destroyed it, and the victim
/// printed "missed 0" and exited 0 with `complete: false, error: null`.
#[test]
fn lab_clean_refuses_while_a_lab_runs_and_a_destroyed_run_fails_loudly() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip() {
        return;
    }
    let _clean = CleanOnDrop;
    let dir = tempfile::tempdir().unwrap();
    let sc = write(
        dir.path(),
        "victim.toml",
        "name = 'victim'\nduration = '60s'\n[tenant]\ncount = 1\n[tenant.crawl]\nrate = 20\n",
    );
    let results = dir.path().join("r");
    let runner = lab_run_until_its_probe_runs(&sc, &results);
    let refused = ontime().args(["lab", "clean"]).output().unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("a lab is running (pid {})", runner.id())) && err.contains("--force"),
        "{err}"
    );
    assert!(
        Path::new("/run/netns/ontime-t0").exists(),
        "the refused clean left the lab standing"
    );
    let forced = ontime().args(["lab", "clean", "--force"]).output().unwrap();
    assert!(forced.status.success(), "{}", String::from_utf8_lossy(&forced.stderr));
    let out = runner.wait_output(Duration::from_secs(120));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the destroyed run exited 0: {err}");
    assert!(err.contains("failed"), "{err}");
    eprintln!("victim said: {err}");
    let rec = read_json(&results.join("runs/000-rep1/run.json"));
    assert_eq!(rec["complete"], false);
    let e = rec["error"].as_str().unwrap_or_default();
    assert!(e.contains("destroyed") || e.contains("wrote no result"), "{rec}");
}

/// Ctrl-C during the last run of `lab run` printed "[3/3] done ... 3
/// run(s) done" with that run's record incomplete, and exited 0. The run's
/// line and the summary now say it was interrupted, and the exit code is
/// Ctrl-C's, 130.
#[test]
fn an_interrupted_lab_run_says_so_and_exits_130() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip() {
        return;
    }
    let _clean = CleanOnDrop;
    let dir = tempfile::tempdir().unwrap();
    let sc = write(
        dir.path(),
        "cut.toml",
        "name = 'cut'\nduration = '60s'\n[tenant]\ncount = 1\n[tenant.crawl]\nrate = 20\n[observe]\nrecorder = 'off'\n",
    );
    let results = dir.path().join("r");
    let runner = lab_run_until_its_probe_runs(&sc, &results);
    runner.signal(libc::SIGINT);
    let out = runner.wait_output(Duration::from_secs(120));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("[1/1] interrupted, incomplete"), "{err}");
    assert!(err.contains("interrupted: 0 of 1 runs complete"), "{err}");
    assert!(!err.contains("run(s) done"), "{err}");
    let rec = read_json(&results.join("runs/000-rep1/run.json"));
    assert_eq!(rec["complete"], false, "{rec}");
    assert!(rec["error"].is_null(), "a stop is not an error: {rec}");
    assert!(leftovers().contains("nothing of the lab's is left"), "{}", leftovers());
}

#[test]
fn bad_scenarios_are_refused_before_anything_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let sc = write(
        dir.path(),
        "bad.toml",
        "name = 'bad'\nduration = '3s'\n[tenant]\ncount = 1\n[tenant.crawl]\nrate = -1\n",
    );
    let out = ontime().args(["lab", "run"]).arg(&sc).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("bad.toml") && err.contains("tenant.crawl.rate"), "{err}");
    let out = ontime().args(["lab", "run", "/nonexistent.toml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    // I/O tenants: each mistake named before anything is made.
    for (text, says) in [
        ("[tenant.io]\nsize = '64M'\n", "add [tenant.disk]"),
        (
            "[tenant.disk]\nsize = '1G'\n[tenant.io]\nsize = '64M'\ntool = 'dd'\nrw = 'randread'\n",
            "use one of read, write",
        ),
        (
            "swap = 'memory'\n[tenant.disk]\nsize = '1G'\n[tenant.io]\nsize = '64M'\n",
            "needs tenant.memory",
        ),
        ("[tenant.disk]\nsize = '1G'\n[tenant.io]\nsize = 'lots'\n", "io.size"),
    ] {
        let sc = write(
            dir.path(),
            "io.toml",
            &format!("name = 'bad'\nduration = '3s'\n[tenant]\ncount = 1\n{text}"),
        );
        let out = ontime().args(["lab", "run"]).arg(&sc).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}: {err}");
        assert!(err.contains(says), "{text}: {err}");
    }
}

/// Document 004 in small: two I/O tenants (fio on their disks, a memory
/// limit, a swap file), buffered and direct; every run has the tool's
/// result and the layered analysis; direct I/O bypasses the guest cache;
/// the report and `io advise` show the sweep; nothing is left after.
#[test]
fn io_tenants_run_fio_on_their_disks_with_the_layers_recorded() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip() {
        return;
    }
    if !Command::new("sh")
        .args(["-c", "command -v fio"])
        .status()
        .is_ok_and(|s| s.success())
    {
        ontime_testkit::skip("fio is not installed (scripts/setup.sh installs it)");
        return;
    }
    let _clean = CleanOnDrop;
    let (_dir, _sc, results) = run_lab(
        "name = 'io'\nduration = '2s'\n[tenant]\ncount = 2\nmemory = '96M'\nswap = '16M'\n[tenant.disk]\nsize = '256M'\n\
[tenant.io]\ntool = 'fio'\nrw = 'randread'\nsize = '32M'\nbs = '4k'\ndirect = false\n[observe]\nrecorder = 'off'\nio = true\n\
[sweep]\n\"tenant.io.direct\" = [false, true]\n",
    );
    for (run, direct) in [("000-direct=false-rep1", false), ("001-direct=true-rep1", true)] {
        let d = results.join("runs").join(run);
        let rec = read_json(&d.join("run.json"));
        assert_eq!(rec["complete"], true, "{run}: {rec}");
        for i in 0..2 {
            let t = read_json(&d.join(format!("t{i}.json")));
            assert_eq!(t["class"], "fio randread", "{run}");
            assert!(t["throughput_bps"].as_f64().unwrap() > 0.0, "{run}: {t}");
            assert!(t["latency"]["count"].as_u64().unwrap() > 0, "{run}: {t}");
        }
        let io = read_json(&d.join("io.json"));
        assert_eq!(io["lost"], 0, "{run}");
        let tenants = io["tenants"].as_array().unwrap();
        assert_eq!(tenants.len(), 2, "{run}");
        for t in tenants {
            let app = t["application"]["read"]["bytes"].as_u64().unwrap();
            let virt = t["virtual_disk"]["read"]["bytes"].as_u64().unwrap();
            assert!(app > 0, "{run}: {t}");
            let guest = t["absorption"]["guest_cache_reads"]["share"].as_f64().unwrap();
            if direct {
                // O_DIRECT: every byte read crosses the virtual disk.
                assert!(virt >= app * 99 / 100, "{run}: virtual {virt} < application {app}");
                assert!(guest < 0.05, "{run}: {guest}");
            } else {
                // 32 MiB in 96 MiB of memory, laid out through the cache.
                assert!(guest > 0.5, "{run}: the guest cache absorbed only {guest}");
            }
            assert_eq!(t["cache"]["memory_limit"], 96 << 20, "{run}");
        }
        assert!(d.join("io/io-t0.png").exists(), "{run}: no figure");
    }
    let html = std::fs::read_to_string(results.join("report/report.html")).unwrap();
    assert!(html.contains("I/O (document 004)") && html.contains("Advice (ontime io advise)"));
    assert!(html.contains("fio randread: throughput vs tenant.io.direct"));
    let out = ontime().args(["io", "advise"]).arg(&results).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("fio randread") && text.contains("buffered"), "{text}");
    // The swap files went with the disks.
    let swaps = std::fs::read_to_string("/proc/swaps").unwrap();
    assert!(!swaps.contains("ontime-disk"), "{swaps}");
    assert!(leftovers().contains("nothing"), "{}", leftovers());
}

/// A tenant's disk (document 004): an image through a loop device, ext4,
/// mounted only in the tenant's mount namespace; what the tenant writes
/// reaches the loop device; teardown leaves nothing, and neither does
/// `lab clean` after a lab that was never torn down (a kill).
#[test]
fn a_tenant_disk_is_mounted_only_inside_the_tenant_and_removed_after() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip() {
        return;
    }
    let _clean = CleanOnDrop;
    use ontime_lab::disk::DiskSpec;
    use ontime_lab::sandbox::{Lab, TenantSpec};
    let spec = TenantSpec {
        disk: Some(DiskSpec {
            size: 64 << 20,
            direct: false,
            swap: None,
        }),
        ..Default::default()
    };
    let lab = Lab::create(std::slice::from_ref(&spec)).expect("a lab with a disk");
    let t = &lab.tenants[0];
    let disk = t.disk.clone().expect("the tenant has its disk");
    let mut cmd = Command::new("sh");
    cmd.args([
        "-c",
        "dd if=/dev/zero of=/mnt/ontime-disk/f bs=1M count=8 conv=fsync 2>/dev/null && grep -c ' /mnt/ontime-disk ' /proc/self/mountinfo",
    ])
    .stdout(Stdio::piped());
    let mut child = t
        .spawn(&mut cmd, false, Default::default())
        .expect("spawn in the tenant");
    let out = child.child_mut().and_then(|c| c.stdout.take()).expect("stdout");
    let text = std::io::read_to_string(out).unwrap_or_default();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "dd in the tenant did not finish"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "dd in the tenant failed: {text}");
    assert_eq!(text.trim(), "1", "mounted inside the tenant");
    let host = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!host.contains(" /mnt/ontime-disk "), "not mounted on the host");
    let stat = std::fs::read_to_string(format!("/sys/block/{}/stat", disk.block_name())).unwrap();
    let sectors_written: u64 = stat.split_whitespace().nth(6).and_then(|v| v.parse().ok()).unwrap_or(0);
    assert!(
        sectors_written >= 8 << 11,
        "8 MiB reached the loop device: {sectors_written} sectors"
    );
    drop(child);
    lab.destroy();
    assert!(!disk.image.exists(), "image removed");
    assert!(
        !std::fs::read_to_string(format!("/sys/block/{}/loop/backing_file", disk.block_name()))
            .unwrap_or_default()
            .contains("ontime"),
        "loop device detached"
    );
    assert!(leftovers().contains("nothing of the lab's is left"), "{}", leftovers());

    // Never torn down (as after a SIGKILL): lab clean finds and removes it.
    let lab = Lab::create(&[spec]).expect("a lab with a disk");
    std::mem::forget(lab);
    let found = leftovers();
    assert!(
        found.contains("1 disk(s) (1 loop device(s), 1 mount namespace(s))"),
        "{found}"
    );
    let out = ontime().args(["lab", "clean"]).output().unwrap();
    assert!(out.status.success());
    assert!(leftovers().contains("nothing of the lab's is left"), "{}", leftovers());
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(ontime_core::names::MNTNS_DIR), "no mount left behind");
}

/// Ground truth (docs/explain.md): SCHED_FIFO bursts injected on the
/// crawler tenant's CPU; the run's truth.json scores the attribution of
/// the late polls inside them, and the largest share is the right cause
/// naming the injector. Who and which cause only, never timings; the
/// Markdown report prints the matrix.
#[test]
fn injected_cpu_bursts_are_charged_to_the_injector() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip() {
        return;
    }
    if ontime_core::limits::online_cpus() < 2 {
        ontime_testkit::skip("needs two CPUs (the tenant and its bursts on CPU 1)");
        return;
    }
    let _clean = CleanOnDrop;
    let (_dir, _sc, results) = run_lab(
        "name = 'truth'\nduration = '6s'\n[tenant]\ncount = 1\nvcpus = 1\ncpuset = '1'\n\
[tenant.crawl]\nrate = 200\n[observe]\nrecorder = 'ontime'\n[targets]\n'p99.9' = '5ms'\n\
[[inject]]\ncause = 'cpu-burst'\nlength = '60ms..80ms'\nevery = '1s'\nstart_after = '1s'\n",
    );
    let run = results.join("runs/000-rep1");
    right_is_largest(&run, "cpu-burst");
    let md = ontime()
        .args(["lab", "report"])
        .arg(&results)
        .arg("--markdown")
        .output()
        .unwrap();
    let md = String::from_utf8_lossy(&md.stdout);
    assert!(md.contains("| cpu-burst |"), "{md}");
    assert!(
        md.contains("behind ontime-burst"),
        "the why table names the injector: {md}"
    );
    // The run's Perfetto trace decodes with Perfetto's own definitions
    // (scripts/setup.sh installs them) and names the injector.
    let python = "/var/cache/ontime/perfetto/bin/python";
    if !Path::new(python).exists() {
        ontime_testkit::skip("Perfetto's definitions are not installed (scripts/setup.sh installs them)");
        return;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/perfetto-check.py");
    let out = Command::new(python)
        .arg(script)
        .arg(run.join("trace.pftrace"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(got["switches"].as_u64().unwrap() > 0, "{got}");
    assert!(
        got["slices"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"].as_str().unwrap_or("").contains("behind ontime-burst")),
        "{got}"
    );
}

/// With the flight recorder on, a run keeps only the windows around its
/// late intervals, and its late polls, and their requests late at the
/// gateway, are still explained on them, the injector named. Late is over 30 ms, so that only the 60-80 ms bursts
/// trigger it on a busy host (a crawler on a shared CPU sees 5 ms often).
#[test]
fn the_flight_recorder_keeps_the_windows_around_late_polls_and_explains_them() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip() {
        return;
    }
    if ontime_core::limits::online_cpus() < 2 {
        ontime_testkit::skip("needs two CPUs (the tenant and its bursts on CPU 1)");
        return;
    }
    let _clean = CleanOnDrop;
    let (_dir, _sc, results) = run_lab(
        "name = 'flight'\nduration = '14s'\n[tenant]\ncount = 1\nvcpus = 1\ncpuset = '1'\n\
[tenant.crawl]\nrate = 200\n[observe]\nrecorder = 'ontime'\nflight = 'on'\nring = '3s'\nkeep_around = '0s'\n\
[targets]\n'p99.9' = '30ms'\n\
[[inject]]\ncause = 'cpu-burst'\nlength = '60ms..80ms'\nevery = '5s'\nstart_after = '2s'\n",
    );
    let run = results.join("runs/000-rep1");
    let record = read_json(&run.join("run.json"));
    let flight = &record["observe"]["flight"];
    let (windows, kept) = (flight["windows"].as_u64().unwrap(), flight["kept"].as_u64().unwrap());
    assert!(flight["triggers"].as_u64().unwrap() >= 2, "{flight:#}");
    assert!(
        kept > 0 && kept < windows,
        "some windows deleted, some kept: {flight:#}"
    );
    let on_disk = ontime_trace::store::window_files(&run.join("observe")).unwrap();
    assert_eq!(on_disk.len() as u64, kept, "{on_disk:?}");
    assert!(!run.join("observe.otrec").exists(), "no whole recording");
    let x = read_json(&run.join("explain.json"));
    let e = &x["tenants"]["t0"]["explanation"];
    assert!(e["explained"].as_u64().unwrap() > 0, "{e:#}");
    let top = &e["causes"][0];
    assert_eq!(top["cause"], "waited_for_cpu", "{e:#}");
    assert_eq!(top["culprit"]["comm"], "ontime-burst", "{e:#}");
    // The requests late at the gateway are explained on the kept windows
    // too, with the path's part.
    let a = &x["tenants"]["t0"]["arrivals"];
    assert!(a["explained"].as_u64().unwrap() > 0, "{a:#}");
    assert_eq!(a["causes"][0]["culprit"]["comm"], "ontime-burst", "{a:#}");
}

/// A UDP flood received on the tenant's CPU is charged to the network's
/// receive softirq there (or to ksoftirqd running it), not to the
/// flooder on the other CPU.
#[test]
fn a_softirq_flood_is_charged_to_the_receive_softirq_on_the_tenants_cpu() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip() {
        return;
    }
    if ontime_core::limits::online_cpus() < 2 {
        ontime_testkit::skip("needs two CPUs (the tenant on CPU 1, the flooder on another)");
        return;
    }
    let _clean = CleanOnDrop;
    let (_dir, _sc, results) = run_lab(
        "name = 'flood'\nduration = '8s'\n[tenant]\ncount = 1\nvcpus = 1\ncpuset = '1'\n\
[tenant.cyclic]\ninterval = '1ms'\n[observe]\nrecorder = 'ontime'\n[targets]\n'p99.9' = '300us'\n\
[[inject]]\ncause = 'softirq-flood'\nlength = '200ms..300ms'\nevery = '2s'\nstart_after = '1s'\n",
    );
    // Judged inside the floods (the ground truth's row), against the
    // cells that name someone else: a short run's whole lateness can be
    // this VM's own noise, outside any flood. Left out: the wait for a
    // CPU (it sums every thread waited behind: kdamond, a memory monitor
    // this machine runs, the hidden agent, which no single culprit
    // outweighs but their sum may); steal and a late timer (this VM's
    // vCPU descheduled beneath it, steal where the kernel reports it, else
    // a timer late on an idle CPU: 3 % of a flood's lateness one day,
    // twice the softirq's another); and what the events leave unexplained
    // (19-67 % in runs on one day, the host's hidden agent). Those are the
    // target's business, reported in docs/explain.md.
    let run = results.join("runs/000-rep1");
    let truth = read_json(&run.join("truth.json"));
    let row = &truth["confusion"]["rows"]["softirq-flood"];
    let ns = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    let right = ns(&row["right_ns"]);
    assert!(right > 0, "{truth:#}");
    let mut rivals = vec![("right cause, other culprit", ns(&row["right_cause_other_culprit_ns"]))];
    for (cause, v) in row["other_ns"].as_object().into_iter().flatten() {
        if !["waited_for_cpu", "late_timer", "steal"].contains(&cause.as_str()) {
            rivals.push((cause.as_str(), ns(v)));
        }
    }
    assert!(
        rivals.iter().all(|(_, v)| *v <= right),
        "the receive softirq on the tenant's CPU outweighs every other culprit inside the floods: {rivals:?} vs {right}: {truth:#}"
    );
    // And the flooder, on the other CPU, is never blamed.
    let x = read_json(&run.join("explain.json"));
    let e = &x["tenants"]["t0"]["explanation"];
    assert!(
        e["causes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["culprit"]["comm"] != "ontime-flood"),
        "{e:#}"
    );
}

/// Requests a held relay kept reach the gateway late, and their lateness
/// is charged to the relay's thread holding them.
#[test]
fn a_stopped_relay_is_charged_for_the_requests_it_held() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip() {
        return;
    }
    let _clean = CleanOnDrop;
    let (_dir, _sc, results) = run_lab(
        "name = 'relay'\nduration = '8s'\n[host]\nrelay_delay = '10ms'\n[tenant]\ncount = 1\nvcpus = 1\n\
[tenant.crawl]\nrate = 200\n[observe]\nrecorder = 'ontime'\n[targets]\n'p99.9' = '5ms'\n\
[[inject]]\ncause = 'relay-stall'\nlength = '200ms..300ms'\nevery = '2s'\nstart_after = '1s'\n",
    );
    let run = results.join("runs/000-rep1");
    right_is_largest(&run, "relay-stall");
    let x = read_json(&run.join("explain.json"));
    let arrivals = &x["tenants"]["t0"]["arrivals"];
    assert_eq!(arrivals["causes"][0]["detail"], "relay_wait", "{arrivals:#}");
}

/// Answers a stalled gateway held come back late, and their lateness is
/// charged to the gateway (its own stamps), not to the path or the
/// crawler.
#[test]
fn a_stalled_gateway_is_charged_for_the_answers_it_held() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip() {
        return;
    }
    let _clean = CleanOnDrop;
    let (_dir, _sc, results) = run_lab(
        "name = 'gateway'\nduration = '8s'\n[host]\nrelay_delay = '10ms'\n[tenant]\ncount = 1\nvcpus = 1\n\
[tenant.crawl]\nrate = 200\n[observe]\nrecorder = 'ontime'\n[targets]\n'p99.9' = '5ms'\n\
[[inject]]\ncause = 'gateway-stall'\nlength = '200ms..300ms'\nevery = '2s'\nstart_after = '1s'\n",
    );
    let run = results.join("runs/000-rep1");
    right_is_largest(&run, "gateway-stall");
    let x = read_json(&run.join("explain.json"));
    let answers = &x["tenants"]["t0"]["answers"];
    assert_eq!(answers["causes"][0]["detail"], "gateway", "{answers:#}");
    let gw = read_json(&run.join("gateway.json"));
    assert!(gw["stalled"].as_u64().unwrap() > 0, "{gw:#}");
}

/// The largest cell of `class`'s row in a run's truth.json is the right
/// cause with the right culprit (who and which cause only, never timings).
fn right_is_largest(run: &Path, class: &str) {
    let truth = read_json(&run.join("truth.json"));
    let row = &truth["confusion"]["rows"][class];
    assert!(row["injected"].as_u64().unwrap_or(0) >= 2, "{truth:#}");
    assert!(
        row["events"].as_u64().unwrap_or(0) > 0,
        "no late event inside an injection: {truth:#}"
    );
    let right = row["right_ns"].as_u64().unwrap();
    let mut rest = vec![
        row["right_cause_other_culprit_ns"].as_u64().unwrap(),
        row["unexplained_ns"].as_u64().unwrap(),
    ];
    rest.extend(
        row["other_ns"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap()),
    );
    assert!(
        rest.iter().all(|&r| right > r),
        "{class}: the right cause and culprit is not the largest share: {truth:#}"
    );
}

/// Ground truth classes d and e on a real-time cyclic tenant: its class
/// throttled by a lower real-time loop that outlasts the budget (the
/// wake-ups are charged to the loop that used it), and its own work
/// in bursts (the wake-ups after each are late by its own work).
#[test]
fn throttling_and_own_work_are_charged_to_their_causes() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip() {
        return;
    }
    if ontime_core::limits::online_cpus() < 2 {
        ontime_testkit::skip("needs two CPUs (the tenant and its injections on CPU 1)");
        return;
    }
    let _clean = CleanOnDrop;
    let tenant = "[tenant]\ncount = 1\nvcpus = 1\ncpuset = '1'\npolicy = 'fifo:80'\n\
[tenant.cyclic]\ninterval = '1ms'\n[observe]\nrecorder = 'ontime'\n[targets]\n'p99.9' = '5ms'\n";
    let (_dir, _sc, results) = run_lab(&format!(
        "name = 'throttle'\nduration = '7s'\n{tenant}\
[[inject]]\ncause = 'rt-throttle'\nlength = '1500ms'\nevery = '2500ms'\npriority = 1\nstart_after = '1s'\n"
    ));
    right_is_largest(&results.join("runs/000-rep1"), "rt-throttle");
    let (_dir, _sc, results) = run_lab(&format!(
        "name = 'own'\nduration = '5s'\n{tenant}\
[[inject]]\ncause = 'own-work'\nlength = '40ms..60ms'\nevery = '1s'\nstart_after = '1s'\n"
    ));
    right_is_largest(&results.join("runs/000-rep1"), "own-work");
}

/// `tenant.command`: a poller ontime did not write (pymodbus's client,
/// every 20 ms on an absolute schedule, logging its own sends) runs in the
/// tenant against the lab's Modbus gateway, and ontime measures it from
/// its packets on the tenant's veth. Per register, every request the
/// poller logged is seen, and the interval error from the packets agrees
/// with the poller's log (p50 within 200 us or 10 %); the report judges
/// the tenant by it. A command that fails fails the run, naming its file.
#[test]
fn a_third_party_poller_in_a_tenant_is_measured_from_its_packets() {
    const PEERS: &str = "/var/cache/ontime/fieldbus/bin/python";
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip() {
        return;
    }
    if !Path::new(PEERS).exists() {
        ontime_testkit::skip(
            "pymodbus is not installed (scripts/setup.sh installs it into /var/cache/ontime/fieldbus)",
        );
        return;
    }
    let _clean = CleanOnDrop;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/fieldbus-peer.py");
    let gateway = "[tenant.crawl]\nrate = 50\npoints_per_request = 4\nperiod = '20ms'\nprotocol = 'modbus'\n";
    let (_dir, _sc, results) = run_lab(&format!(
        "name = 'third-party'\nduration = '6s'\n[tenant]\ncount = 1\n\
         command = \"exec {PEERS} {script} modbus-poll --host $ONTIME_HOST --port $ONTIME_PORT \
         --unit $ONTIME_UNIT --period-ms 20 --seconds 5 --log $ONTIME_RUN_DIR/poller.log\"\n{gateway}"
    ));
    let run = results.join("runs/000-rep1");
    let rec = read_json(&run.join("run.json"));
    assert_eq!(rec["workload"], "wire", "{rec:#}");
    let times: Vec<u64> = std::fs::read_to_string(run.join("poller.log"))
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert!(times.len() > 100, "the poller polled: {} requests", times.len());
    let mut own = ontime_core::stats::LatencyHistogram::new();
    let skipped = ontime_core::interval::from_timestamps(&times, 20_000_000, &mut own);
    let r = read_json(&run.join("t0.json"));
    assert_eq!(r["interface"], "ontime0h", "{r:#}");
    let points = r["points"].as_array().unwrap();
    assert_eq!(points.len(), 4, "holding registers 0-3 of unit 1: {r:#}");
    let p50 = |s: &serde_json::Value| {
        s["percentiles_ns"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "p50")
            .and_then(|p| p["value_ns"].as_u64())
            .unwrap()
    };
    let log = own.percentile(50.0).unwrap();
    for p in points {
        assert_eq!(p["requests"].as_u64(), Some(times.len() as u64), "{p}");
        // A gap of about one and a half periods may round one way in the
        // log and the other on the wire.
        let missed = p["missed"].as_u64().unwrap();
        let ambiguous = ontime_testkit::ambiguous_gaps(&times, 20_000_000, 2_000_000);
        assert!(
            missed.abs_diff(skipped) <= ambiguous,
            "{missed} missed on the wire, {skipped} in the log, {ambiguous} gaps could round either way: {p}"
        );
        let wire = p50(&p["interval_error"]);
        assert!(
            wire.abs_diff(log) <= (log / 10).max(200_000),
            "p50 {wire} ns from the packets, {log} ns from the poller's log: {p}"
        );
    }
    // The report judges the tenant by its packets.
    let report = std::fs::read_to_string(results.join("report/report.html")).unwrap();
    assert!(report.contains("interval error"), "the report's metric");

    // A command that cannot run fails the run and says where to look.
    let dir = tempfile::tempdir().unwrap();
    let sc = write(
        dir.path(),
        "bad.toml",
        &format!("name = 'bad-command'\nduration = '3s'\n[tenant]\ncount = 1\ncommand = 'exit 3'\n{gateway}"),
    );
    let out = ontime()
        .args(["lab", "run"])
        .arg(&sc)
        .arg("-o")
        .arg(dir.path().join("results"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("tenant 0's command ended early with exit status 3 (see t0.err)"),
        "{err}"
    );
}

/// Crawler tenants over Modbus/TCP and BACnet/IP: the answers carry no
/// receive time, so the lab judges each tenant by its building's polls
/// in the gateway's receive log (tenant i polls building i), and pools
/// them from it.
#[test]
fn fieldbus_crawlers_are_judged_at_the_device() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip() {
        return;
    }
    let _clean = CleanOnDrop;
    let (_dir, _sc, results) = run_lab(
        "name = 'at-device'\nduration = '4s'\n[tenant]\ncount = 2\n[tenant.crawl]\nrate = 50\n\
         points_per_request = 4\nperiod = '100ms'\nprotocol = 'modbus'\n\
         [sweep]\n'tenant.crawl.protocol' = ['modbus', 'bacnet']\n",
    );
    for run in ["000-protocol=modbus-rep1", "001-protocol=bacnet-rep1"] {
        let dir = results.join("runs").join(run);
        let rec = read_json(&dir.join("run.json"));
        let reference = &rec["reference"];
        let tenants = reference["tenants"].as_array().unwrap_or_else(|| panic!("{rec:#}"));
        let indices: Vec<u64> = tenants.iter().map(|t| t["index"].as_u64().unwrap()).collect();
        assert_eq!(indices, vec![0, 1], "{reference:#}");
        for t in tenants {
            // 40 polls of 4 points a tenant, less the first of each point.
            let n = t["interval_error"]["count"].as_u64().unwrap();
            assert!(n >= 100, "{t}");
        }
        assert!(dir.join("gateway.hlog").exists());
    }
}
