//! Load profiles started and stopped around a measurement.
//!
//! Owns the mapping from document 001's loads to stress-ng stressors and the
//! lifetime of the stress-ng processes: a [`LoadGuard`] starts them in their
//! own process group, asks the kernel to kill them if ontime dies
//! (PR_SET_PDEATHSIG), and stops the whole group on drop. stress-ng's own
//! `--timeout` is a last line of defence. [`inject`] holds causes at
//! known times (the attribution's ground truth) and returns when it held
//! them.
//!
//! Does not measure anything else.

pub mod inject;

use anyhow::{bail, Context, Result};
use ontime_core::proc::{ChildProcess, SpawnOptions};
use serde::{Deserialize, Serialize};
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::time::Duration;

/// A load profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoadProfile {
    /// Shared memory, memory access, scheduler (context switches and
    /// yields), timers and semaphores: document 001's kernel load.
    Kernel,
    /// Disk writes and reads, sync, file create and delete.
    Io,
    /// UDP traffic on loopback.
    Net,
    /// Kernel + io + net.
    Mixed,
    /// CPU hogs.
    Cpu,
    /// Anonymous memory only (stress-ng's vm stressor, 128 MiB a worker
    /// unless the load says `bytes`):
    /// what pushes a tenant with little memory into swap (document 004).
    Memory,
}

impl FromStr for LoadProfile {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "kernel" => Ok(LoadProfile::Kernel),
            "io" => Ok(LoadProfile::Io),
            "net" => Ok(LoadProfile::Net),
            "mixed" => Ok(LoadProfile::Mixed),
            "cpu" => Ok(LoadProfile::Cpu),
            "memory" => Ok(LoadProfile::Memory),
            _ => Err(format!("unknown load '{s}': use kernel, io, net, mixed, cpu or memory")),
        }
    }
}

impl std::fmt::Display for LoadProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            LoadProfile::Kernel => "kernel",
            LoadProfile::Io => "io",
            LoadProfile::Net => "net",
            LoadProfile::Mixed => "mixed",
            LoadProfile::Cpu => "cpu",
            LoadProfile::Memory => "memory",
        };
        f.write_str(s)
    }
}

impl LoadProfile {
    /// stress-ng stressors for this profile.
    pub fn stressors(self) -> Vec<&'static str> {
        const KERNEL: [&str; 6] = ["shm", "vm", "switch", "yield", "timer", "sem"];
        const IO: [&str; 4] = ["hdd", "sync-file", "io", "dentry"];
        const NET: [&str; 1] = ["udp"];
        match self {
            LoadProfile::Kernel => KERNEL.to_vec(),
            LoadProfile::Io => IO.to_vec(),
            LoadProfile::Net => NET.to_vec(),
            LoadProfile::Mixed => KERNEL.iter().chain(IO.iter()).chain(NET.iter()).copied().collect(),
            LoadProfile::Cpu => vec!["cpu"],
            LoadProfile::Memory => vec!["vm"],
        }
    }

    /// The stress-ng command line (without the binary).
    /// `vm_bytes`: each vm worker's anonymous memory (default 128 MiB).
    pub fn args(self, workers: usize, vm_bytes: Option<u64>, temp: &std::path::Path, timeout: Duration) -> Vec<String> {
        let mut a = Vec::new();
        for s in self.stressors() {
            a.push(format!("--{s}"));
            a.push(workers.to_string());
        }
        if self.stressors().contains(&"vm") {
            a.extend(["--vm-bytes".into(), format!("{}", vm_bytes.unwrap_or(128 << 20))]);
        }
        if self.stressors().contains(&"hdd") {
            a.extend(["--hdd-bytes".into(), "64M".into()]);
        }
        a.extend([
            "--temp-path".into(),
            temp.display().to_string(),
            "--timeout".into(),
            format!("{}s", timeout.as_secs().max(1)),
            "--quiet".into(),
        ]);
        a
    }
}

