//! What the lab's end-to-end tests share: the binary, the root check with
//! the tools the lab needs, and the clean-up that runs also when a test fails.
#![allow(dead_code)]

use std::process::{Command, Stdio};

pub fn ontime() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ontime"))
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
