//! Regression tests of the simulator's and the planner's defects a
//! hostile test of the binary found: what comes from files bounds memory
//! and never blocks; what a run says about itself adds up. Each names the defect it guards. Bad input is exit 2 with one
//! line naming the flag, key or file and the range; a run interrupted
//! after it kept what it had is exit 130.

mod common;
use common::{mkfifo, ontime, p, refused, run, write};
use ontime_testkit::{is_root, skip, KillOnDrop};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// Two crawler tenants at 20 polls/s, 1 s long.
const SMALL: &str = "name = 'small'\nduration = '1s'\n[tenant]\ncount = 2\n[tenant.crawl]\nrate = 20\n";

/// The committed calibration of the lab's clock VM.
fn committed_calibration() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/results/sim/calibration-clock.json")
}

/// Defects 4 and 5: `sim` of 200 tenants x 64 vCPUs at 50 000 polls/s
/// aborted at 6 GB; `--io-cost 1000h` was accepted. Both are refused
/// before anything is built, with the limit and what the host would take.
#[test]
fn a_simulated_host_beyond_the_bounds_is_refused_before_it_is_built() {
    let dir = tempfile::tempdir().unwrap();
    let small = write(dir.path(), "s.toml", SMALL);
    refused(
        &run(&["sim", p(&small), "--io-cost", "1000h"]),
        &["--io-cost", "out of range", "1.000 s"],
    );
    let big = write(
        dir.path(),
        "big.toml",
        "name = 'big'\nduration = '10s'\n[tenant]\ncount = 200\nvcpus = 64\n[tenant.crawl]\nrate = 50000\n",
    );
    refused(
        &run(&["sim", p(&big), "--cpus", "8"]),
        &["10000000 poll streams", "more than 1000000", "MB"],
    );
}

