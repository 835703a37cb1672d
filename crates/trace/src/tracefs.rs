//! tracefs, mounted when a capture needs it and unmounted when the last one
//! that mounted it is done.
//!
//! A fresh machine often has nothing at /sys/kernel/tracing. The perf
//! source reads tracepoint formats from it, and libbpf attaches tracepoint
//! programs by name through its event ids, so both need it mounted. Several
//! recorders of one process (the lab records scheduler events and I/O at
//! once) share one mount: a process-wide count decides who unmounts.

use anyhow::{bail, Result};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

const MOUNT_POINT: &str = "/sys/kernel/tracing";

/// Holders of the mount this process made (0: it made none or all dropped).
static MOUNTED_BY_US: Mutex<usize> = Mutex::new(0);

/// tracefs available at `path` for as long as this lives.
#[derive(Debug)]
pub struct Tracefs {
    path: PathBuf,
    /// This holder counts towards the process's own mount.
    holds_mount: bool,
}

impl Tracefs {
    /// The tracefs directory (events/ is below it).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// tracefs with the tracepoint `event` (e.g. "sched/sched_switch")
    /// visible, mounting it at /sys/kernel/tracing when it is not.
    /// `needs` names the kernel facility the event comes from, for the
    /// error when tracefs is there but the event is not.
    pub fn ensure(event: &str, needs: &str) -> Result<Tracefs> {
        let mut count = MOUNTED_BY_US.lock().unwrap_or_else(|e| e.into_inner());
        for p in [MOUNT_POINT, "/sys/kernel/debug/tracing"] {
            if has_event(Path::new(p), event) {
                let ours = p == MOUNT_POINT && *count > 0;
                if ours {
                    *count += 1;
                }
                return Ok(Tracefs {
                    path: p.into(),
                    holds_mount: ours,
                });
            }
        }
        if !Path::new(MOUNT_POINT).join("events").exists() {
            // SAFETY: constant NUL-terminated strings; no data argument.
            let rc = unsafe {
                libc::mount(
                    c"nodev".as_ptr(),
                    c"/sys/kernel/tracing".as_ptr(),
                    c"tracefs".as_ptr(),
                    0,
                    std::ptr::null(),
                )
            };
            if rc != 0 {
                let err = std::io::Error::last_os_error();
                bail!(
                    "tracefs is not mounted and mounting it at {MOUNT_POINT} failed ({err}); \
                     run as root, or mount it yourself: mount -t tracefs nodev {MOUNT_POINT}"
                );
            }
            *count += 1;
            let held = Tracefs {
                path: MOUNT_POINT.into(),
                holds_mount: true,
            };
            if !has_event(&held.path, event) {
                drop(count);
                bail!("tracefs has no tracepoint {event}: this kernel lacks {needs}");
            }
            return Ok(held);
        }
        bail!("tracefs at {MOUNT_POINT} has no tracepoint {event}: this kernel lacks {needs}")
    }
}

fn has_event(tracefs: &Path, event: &str) -> bool {
    tracefs.join("events").join(event).join("id").exists()
}

impl Drop for Tracefs {
    fn drop(&mut self) {
        if !self.holds_mount {
            return;
        }
        let mut count = MOUNTED_BY_US.lock().unwrap_or_else(|e| e.into_inner());
        *count = count.saturating_sub(1);
        if *count == 0 {
            // Attached perf events and BPF links keep working without the
            // mount; MNT_DETACH lets a reader still inside it finish.
            // SAFETY: constant NUL-terminated path.
            unsafe { libc::umount2(c"/sys/kernel/tracing".as_ptr(), libc::MNT_DETACH) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_event_names_the_facility() {
        if !ontime_testkit::root_or_skip("mounting tracefs") {
            return;
        }
        let err = Tracefs::ensure("no_such_system/no_such_event", "CONFIG_NO_SUCH_THING").unwrap_err();
        assert!(format!("{err:#}").contains("CONFIG_NO_SUCH_THING"), "{err:#}");
    }

    #[test]
    fn mounts_when_needed_and_is_shared() {
        if !ontime_testkit::root_or_skip("mounting tracefs") {
            return;
        }
        let a = Tracefs::ensure("sched/sched_switch", "CONFIG_TRACEPOINTS").expect("tracefs");
        let b = Tracefs::ensure("sched/sched_switch", "CONFIG_TRACEPOINTS").expect("tracefs again");
        assert_eq!(a.path(), b.path());
        drop(a);
        // The second holder still sees it.
        assert!(has_event(b.path(), "sched/sched_switch"));
    }
}
