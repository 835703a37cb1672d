//! Which cgroup hierarchy this host has: one detector for the lab (which
//! makes tenants' cgroups) and the recorder (which keys events on them).

use serde::{Deserialize, Serialize};
use std::path::Path;

pub const ROOT: &str = "/sys/fs/cgroup";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Version {
    /// Separate hierarchies per controller (cpu, cpuset, memory ...).
    V1,
    /// One unified hierarchy.
    V2,
}

/// The hierarchy mounted at /sys/fs/cgroup: v2 (unified), v1 with a cpu
/// controller, or none usable.
pub fn detect() -> Option<Version> {
    let root = Path::new(ROOT);
    if root.join("cgroup.controllers").exists() {
        Some(Version::V2)
    } else if v1_cpu_root().is_some() {
        Some(Version::V1)
    } else {
        None
    }
}

/// The v1 cpu controller's mount ("cpu" or "cpu,cpuacct").
pub fn v1_cpu_root() -> Option<&'static Path> {
    ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.join("tasks").exists())
}