/// The stress-ng command for `profile`, and the temporary directory it
/// works in (keep it alive as long as the load runs). Start it with
/// [`spawn_options`] (its own process group, dying with its parent).
pub fn command(
    profile: LoadProfile,
    workers: usize,
    vm_bytes: Option<u64>,
    max_duration: Duration,
) -> Result<(Command, tempfile::TempDir)> {
    let bin = ontime_core::caps::which("stress-ng")
        .context("stress-ng is not installed: run scripts/setup.sh or apt-get install stress-ng")?;
    if workers == 0 {
        bail!("load workers must be at least 1");
    }
    let temp = tempfile::Builder::new()
        .prefix("ontime-load-")
        .tempdir()
        .context("cannot create a temporary directory for the io load")?;
    let mut cmd = Command::new(bin);
    cmd.args(profile.args(workers, vm_bytes, temp.path(), max_duration))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    Ok((cmd, temp))
}

/// How stress-ng runs: in a process group of its own, so a stop reaches
/// every stressor worker, and killed if ontime dies.
pub fn spawn_options() -> SpawnOptions {
    SpawnOptions {
        own_group: true,
        ..Default::default()
    }
}

/// Running stress-ng; stops it (the whole process group) on drop.
pub struct LoadGuard {
    child: Option<ChildProcess>,
    profile: LoadProfile,
    _temp: tempfile::TempDir,
}

impl LoadGuard {
    /// Starts `profile` with `workers` per stressor. `max_duration` bounds
    /// stress-ng's own lifetime in case every other stop fails.
    pub fn start(profile: LoadProfile, workers: usize, max_duration: Duration) -> Result<LoadGuard> {
        let (mut cmd, temp) = command(profile, workers, None, max_duration)?;
        let child = ChildProcess::spawn("stress-ng", &mut cmd, spawn_options())?;
        LoadGuard::adopt(child, profile, temp)
    }

    /// Takes charge of a stress-ng started from [`command`] with
    /// [`spawn_options`] by the caller (e.g. inside a tenant's namespace and
    /// cgroup).
    pub fn adopt(child: ChildProcess, profile: LoadProfile, temp: tempfile::TempDir) -> Result<LoadGuard> {
        let mut g = LoadGuard {
            child: Some(child),
            profile,
            _temp: temp,
        };
        // stress-ng exits at once on a bad option: catch that here.
        std::thread::sleep(Duration::from_millis(300));
        if let Some(status) = g.child.as_mut().and_then(|c| c.try_wait()) {
            g.child = None;
            bail!("stress-ng for load '{profile}' exited at start ({status}); run it by hand to see why");
        }
        Ok(g)
    }

    pub fn profile(&self) -> LoadProfile {
        self.profile
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Stops the load: SIGTERM to the group, SIGKILL after 3 s, and no
    /// stressor worker left behind (they reparent when their parent exits).
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        child.stop();
        child.signal_group_kill();
    }
}

impl Drop for LoadGuard {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_map_to_stressors() {
        assert!(LoadProfile::Kernel.stressors().contains(&"shm"));
        assert!(LoadProfile::Io.stressors().contains(&"dentry"));
        assert_eq!(LoadProfile::Net.stressors(), vec!["udp"]);
        assert_eq!(LoadProfile::Mixed.stressors().len(), 11);
        assert!("disk".parse::<LoadProfile>().is_err());
    }

    fn group_alive(pgid: i32) -> bool {
        // SAFETY: signal 0 only checks existence.
        unsafe { libc::kill(-pgid, 0) == 0 }
    }

    #[test]
    fn starts_and_stops_the_whole_group() {
        if ontime_core::caps::which("stress-ng").is_none() {
            ontime_testkit::skip("stress-ng is not installed");
            return;
        }
        let mut g = LoadGuard::start(LoadProfile::Net, 1, Duration::from_secs(30)).unwrap();
        let pgid = g.pid().unwrap() as i32;
        assert!(group_alive(pgid));
        g.stop();
        std::thread::sleep(Duration::from_millis(100));
        assert!(!group_alive(pgid), "stress-ng processes survived stop()");
    }
}
