//! What the end-to-end tests share: the binary, running it with a bound on
//! a hang, the one-line refusal check, the root check with the tools the
//! lab needs, and the clean-up that runs also when a test fails.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

pub fn ontime() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ontime"))
}

/// Writes `text` to `dir/name`.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Runs `ontime ARGS` with a 120 s bound on a hang; returns its output.
pub fn run(args: &[&str]) -> Output {
    ontime_testkit::KillOnDrop::spawn(ontime().args(args)).wait_output(Duration::from_secs(120))
}

/// Exit 2 and a one-line error containing every one of `says`.
pub fn refused(out: &Output, says: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    for s in says {
        assert!(err.contains(s), "expected {s:?} in: {err}");
    }
}

pub fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A FIFO at `path` (replacing what is there): an input that would block
/// a plain open for ever.
pub fn mkfifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(
        unsafe { libc::mkfifo(c.as_ptr(), 0o600) },
        0,
        "mkfifo {}",
        path.display()
    );
}

/// Root and the lab's tools (ip, ethtool) plus `more`; else a visible skip.
/// Starts from a host without lab objects: each test checks it leaves
/// none, but a lab killed before the suite (a test process killed by a
/// timeout, a run interrupted on the machine) would fail the next test
/// for a reason that is not its own.
pub fn lab_root_or_skip(more: &[&str]) -> bool {
    let ok = ontime_testkit::root_or_skip("the lab")
        && ontime_testkit::tools_or_skip(&["ethtool", "ip"])
        && ontime_testkit::tools_or_skip(more);
    if ok && !leftovers().contains("nothing") {
        let out = ontime()
            .args(["lab", "clean"])
            .output()
            .expect("running ontime lab clean");
        eprintln!(
            "test: removed what an earlier lab left: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    ok
}

/// `ontime lab run SCENARIO -o RESULTS` in the background, quiet.
pub fn spawn_lab(scenario: &std::path::Path, results: &std::path::Path) -> std::process::Child {
    ontime()
        .args(["lab", "run"])
        .arg(scenario)
        .arg("-o")
        .arg(results)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn ontime lab run")
}

/// Removes whatever a failed test left (`lab clean`), on drop.
pub struct CleanOnDrop;

impl Drop for CleanOnDrop {
    fn drop(&mut self) {
        let _ = ontime().args(["lab", "clean"]).stdout(Stdio::null()).status();
    }
}

/// What `lab clean --dry-run` says is left.
pub fn leftovers() -> String {
    let out = ontime()
        .args(["lab", "clean", "--dry-run"])
        .output()
        .expect("running ontime lab clean");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A failed test's results, kept for a person to read: on a panic the
/// directory is moved to `$ONTIME_TEST_KEEP` (default /var/tmp) and its new
/// path printed, so a failure that happens once in many runs leaves its
/// recordings behind. A passing test's directory is removed as usual.
pub struct KeepOnFailure {
    pub dir: PathBuf,
    pub name: &'static str,
}

impl Drop for KeepOnFailure {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let base = std::env::var_os("ONTIME_TEST_KEEP")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/var/tmp"));
        let to = base.join(format!("ontime-failed-{}-{}", self.name, std::process::id()));
        let _ = std::fs::create_dir_all(&base);
        match std::fs::rename(&self.dir, &to).or_else(|_| {
            // Another file system: copy what matters instead.
            Command::new("cp")
                .arg("-a")
                .arg(&self.dir)
                .arg(&to)
                .status()
                .map(|_| ())
        }) {
            Ok(()) => eprintln!("the failed test's results are kept in {}", to.display()),
            Err(e) => eprintln!("cannot keep {} in {}: {e}", self.dir.display(), to.display()),
        }
    }
}