/// Defect 21: `sim --io-cost 20ms` planned 500 polls, missed 0 and gave
/// no interval error at all (every percentile n/a): the polls queued
/// behind the starved I/O path at the end were dropped. Every planned
/// poll is now an answer or a miss.
#[test]
fn every_planned_poll_of_a_simulated_run_is_an_answer_or_a_miss() {
    let dir = tempfile::tempdir().unwrap();
    let sc = write(
        dir.path(),
        "s.toml",
        "name = 'io'\nduration = '5s'\n[tenant]\ncount = 1\n[tenant.crawl]\nrate = 100\n",
    );
    let out = run(&[
        "sim",
        p(&sc),
        "--io-cost",
        "20ms",
        "--model",
        "cfs",
        "--cpus",
        "2",
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let n = |k: &str| {
        v.pointer(k)
            .and_then(Value::as_u64)
            .unwrap_or_else(|| panic!("{k} in {v}"))
    };
    let (polls, missed, samples) = (
        n("/0/tenants/0/polls"),
        n("/0/tenants/0/missed"),
        n("/0/tenants/0/interval_error/count"),
    );
    assert_eq!(polls, 500, "{v}");
    assert!(missed > 0, "the I/O path needs 4 CPUs and has one: {v}");
    // Every answer but each of the 100 streams' first is a sample, and
    // every miss one.
    assert!(samples + 100 >= polls, "{samples} samples of {polls} polls: {v}");
}

/// Defect 22: a set with U = 2.0 on 1 CPU showed 0 misses for every task,
/// one task with 0 jobs completed and a worst response of 0 ns.
#[test]
fn a_job_unfinished_at_its_deadline_is_a_miss() {
    let dir = tempfile::tempdir().unwrap();
    let set = write(
        dir.path(),
        "set.toml",
        "[[task]]\nname = 'a'\nwcet = '10ms'\nperiod = '10ms'\npriority = 2\n\
         [[task]]\nname = 'b'\nwcet = '10ms'\nperiod = '10ms'\npriority = 1\n",
    );
    let out = run(&["sim", "tasks", p(&set), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[1]["task"], "b", "{v}");
    assert_eq!(v[1]["completed"], 0, "{v}");
    assert_eq!(v[1]["deadline_misses"], 1, "{v}");
    assert_eq!(v[1]["worst_response_ns"], 10_000_000, "{v}");
}

/// Splits CSV text into records of fields as RFC 4180 reads it.
fn csv_records(text: &str) -> Vec<Vec<String>> {
    let (mut records, mut fields, mut field) = (Vec::new(), Vec::new(), String::new());
    let (mut quoted, mut chars) = (false, text.chars().peekable());
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') => quoted = true,
            (false, ',') => fields.push(std::mem::take(&mut field)),
            (false, '\n') => {
                fields.push(std::mem::take(&mut field));
                records.push(std::mem::take(&mut fields));
            }
            (false, c) => field.push(c),
        }
    }
    records
}

/// Defect 12: `sim tasks --jobs` wrote task names with commas and line
/// breaks unquoted (rows of two fields). Every row now has three.
#[test]
fn job_rows_quote_the_names_that_need_it() {
    let dir = tempfile::tempdir().unwrap();
    let set = write(
        dir.path(),
        "set.toml",
        "[[task]]\nname = 'a,b'\nwcet = '1ms'\nperiod = '10ms'\n\
         [[task]]\nname = 'say \"hi\"'\nwcet = '1ms'\nperiod = '10ms'\n\
         [[task]]\nname = \"two\\nlines\"\nwcet = '1ms'\nperiod = '10ms'\n",
    );
    let jobs = dir.path().join("jobs.csv");
    let out = run(&["sim", "tasks", p(&set), "--cpus", "3", "--jobs", p(&jobs)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&jobs).unwrap();
    let records = csv_records(&text);
    assert_eq!(records.len(), 4, "a header and a job per task: {text:?}");
    assert!(records.iter().all(|r| r.len() == 3), "{records:?}");
    let mut names: Vec<&str> = records[1..].iter().map(|r| r[0].as_str()).collect();
    names.sort();
    assert_eq!(names, ["a,b", "say \"hi\"", "two\nlines"]);
}

/// Defect 19: on a full disk `sim tasks --jobs` did not name the file and
/// left a partial CSV.
#[test]
fn a_full_disk_leaves_no_partial_job_list() {
    if !is_root() {
        skip("mounting a small tmpfs needs root");
        return;
    }
    let Some(full) = ontime_testkit::SmallTmpfs::mount("4k") else {
        skip("cannot mount tmpfs here");
        return;
    };
    let _ = std::fs::write(full.path().join("filler"), vec![0u8; 64 << 10]);
    let dir = tempfile::tempdir().unwrap();
    let set = write(
        dir.path(),
        "set.toml",
        "[[task]]\nname = 'fast'\nwcet = '10us'\nperiod = '1ms'\n",
    );
    let jobs = full.path().join("jobs.csv");
    // 10 000 jobs of about 20 bytes: far beyond the disk.
    let out = run(&["sim", "tasks", p(&set), "--horizon", "10s", "--jobs", p(&jobs)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("jobs.csv"), "names the file: {err}");
    assert!(!jobs.exists(), "a partial CSV was left");
    assert!(
        !full.path().join("jobs.csv.tmp").exists(),
        "its temporary file was left"
    );
}

/// Defects 6 and 8: a calibration with a negative stall rate, a share of
/// 2 or a cost of u64::MAX was accepted (and made `plan` run for
/// minutes); `sim calibrate` hung on a FIFO run.json and read /dev/zero
/// through a symlinked one until memory ran out.
#[test]
fn calibrations_and_lab_results_are_checked_as_they_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let small = write(dir.path(), "s.toml", SMALL);
    let good: Value = serde_json::from_str(&std::fs::read_to_string(committed_calibration()).unwrap()).unwrap();
    let plan = write(
        dir.path(),
        "plan.toml",
        "[[host]]\nname = 'h'\ncores = 4\n[[tenant]]\nname = 't'\nrate = 10\ncpu_per_poll = '1ms'\ntarget = '50ms'\n",
    );
    let cases: [(&str, Value, &str); 3] = [
        (
            "/host_stalls/per_second",
            serde_json::json!(-1.0),
            "host_stalls.per_second",
        ),
        ("/wake_stay_share", serde_json::json!(2.0), "wake_stay_share"),
        (
            "/io_cost_per_packet_ns",
            serde_json::json!(u64::MAX),
            "io_cost_per_packet_ns",
        ),
    ];
    for (at, bad, says) in cases {
        let mut v = good.clone();
        *v.pointer_mut(at).unwrap() = bad;
        let cal = write(dir.path(), "cal.json", &v.to_string());
        refused(
            &run(&["sim", p(&small), "--calibration", p(&cal)]),
            &["cal.json", says, "out of range"],
        );
        refused(&run(&["plan", p(&plan), "--calibration", p(&cal)]), &["cal.json", says]);
    }
    // A FIFO calibration, and lab results whose run.json is a FIFO or
    // /dev/zero: refused at once, never waited on or read to the end.
    let fifo = dir.path().join("fifo.json");
    mkfifo(&fifo);
    refused(
        &run(&["sim", p(&small), "--calibration", p(&fifo)]),
        &["not a regular file"],
    );
    let results = dir.path().join("results");
    let run_dir = results.join("runs/000-rep1");
    std::fs::create_dir_all(&run_dir).unwrap();
    mkfifo(&run_dir.join("run.json"));
    refused(
        &run(&["sim", "calibrate", p(&results), "-o", p(&dir.path().join("c.json"))]),
        &["run.json", "not a regular file"],
    );
    std::fs::remove_file(run_dir.join("run.json")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", run_dir.join("run.json")).unwrap();
    refused(
        &run(&["sim", "calibrate", p(&results), "-o", p(&dir.path().join("c.json"))]),
        &["run.json", "not a regular file"],
    );
}

/// Defect 24: SIGINT to `sim` of a long sweep killed it with no table and
/// no `--result`. It now stops between runs, lists the runs done, writes
/// them to `--result`, says so and exits 130.
#[test]
fn an_interrupted_sweep_keeps_the_runs_done() {
    let dir = tempfile::tempdir().unwrap();
    // 1000 runs of 30 s each: far longer than the test waits.
    let sc = write(
        dir.path(),
        "sweep.toml",
        "name = 'long'\nduration = '30s'\nrepetitions = 1000\n[tenant]\ncount = 2\n[tenant.crawl]\nrate = 200\n",
    );
    let result = dir.path().join("r.json");
    let (stdout, stderr) = (dir.path().join("out.txt"), dir.path().join("err.txt"));
    // Files, not pipes: the test reads the progress while the run goes on.
    let child = KillOnDrop(
        ontime()
            .args(["sim", p(&sc), "--cpus", "2", "--result", p(&result)])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap(),
    );
    ontime_testkit::wait_until("the third run", Duration::from_secs(120), || {
        std::fs::read_to_string(&stderr).is_ok_and(|e| e.contains("[3/1000]"))
    });
    child.signal(libc::SIGINT);
    let out = child.wait_output(Duration::from_secs(120));
    let (text, err) = (
        std::fs::read_to_string(&stdout).unwrap(),
        std::fs::read_to_string(&stderr).unwrap(),
    );
    assert_eq!(out.status.code(), Some(130), "{err}");
    let runs: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&result).unwrap()).unwrap();
    let done = runs.len();
    assert!((3..1000).contains(&done), "{done} runs in --result");
    let said = format!("interrupted after {done} of 1000 runs");
    assert!(text.contains(&said), "the table says so: {text}");
    assert!(err.contains(&said), "{err}");
    assert_eq!(
        text.lines().filter(|l| l.starts_with("sim-")).count(),
        done,
        "a table line per run done: {text}"
    );
}
