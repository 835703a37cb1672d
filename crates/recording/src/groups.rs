//! The groups a recording keeps (tenants, the host I/O path) and how a
//! thread is told to be one of a group's vCPUs, by its name: what the
//! recorder writes and every analysis of a recording reads the same way.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Group {
    pub name: String,
    pub kind: GroupKind,
    /// Where its threads come from (cgroup paths, pids, guest name).
    #[serde(default)]
    pub source: Vec<String>,
    /// Its vCPU threads carry vCPU names (`CPU n/KVM`, `crawl-vcpu<k>`,
    /// `cyclic<k>`); otherwise every thread counts as a vCPU.
    #[serde(default)]
    pub vcpu_names: bool,
}

/// What a group of threads stands for.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum GroupKind {
    /// A lab tenant, a cgroup, a process or a QEMU guest: a tenant.
    Tenant,
    /// The host I/O path: relay threads, vhost, ksoftirqd.
    HostIo,
}

/// Thread names of vCPUs: QEMU/KVM's, and the lab probes' (crawl, cyclic).
pub const VCPU_PATTERNS: &[&str] = &["CPU */KVM", "CPU */TCG", "crawl-vcpu*", "cyclic*"];

/// Glob with `*` standing for any run of characters.
pub fn matches(pattern: &str, name: &str) -> bool {
    fn go(p: &[u8], n: &[u8]) -> bool {
        match p.split_first() {
            None => n.is_empty(),
            Some((b'*', rest)) => (0..=n.len()).any(|i| go(rest, &n[i..])),
            Some((c, rest)) => n.first() == Some(c) && go(rest, &n[1..]),
        }
    }
    go(pattern.as_bytes(), name.as_bytes())
}

pub fn is_vcpu_name(comm: &str) -> bool {
    VCPU_PATTERNS.iter().any(|p| matches(p, comm))
}

/// Whether a thread counts as one of its group's vCPUs: host I/O threads
/// never do; in a group with vCPU-named threads (declared, or seen among its
/// threads) only those do; otherwise every thread does.
pub fn counts_as_vcpu(group: &Group, comm: &str, group_has_vcpu_names: bool) -> bool {
    if group.kind == GroupKind::HostIo {
        return false;
    }
    is_vcpu_name(comm) || !(group.vcpu_names || group_has_vcpu_names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(matches("CPU */KVM", "CPU 3/KVM"));
        assert!(matches("ksoftirqd/*", "ksoftirqd/0"));
        assert!(matches("relay*", "relay12"));
        assert!(!matches("relay*", "xrelay"));
        assert!(matches("cyclic*", "cyclic"));
        assert!(!matches("CPU */KVM", "CPU 3/TCG"));
        assert!(is_vcpu_name("crawl-vcpu1"));
    }
}
