//! For tests only: a skip that is seen. A test that cannot run here (no
//! root, a missing tool) calls [`skip`]; the reason goes to stderr and, when
//! `ONTIME_TEST_SKIPS` names a file (scripts/test.sh sets it), is appended
//! there, so the suite's summary lists every skip instead of showing a
//! skipped test as a silent pass.

use std::io::Write;

/// Records that the calling test skipped, and why.
pub fn skip(reason: &str) {
    let test = std::thread::current().name().unwrap_or("?").to_string();
    eprintln!("skipped: {reason}");
    if let Some(path) = std::env::var_os("ONTIME_TEST_SKIPS") {
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = writeln!(f, "{test}: {reason}");
        }
    }
}
