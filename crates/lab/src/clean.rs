//! `ontime lab clean`: finds and removes everything of the lab's that
//! escaped a teardown (for example after the runner was SIGKILLed):
//! processes in lab cgroups or namespaces, the cgroups, the namespaces and
//! the host-side links, tenants' disks (mount namespaces, loop devices,
//! images), kernel settings it left changed, and the channel controller's
//! socket and token (its BPF programs go with the namespaces). Everything is found by the common name prefix.

use crate::cgroup;
use crate::names::PREFIX;
use crate::sys::{ip, ip_output};
use anyhow::Result;
use serde::Serialize;

#[derive(Debug, Default, Serialize, PartialEq)]
pub struct Leftovers {
    pub netns: Vec<String>,
    pub links: Vec<String>,
    pub cgroups: Vec<String>,
    pub processes: Vec<i32>,
    /// Kernel settings a killed run left changed ("path = original").
    pub settings: Vec<String>,
    /// Tenants' disks: loop devices, mount namespaces, images.
    pub disks: crate::disk::DiskLeftovers,
    /// The channel controller's socket and token file.
    #[serde(default)]
    pub files: Vec<String>,
}

impl Leftovers {
    pub fn is_empty(&self) -> bool {
        *self == Leftovers::default()
    }

    /// Every object by name, in the order they are removed.
    pub fn names(&self) -> impl Iterator<Item = &String> {
        self.netns
            .iter()
            .chain(&self.links)
            .chain(&self.cgroups)
            .chain(&self.disks.mount_namespaces)
            .chain(&self.disks.loop_devices)
            .chain(&self.disks.images)
            .chain(&self.files)
            .chain(&self.settings)
    }
}

/// What of the lab is on this host now.
pub fn find() -> Result<Leftovers> {
    let netns: Vec<String> = ip_output(&["netns", "list"])?
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(PREFIX))
        .map(str::to_string)
        .collect();
    let links: Vec<String> = ip_output(&["-o", "link", "show"])?
        .lines()
        .filter_map(|l| l.split(':').nth(1))
        .map(|n| n.trim().split('@').next().unwrap_or("").to_string())
        .filter(|n| n.starts_with(PREFIX))
        .collect();
    let dirs = cgroup::all_lab_dirs();
    let mut processes = Vec::new();
    for d in &dirs {
        if let Ok(t) = std::fs::read_to_string(d.join("cgroup.procs")) {
            processes.extend(t.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
        }
    }
    for n in &netns {
        if let Ok(t) = ip_output(&["netns", "pids", n]) {
            processes.extend(t.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
        }
    }
    processes.sort_unstable();
    processes.dedup();
    Ok(Leftovers {
        netns,
        links,
        cgroups: dirs.iter().map(|d| d.display().to_string()).collect(),
        processes,
        settings: ontime_core::sysctl::leftovers(),
        disks: crate::disk::leftovers(),
        files: [ontime_net::api::DEFAULT_SOCKET, ontime_net::api::DEFAULT_TOKEN]
            .iter()
            .filter(|f| std::path::Path::new(f).exists())
            .map(|f| f.to_string())
            .collect(),
    })
}

/// `lab clean` found a lab still running: cleaning would destroy it.
#[derive(Debug)]
pub struct LabRunning(pub Option<u32>);

impl std::fmt::Display for LabRunning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pid = self.0.map_or("unknown".into(), |p| p.to_string());
        write!(
            f,
            "a lab is running (pid {pid}): cleaning would destroy it. Stop it first (kill {pid}), or give --force to destroy it anyway"
        )
    }
}

impl std::error::Error for LabRunning {}

/// Removes everything [`find`] reports; returns what it found. While a
/// live process holds the lab lock, refuses ([`LabRunning`]) unless
/// `force`; otherwise holds the lock itself, so no lab starts half-way
/// through the clean.
pub fn clean(force: bool) -> Result<Leftovers> {
    anyhow::ensure!(crate::sys::is_root(), "lab clean needs root: run it with sudo");
    let _lock = match crate::lock::LabLock::try_acquire()? {
        Ok(lock) => Some(lock),
        Err(pid) if !force => return Err(LabRunning(pid).into()),
        Err(_) => None,
    };
    let found = find()?;
    remove(&found, true)?;
    Ok(found)
}

/// Under the lab lock, before a lab is made: removes what a killed lab
/// left (a stale namespace would fail the new lab half-way), and says so.
/// The channel controller's socket and token stay: a controller started
/// outside the lab may own them.
pub fn remove_killed_labs_leftovers() -> Result<()> {
    let mut found = find()?;
    found.files.clear();
    if found.is_empty() {
        return Ok(());
    }
    remove(&found, false)?;
    let names: Vec<&str> = found.names().map(String::as_str).collect();
    ontime_core::errln!(
        "ontime lab: removed what a killed lab left ({} process(es)): {}",
        found.processes.len(),
        names.join(", ")
    );
    Ok(())
}

fn remove(found: &Leftovers, files: bool) -> Result<()> {
    for &pid in &found.processes {
        // SAFETY: these processes are in the lab's cgroups or namespaces.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    cgroup::kill_and_remove(&cgroup::all_lab_dirs());
    for n in &found.netns {
        let _ = ip(&["netns", "del", n]);
    }
    for l in &found.links {
        // Deleting one end of a veth removes its peer too; ignore "not found".
        let _ = ip(&["link", "del", l]);
    }
    crate::disk::remove_leftovers(&found.disks);
    if files {
        for f in &found.files {
            let _ = std::fs::remove_file(f);
        }
    }
    ontime_core::sysctl::restore_leftovers()?;
    Ok(())
}
