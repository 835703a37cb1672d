//! A culprit is named by what it runs: a process first seen as the shell
//! that forked it, then exec'd into another program, is named by the
//! program in the recording's thread table, with either mechanism. Needs
//! root (BPF or perf tracepoints); skips with one line otherwise.
use std::process::{Child, Command};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use ontime_trace::recorder::{record, Mechanism, NoSink, RecordOptions};
use ontime_trace::recording::Recording;
use ontime_trace::targets::Targets;

/// Killed on drop, also when an assertion fails.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Records every CPU for 2.5 s with `mechanism`, runs `act` 300 ms in
/// (it returns the id of the thread it made), and gives that thread's name
/// in the recording; None, with a skip line, without root.
fn name_recorded(mechanism: Mechanism, act: impl FnOnce() -> u32 + Send) -> Option<(u32, Option<String>)> {
    if !ontime_testkit::is_root() {
        ontime_testkit::skip("needs root (BPF or perf tracepoints)");
        return None;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("names.otrec");
    let opts = RecordOptions {
        targets: Targets {
            groups: vec![],
            everything: false,
            host_io: vec![],
        },
        output: Some(file.clone()),
        measure_overhead: false,
        mechanism,
        ..Default::default()
    };
    let stop = AtomicBool::new(false);
    let mut id = 0;
    std::thread::scope(|s| {
        let rec = s.spawn(|| {
            record(
                &opts,
                &stop,
                Some(Duration::from_millis(2500)),
                &mut NoSink,
                &mut |_| {},
            )
        });
        std::thread::sleep(Duration::from_millis(300));
        id = act();
        rec.join().expect("recorder thread").expect("recording");
    });
    let r = Recording::read(&file).expect("read");
    Some((id, r.threads.get(&id).map(|t| t.comm.clone())))
}

fn renamed_after_exec(mechanism: Mechanism) {
    let Some((pid, name)) = name_recorded(mechanism, || {
        // The shell runs and waits for its sleep (switches: named "sh" at
        // first sight, well before the exec), then becomes a sleep itself.
        let mut child = Kill(
            Command::new("sh")
                .args(["-c", "sleep 0.6; exec sleep 0.5"])
                .spawn()
                .expect("sh"),
        );
        // Reaped before the recording ends: its name cannot be read again
        // from /proc at the end, only its exec says it.
        child.0.wait().expect("sh");
        child.0.id()
    }) else {
        return;
    };
    assert_eq!(name.as_deref(), Some("sleep"), "pid {pid} after its exec");
}

#[test]
fn bpf_names_a_process_by_what_it_exec_d() {
    renamed_after_exec(Mechanism::Bpf);
}

#[test]
fn perf_names_a_process_by_what_it_exec_d() {
    renamed_after_exec(Mechanism::Perf);
}

/// A thread that names itself after the recording first saw it (as
/// pthread_setname_np and Rust's thread names do, after the clone) is
/// named by its new name, also when it is gone before the recording ends.
fn renamed_after_first_sight(mechanism: Mechanism) {
    let Some((tid, name)) = name_recorded(mechanism, || {
        // Sleeps under its first name across several drains (every
        // 100 ms), renames itself, and exits well before the end.
        std::thread::spawn(|| {
            ontime_core::rt::set_thread_name("first-name");
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() } as u32;
            for _ in 0..5 {
                std::thread::sleep(Duration::from_millis(100));
            }
            ontime_core::rt::set_thread_name("renamed-late");
            std::thread::sleep(Duration::from_millis(100));
            tid
        })
        .join()
        .expect("renaming thread")
    }) else {
        return;
    };
    assert_eq!(name.as_deref(), Some("renamed-late"), "tid {tid} after its rename");
}

#[test]
fn bpf_names_a_thread_by_its_last_rename() {
    renamed_after_first_sight(Mechanism::Bpf);
}

#[test]
fn perf_names_a_thread_by_its_last_rename() {
    renamed_after_first_sight(Mechanism::Perf);
}
