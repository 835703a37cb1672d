//! A tenant's cgroup: CPU quota and weight, cpuset, memory limit, on cgroup
//! v1 (separate cpu, cpuset and memory hierarchies, as on this machine) or
//! v2 (one unified hierarchy).

use crate::sys;
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub use ontime_core::cgroup::{detect, Version, ROOT};

/// Limits of one tenant's cgroup.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Limits {
    /// CPU quota as a number of CPUs (e.g. 1.5); None = unlimited.
    pub cpu_quota: Option<f64>,
    /// Relative weight (v1 shares, 2..262144, default 1024).
    pub cpu_shares: Option<u64>,
    /// CPUs the tenant may use; empty = all.
    pub cpuset: Vec<usize>,
    pub memory_bytes: Option<u64>,
    /// Swap the tenant may use beyond `memory_bytes` (document 004's swap
    /// size): v1 memory+swap (`memory.memsw.limit_in_bytes`, where the kernel
    /// accounts swap), v2 `memory.swap.max`. None leaves the host's default.
    #[serde(default)]
    pub swap_bytes: Option<u64>,
    /// Real-time runtime per second the group may use (v1 with RT group
    /// scheduling only; needed for SCHED_FIFO inside the group).
    pub rt_runtime_us: Option<u64>,
}

/// A created cgroup (in each hierarchy that applies). Dropping it does not
/// remove it: the owner calls [`Cgroup::remove`] (the sandbox's undo stack
/// does).
#[derive(Clone, Debug)]
pub struct Cgroup {
    pub version: Version,
    /// Directories, one per v1 hierarchy (or the single v2 one).
    pub dirs: Vec<PathBuf>,
}

fn v1_dir(controller: &str, rel: &str) -> PathBuf {
    Path::new(ROOT).join(controller).join(rel)
}

fn cpus_text(cpus: &[usize]) -> String {
    cpus.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",")
}

/// Writes an RT runtime, retrying for up to 2 s: a group removed just before
/// (by a previous run or `lab clean`) releases its RT bandwidth only after an
/// RCU grace period, and until then the kernel answers EINVAL.
fn write_rt_runtime(f: &Path, us: u64) -> Result<()> {
    let t0 = std::time::Instant::now();
    loop {
        match std::fs::write(f, us.to_string()) {
            Ok(()) => return Ok(()),
            Err(e)
                if matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::EBUSY))
                    && t0.elapsed() < std::time::Duration::from_secs(2) =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            Err(e) => {
                return Err(anyhow::anyhow!(
                    "cannot write '{us}' to {}: {e} (other cgroups hold the RT budget? see cpu.rt_runtime_us)",
                    f.display()
                ))
            }
        }
    }
}

/// Makes sure the lab's parent group exists and can hand on what children
/// need (cpuset cpus/mems, RT budget on v1; controllers on v2).
fn ensure_parent(version: Version, rt_budget_us: Option<u64>) -> Result<()> {
    let parent = crate::names::PREFIX;
    match version {
        Version::V1 => {
            for c in ["cpu", "cpuset", "memory"] {
                let d = v1_dir(c, parent);
                if !d.exists() {
                    std::fs::create_dir(&d)
                        .map_err(|e| anyhow::anyhow!("cannot create cgroup {}: {e}", d.display()))?;
                }
            }
            let cs = v1_dir("cpuset", parent);
            for f in ["cpuset.cpus", "cpuset.mems"] {
                if sys::read_trim(&cs.join(f))?.is_empty() {
                    let v = sys::read_trim(&Path::new(ROOT).join("cpuset").join(f))?;
                    sys::write(&cs.join(f), &v)?;
                }
            }
            if let Some(b) = rt_budget_us {
                let f = v1_dir("cpu", parent).join("cpu.rt_runtime_us");
                if f.exists() {
                    write_rt_runtime(&f, b)?;
                }
            }
        }
        Version::V2 => {
            let d = Path::new(ROOT).join(parent);
            if !d.exists() {
                std::fs::create_dir(&d).map_err(|e| anyhow::anyhow!("cannot create cgroup {}: {e}", d.display()))?;
            }
            // Best effort: a controller the root does not delegate is
            // reported when a limit that needs it is written.
            for c in ["+cpu", "+cpuset", "+memory"] {
                let _ = sys::write(&Path::new(ROOT).join("cgroup.subtree_control"), c);
                let _ = sys::write(&d.join("cgroup.subtree_control"), c);
            }
        }
    }
    Ok(())
}

