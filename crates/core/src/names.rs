//! The lab's names, in one place for the lab that makes the objects and for
//! observe (ontime-trace) that finds them: network namespaces, veths,
//! cgroups, addresses, and the threads a tenant's vCPUs and the host I/O
//! path run as. Every name of a kernel object starts with `ontime`, so
//! `ontime lab clean` (and anyone with `ip netns list`) can find leftovers.
//! Interface names fit IFNAMSIZ (15 bytes).

pub const PREFIX: &str = "ontime";

/// The building side's network namespace.
pub fn building_netns() -> String {
    format!("{PREFIX}-bldg")
}

/// The file `ip netns` keeps for network namespace `name` (what setns and
/// spawning into a namespace open).
pub fn netns_file(name: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("/run/netns/{name}"))
}

pub fn tenant_netns(i: usize) -> String {
    format!("{PREFIX}-t{i}")
}

/// Host-side and namespace-side veth names of tenant `i`.
pub fn tenant_veth(i: usize) -> (String, String) {
    (format!("{PREFIX}{i}h"), format!("{PREFIX}{i}n"))
}

pub fn building_veth() -> (String, String) {
    (format!("{PREFIX}bh"), format!("{PREFIX}bn"))
}

/// The lab's cgroup (relative to a controller's root): tenants are its
/// children.
pub const LAB_CGROUP: &str = PREFIX;

/// The cgroup (relative to a controller's root) of tenant `i`.
/// Where the lab keeps tenants' disk images (on the host's file system, so
/// the host page cache holds them: document 004's "host cache").
pub const DISK_DIR: &str = "/var/lib/ontime-lab/disks";
/// Where tenants' mount namespaces are pinned (files, like /run/netns).
pub const MNTNS_DIR: &str = "/run/ontime-lab/mntns";
/// Where a tenant's disk is mounted inside its mount namespace.
pub const DISK_MOUNT: &str = "/mnt/ontime-disk";

/// Tenant i's disk image file.
pub fn tenant_disk_image(i: usize) -> String {
    format!("{DISK_DIR}/{PREFIX}-t{i}.img")
}

/// Tenant i's pinned mount namespace.
pub fn tenant_mntns(i: usize) -> String {
    format!("{MNTNS_DIR}/{PREFIX}-t{i}")
}

pub fn tenant_cgroup(i: usize) -> String {
    format!("{LAB_CGROUP}/{}", tenant_name(i))
}

/// Tenant `i`'s name in reports, cgroups and result files ("t3").
pub fn tenant_name(i: usize) -> String {
    format!("t{i}")
}

/// The tenant index in a tenant name ("t3" -> 3).
pub fn tenant_index(name: &str) -> Option<usize> {
    name.strip_prefix('t')?.parse().ok()
}

/// Tenant `i`'s guest clock against the host's (`ontime_net::clock`'s
/// offset, JSON), in its run directory.
pub fn guest_clock_file(i: usize) -> String {
    format!("t{i}.clock.json")
}

/// The spec of tenant `i`'s guest clock measurement (its job runs it), in
/// its run directory.
pub fn guest_clock_probe(i: usize) -> String {
    format!("t{i}.clock.probe.json")
}

/// Tenant `i`'s scheduler recording made inside its guest, on the guest's
/// clock, in its run directory.
pub fn guest_sched_recording(i: usize) -> String {
    format!("t{i}.guest-sched.otrec")
}

/// Thread names of the lab's host I/O path (the relay's threads).
pub fn relay_thread(k: usize) -> String {
    format!("{PREFIX}-relay{k}")
}

/// Address of tenant `i` and of the building side (one /16, so every tenant
/// and the gateways share one L2 segment through the relay).
pub fn tenant_addr(i: usize) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::new(10, 77, 1 + (i / 250) as u8, 1 + (i % 250) as u8)
}

pub fn building_addr() -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::new(10, 77, 0, 1)
}

pub const PREFIX_LEN: u8 = 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_and_carry_the_prefix() {
        for i in [0, 9, 99, 999] {
            let (h, n) = tenant_veth(i);
            assert!(h.len() <= 15 && n.len() <= 15, "{h} {n}");
            assert!(h.starts_with(PREFIX) && tenant_netns(i).starts_with(PREFIX));
        }
        assert_ne!(tenant_addr(249), tenant_addr(250));
        assert_ne!(tenant_addr(0), building_addr());
        assert_eq!(tenant_index(&tenant_name(12)), Some(12));
        assert!(tenant_cgroup(3).starts_with(LAB_CGROUP));
    }
}
