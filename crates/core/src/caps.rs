//! The one capability probe of the host: what this kernel and machine let
//! ontime do. Every verb asks here instead of assuming, and every result's
//! manifest records the answer so a reader knows what was unavailable.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// What the host offers. `missing` lists, in words, what was unavailable.
#[derive(Clone, Debug, Serialize, Deserialize, Default)]
pub struct Capabilities {
    pub root: bool,
    pub sched_fifo: bool,
    pub sched_deadline: bool,
    pub cpu_dma_latency: bool,
    pub cgroup_version: Option<u8>,
    pub stress_ng: Option<String>,
    pub cyclictest: Option<String>,
    pub missing: Vec<String>,
}

impl Capabilities {
    /// Probes the host. Cheap (a few syscalls and one short-lived thread).
    pub fn probe() -> Capabilities {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let sched_fifo = try_in_thread(crate::rt::Policy::Fifo { priority: 1 });
        let sched_deadline = try_in_thread(crate::rt::Policy::Deadline {
            runtime_ns: 100_000,
            deadline_ns: 10_000_000,
            period_ns: 10_000_000,
        });
        let cpu_dma_latency = Path::new("/dev/cpu_dma_latency").exists();
        let cgroup_version = if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            Some(2)
        } else if Path::new("/sys/fs/cgroup/cpu").exists() {
            Some(1)
        } else {
            None
        };
        let mut c = Capabilities {
            root,
            sched_fifo,
            sched_deadline,
            cpu_dma_latency,
            cgroup_version,
            stress_ng: which("stress-ng"),
            cyclictest: which("cyclictest"),
            missing: Vec::new(),
        };
        let mut miss = |ok: bool, what: &str| {
            if !ok {
                c.missing.push(what.to_string());
            }
        };
        miss(root, "root privileges");
        miss(sched_fifo, "SCHED_FIFO");
        miss(sched_deadline, "SCHED_DEADLINE");
        miss(cpu_dma_latency, "/dev/cpu_dma_latency");
        miss(cgroup_version.is_some(), "cgroups");
        let (sn, ct) = (c.stress_ng.is_some(), c.cyclictest.is_some());
        miss(sn, "stress-ng");
        miss(ct, "cyclictest");
        c
    }
}

/// Tries a policy in a throwaway thread, so the caller's thread is untouched.
fn try_in_thread(policy: crate::rt::Policy) -> bool {
    std::thread::spawn(move || crate::rt::set_policy(policy).is_ok())
        .join()
        .unwrap_or(false)
}

/// Finds an executable on PATH.
pub fn which(name: &str) -> Option<String> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            p.metadata()
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
        .map(|p| p.display().to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn probe_lists_what_is_missing() {
        let c = super::Capabilities::probe();
        assert_eq!(c.root, c.missing.iter().all(|m| m != "root privileges"));
        assert!(super::which("sh").is_some());
        assert!(super::which("no-such-tool-ontime").is_none());
    }
}