/// True when the v1 cpu controller has RT group scheduling (cpu.rt_runtime_us).
pub fn has_rt_group_sched() -> bool {
    Path::new(ROOT).join("cpu").join("cpu.rt_runtime_us").exists()
}

impl Cgroup {
    /// Creates the group `rel` (e.g. "ontime/t0") with `limits`. On error,
    /// whatever was created is removed again.
    pub fn create(version: Version, rel: &str, limits: &Limits, parent_rt_budget_us: Option<u64>) -> Result<Cgroup> {
        ensure_parent(version, parent_rt_budget_us)?;
        let dirs: Vec<PathBuf> = match version {
            Version::V1 => ["cpu", "cpuset", "memory"].iter().map(|c| v1_dir(c, rel)).collect(),
            Version::V2 => vec![Path::new(ROOT).join(rel)],
        };
        let cg = Cgroup { version, dirs };
        let mut made = Vec::new();
        for d in &cg.dirs {
            if let Err(e) = std::fs::create_dir(d) {
                if e.kind() != std::io::ErrorKind::AlreadyExists {
                    for m in made.iter().rev() {
                        let _ = std::fs::remove_dir(m);
                    }
                    bail!("cannot create cgroup {}: {e}", d.display());
                }
            }
            made.push(d.clone());
        }
        if let Err(e) = cg.apply(limits) {
            cg.remove();
            return Err(e);
        }
        Ok(cg)
    }

    fn apply(&self, l: &Limits) -> Result<()> {
        match self.version {
            Version::V1 => {
                let (cpu, cpuset, mem) = (&self.dirs[0], &self.dirs[1], &self.dirs[2]);
                let parent_cpus = sys::read_trim(&cpuset.parent().expect("has parent").join("cpuset.cpus"))?;
                let cpus = if l.cpuset.is_empty() {
                    parent_cpus
                } else {
                    cpus_text(&l.cpuset)
                };
                sys::write(&cpuset.join("cpuset.cpus"), &cpus)?;
                let mems = sys::read_trim(&cpuset.parent().expect("has parent").join("cpuset.mems"))?;
                sys::write(&cpuset.join("cpuset.mems"), &mems)?;
                if let Some(q) = l.cpu_quota {
                    let period = 100_000u64;
                    sys::write(&cpu.join("cpu.cfs_period_us"), &period.to_string())?;
                    sys::write(
                        &cpu.join("cpu.cfs_quota_us"),
                        &((q * period as f64).round() as u64).to_string(),
                    )?;
                }
                if let Some(s) = l.cpu_shares {
                    sys::write(&cpu.join("cpu.shares"), &s.to_string())?;
                }
                if let Some(rt) = l.rt_runtime_us {
                    let f = cpu.join("cpu.rt_runtime_us");
                    if f.exists() {
                        write_rt_runtime(&f, rt)?;
                    }
                }
                if let Some(m) = l.memory_bytes {
                    sys::write(&mem.join("memory.limit_in_bytes"), &m.to_string())?;
                }
                if let Some(sw) = l.swap_bytes {
                    let Some(m) = l.memory_bytes else {
                        bail!("a swap limit needs a memory limit (tenant.memory)");
                    };
                    let f = mem.join("memory.memsw.limit_in_bytes");
                    if !f.exists() {
                        bail!(
                            "this kernel does not account swap per cgroup (no memory.memsw.limit_in_bytes; boot with swapaccount=1): tenant.swap cannot be enforced"
                        );
                    }
                    sys::write(&f, &(m + sw).to_string())?;
                }
            }
            Version::V2 => {
                let d = &self.dirs[0];
                if !l.cpuset.is_empty() {
                    sys::write(&d.join("cpuset.cpus"), &cpus_text(&l.cpuset))?;
                }
                if let Some(q) = l.cpu_quota {
                    let period = 100_000u64;
                    sys::write(
                        &d.join("cpu.max"),
                        &format!("{} {period}", (q * period as f64).round() as u64),
                    )?;
                }
                if let Some(s) = l.cpu_shares {
                    // v1 shares 2..262144 (default 1024) -> v2 weight 1..10000 (default 100).
                    let w = (1 + (s.saturating_sub(2)) * 9999 / 262142).clamp(1, 10000);
                    sys::write(&d.join("cpu.weight"), &w.to_string())?;
                }
                if let Some(m) = l.memory_bytes {
                    sys::write(&d.join("memory.max"), &m.to_string())?;
                }
                if let Some(sw) = l.swap_bytes {
                    let f = d.join("memory.swap.max");
                    if !f.exists() {
                        bail!(
                            "this kernel has no memory.swap.max (no swap accounting): tenant.swap cannot be enforced"
                        );
                    }
                    sys::write(&f, &sw.to_string())?;
                }
            }
        }
        Ok(())
    }

    /// The files a new process writes its pid into to join the group.
    /// The file listing its threads (v1: `tasks` of the first hierarchy;
    /// v2: `cgroup.threads`).
    pub fn threads_file(&self) -> Option<PathBuf> {
        let d = self.dirs.first()?;
        Some(match self.version {
            Version::V1 => d.join("tasks"),
            Version::V2 => d.join("cgroup.threads"),
        })
    }

    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// Pids currently in the group.
    pub fn pids(&self) -> Vec<i32> {
        let mut out = Vec::new();
        for f in self.procs_files() {
            if let Ok(t) = std::fs::read_to_string(f) {
                out.extend(t.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The memory controller's directory (v1: the memory hierarchy's).
    fn memory_dir(&self) -> Option<&Path> {
        match self.version {
            Version::V1 => self.dirs.iter().find(|d| d.starts_with(Path::new(ROOT).join("memory"))),
            Version::V2 => self.dirs.first(),
        }
        .map(|d| d.as_path())
    }

    /// Memory the group holds that is not page cache (anonymous memory,
    /// kernel memory): for a QEMU tenant, the guest's RAM and QEMU's own.
    pub fn resident_without_cache(&self) -> Result<u64> {
        let d = self
            .memory_dir()
            .ok_or_else(|| anyhow::anyhow!("the group has no memory controller"))?;
        let stat = std::fs::read_to_string(d.join("memory.stat"))
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", d.join("memory.stat").display()))?;
        let field = |name: &str| {
            stat.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse::<u64>().ok())
        };
        let (usage, cache) = match self.version {
            Version::V1 => (sys::read_trim(&d.join("memory.usage_in_bytes"))?, field("cache")),
            Version::V2 => (sys::read_trim(&d.join("memory.current"))?, field("file")),
        };
        let usage: u64 = usage
            .parse()
            .map_err(|e| anyhow::anyhow!("{}: not a byte count: {e}", d.display()))?;
        Ok(usage.saturating_sub(cache.unwrap_or(0)))
    }

    /// Sets the group's memory limit now (the kernel reclaims page cache
    /// down to it).
    pub fn set_memory_limit(&self, bytes: u64) -> Result<()> {
        let d = self
            .memory_dir()
            .ok_or_else(|| anyhow::anyhow!("the group has no memory controller"))?;
        let f = match self.version {
            Version::V1 => d.join("memory.limit_in_bytes"),
            Version::V2 => d.join("memory.max"),
        };
        sys::write(&f, &bytes.to_string())
    }

    /// How many times the kernel's OOM killer killed a process of the
    /// group (None where the kernel does not count it).
    pub fn oom_kills(&self) -> Option<u64> {
        let d = self.memory_dir()?;
        let f = match self.version {
            Version::V1 => d.join("memory.oom_control"),
            Version::V2 => d.join("memory.events"),
        };
        std::fs::read_to_string(f)
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
    }

    /// Kills every process in the group and removes its directories.
    pub fn remove(&self) {
        kill_and_remove(&self.dirs);
    }
}

/// SIGKILLs the processes in `dirs` (cgroup directories), waits for them to
/// leave, and removes the directories (deepest first).
pub fn kill_and_remove(dirs: &[PathBuf]) {
    for _ in 0..50 {
        let mut any = false;
        for d in dirs {
            if let Ok(t) = std::fs::read_to_string(d.join("cgroup.procs")) {
                for pid in t.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                    any = true;
                    // SAFETY: signalling a process in our own cgroup.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
        }
        if !any {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for d in dirs {
        let _ = std::fs::remove_dir(d);
    }
}

/// Every cgroup directory of the lab (children before parents).
pub fn all_lab_dirs() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let roots: Vec<PathBuf> = match detect() {
        Some(Version::V1) => ["cpu", "cpuset", "memory", "cpuacct"]
            .iter()
            .map(|c| Path::new(ROOT).join(c))
            .collect(),
        Some(Version::V2) => vec![PathBuf::from(ROOT)],
        None => vec![],
    };
    for r in roots {
        let top = r.join(crate::names::PREFIX);
        if top.is_dir() {
            walk(&top, &mut out);
        }
    }
    out
}

fn walk(d: &Path, out: &mut Vec<PathBuf>) {
    if let Ok(rd) = std::fs::read_dir(d) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                walk(&e.path(), out);
            }
        }
    }
    out.push(d.to_path_buf());
}
