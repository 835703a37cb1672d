//! What to observe: tenants as cgroups, processes or QEMU guests, and the
//! host I/O path by thread name. The groups a recording keeps and how a
//! thread is told to be a vCPU are the recording's
//! (`ontime_recording::groups`, re-exported here).
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use ontime_core::BadInput;

pub use ontime_recording::groups::{counts_as_vcpu, is_vcpu_name, matches, Group, GroupKind, VCPU_PATTERNS};

/// One tenant to observe. Its threads are those in any of `cgroups` (and
/// their sub-cgroups) and those of `pids` (all threads, and their children
/// from the moment recording starts).
#[derive(Clone, Debug, Default)]
pub struct TargetGroup {
    pub name: String,
    pub cgroups: Vec<PathBuf>,
    pub pids: Vec<u32>,
    /// Human-readable origin, kept in the recording.
    pub source: Vec<String>,
    /// Its vCPUs are the threads with vCPU names (lab tenants, QEMU guests).
    pub vcpu_names: bool,
}

#[derive(Clone, Debug, Default)]
pub struct Targets {
    pub groups: Vec<TargetGroup>,
    /// Record wake-ups of every task; threads outside any group are then
    /// grouped by process in reports.
    pub everything: bool,
    /// Thread-name patterns of the host I/O path (`*` matches any suffix).
    pub host_io: Vec<String>,
}

impl TargetGroup {
    /// A cgroup directory (and its sub-cgroups) as one tenant.
    pub fn cgroup(name: &str, dir: PathBuf, vcpu_names: bool) -> TargetGroup {
        TargetGroup {
            name: name.to_string(),
            source: vec![format!("cgroup {}", dir.display())],
            cgroups: vec![dir],
            pids: vec![],
            vcpu_names,
        }
    }

    /// A process (all its threads and later children) as one tenant.
    pub fn process(name: &str, pid: u32) -> TargetGroup {
        TargetGroup {
            name: name.to_string(),
            cgroups: vec![],
            pids: vec![pid],
            source: vec![format!("pid {pid}")],
            vcpu_names: false,
        }
    }
}

impl Targets {
    /// Just these groups: no host I/O path, no other task.
    pub fn of(groups: Vec<TargetGroup>) -> Targets {
        Targets {
            groups,
            ..Targets::default()
        }
    }
}

/// What the user named to record, as written (`--lab`, `--cgroup
/// [NAME=]PATH`, `--pid [NAME=]PID`, `--guest NAME`, `--all`,
/// `--host-io PATTERN`): parsed into [`Targets`] here, once, for every
/// verb that records and for the lab.
#[derive(Clone, Debug, Default)]
pub struct TargetSpecs {
    pub lab: bool,
    pub cgroups: Vec<String>,
    pub pids: Vec<String>,
    pub guests: Vec<String>,
    pub all: bool,
    pub host_io: Vec<String>,
}

fn split_named(spec: &str) -> (Option<&str>, &str) {
    match spec.split_once('=') {
        Some((n, v)) if !n.is_empty() => (Some(n), v),
        _ => (None, spec),
    }
}

impl TargetSpecs {
    /// The groups to record. Every failure is a target the user named
    /// that does not exist or does not parse: [`BadInput`] (the CLI exits
    /// 2), with the flag and value named.
    pub fn resolve(&self) -> std::result::Result<Targets, BadInput> {
        let bad = |m: String| BadInput(m);
        let mut groups: Vec<TargetGroup> = Vec::new();
        let root = || CgroupRoot::detect().map_err(|e| bad(format!("{e:#}")));
        if self.lab {
            groups.extend(lab_tenants(&root()?).map_err(|e| bad(format!("--lab: {e:#}")))?);
        }
        for spec in &self.cgroups {
            let (name, path) = split_named(spec);
            let dir = root()?
                .resolve(path)
                .map_err(|e| bad(format!("--cgroup {spec}: {e:#}")))?;
            let name = name.map(str::to_string).unwrap_or_else(|| {
                dir.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "root".into())
            });
            groups.push(TargetGroup::cgroup(&name, dir, false));
        }
        for spec in &self.pids {
            let (name, pid) = split_named(spec);
            let pid: u32 = pid
                .parse()
                .map_err(|_| bad(format!("--pid {spec}: '{pid}' is not a process id")))?;
            let comm = thread_identity(pid)
                .map(|(c, _)| c)
                .ok_or_else(|| bad(format!("--pid {spec}: no process {pid}")))?;
            let name = name.map(str::to_string).unwrap_or_else(|| format!("{comm}[{pid}]"));
            groups.push(TargetGroup {
                source: vec![format!("pid {pid} ({comm})")],
                ..TargetGroup::process(&name, pid)
            });
        }
        for g in &self.guests {
            groups.push(find_guest(g).map_err(|e| bad(format!("--guest {g}: {e:#}")))?);
        }
        if groups.is_empty() && !self.all {
            return Err(bad(
                "nothing to observe: name tenants with --lab, --cgroup, --pid or --guest, or use --all".into(),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for g in &groups {
            if !seen.insert(g.name.clone()) {
                return Err(bad(format!("two tenants are named {}; name them with NAME=", g.name)));
            }
        }
        let mut host_io: Vec<String> = DEFAULT_HOST_IO.iter().map(|s| s.to_string()).collect();
        host_io.extend(self.host_io.iter().cloned());
        Ok(Targets {
            groups,
            everything: self.all,
            host_io,
        })
    }
}

/// The lab's relay threads, KVM's vhost workers and softirq threads carry
/// every tenant's I/O.
pub const DEFAULT_HOST_IO: &[&str] = &["relay*", "ontime-relay*", "vhost-*", "ksoftirqd/*"];

/// The cgroup hierarchy the recorder keys on: the cpu controller's on v1,
/// the unified one on v2.
#[derive(Clone, Debug)]
pub struct CgroupRoot {
    pub path: PathBuf,
    pub v1: bool,
}

impl CgroupRoot {
    pub fn detect() -> Result<CgroupRoot> {
        use ontime_core::cgroup::{detect, v1_cpu_root, Version, ROOT};
        match (detect(), v1_cpu_root()) {
            (Some(Version::V2), _) => Ok(CgroupRoot {
                path: ROOT.into(),
                v1: false,
            }),
            (Some(Version::V1), Some(p)) => Ok(CgroupRoot {
                path: p.into(),
                v1: true,
            }),
            _ => bail!("no cgroup v2 or cgroup v1 cpu hierarchy under {ROOT}; mount one or observe by --pid"),
        }
    }

    /// A cgroup given as an absolute path or relative to this root.
    pub fn resolve(&self, cgroup: &str) -> Result<PathBuf> {
        let p = Path::new(cgroup);
        let full = if p.is_absolute() && p.starts_with("/sys/fs/cgroup") {
            p.to_path_buf()
        } else {
            self.path.join(cgroup.trim_start_matches('/'))
        };
        if !full.is_dir() {
            bail!("cgroup {cgroup} not found (looked for {})", full.display());
        }
        Ok(full)
    }
}

/// The kernfs node id the BPF program compares with: the directory's inode.
pub fn cgroup_id(dir: &Path) -> Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata(dir)
        .with_context(|| format!("cannot stat cgroup {}", dir.display()))?
        .ino())
}

/// A cgroup and every cgroup below it.
pub fn cgroup_tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        if let Ok(rd) = std::fs::read_dir(&out[i]) {
            for e in rd.flatten() {
                if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    out.push(e.path());
                }
            }
        }
        i += 1;
    }
    out
}

/// The running lab's tenants: cgroups `ontime/t<i>` in the cpu hierarchy.
pub fn lab_tenants(root: &CgroupRoot) -> Result<Vec<TargetGroup>> {
    let base = root.path.join(ontime_core::names::LAB_CGROUP);
    let mut found: Vec<(usize, PathBuf)> = std::fs::read_dir(&base)
        .with_context(|| {
            format!(
                "no lab is running ({} not found); start one with `ontime lab run`",
                base.display()
            )
        })?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            Some((ontime_core::names::tenant_index(&name)?, e.path()))
        })
        .collect();
    found.sort();
    if found.is_empty() {
        bail!("the lab has no tenants under {}", base.display());
    }
    Ok(found
        .into_iter()
        .map(|(i, p)| TargetGroup {
            name: ontime_core::names::tenant_name(i),
            source: vec![format!("cgroup {}", p.display())],
            cgroups: vec![p],
            pids: vec![],
            vcpu_names: true,
        })
        .collect())
}

/// A running QEMU process: its pid and its guest name (`-name guest=NAME`
/// or `-name NAME`, as QEMU, libvirt and the lab start them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QemuProcess {
    pub pid: u32,
    pub name: Option<String>,
    args: Vec<String>,
}

/// The guest name in a QEMU command line.
fn guest_name(args: &[String]) -> Option<String> {
    let value = args.windows(2).find(|w| w[0] == "-name").map(|w| w[1].clone())?;
    let first = value.split(',').next().unwrap_or("");
    let name = value.split(',').find_map(|p| p.strip_prefix("guest=")).unwrap_or(first);
    (!name.is_empty()).then(|| name.to_string())
}

/// Every QEMU process on the host.
pub fn qemu_processes() -> Result<Vec<QemuProcess>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").context("reading /proc")?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let is_qemu = args
            .first()
            .and_then(|a| a.rsplit('/').next())
            .is_some_and(|exe| exe.starts_with("qemu") || exe == "kvm");
        if is_qemu {
            out.push(QemuProcess {
                pid,
                name: guest_name(&args),
                args,
            });
        }
    }
    out.sort_by_key(|q| q.pid);
    Ok(out)
}

/// Picks the guest called `name`: the one QEMU process with that `-name`;
/// failing that, the one whose command line mentions `name`. None or
/// several: an error listing the candidates.
pub fn pick_guest(all: &[QemuProcess], name: &str) -> Result<TargetGroup> {
    let exact: Vec<&QemuProcess> = all.iter().filter(|q| q.name.as_deref() == Some(name)).collect();
    let hits = if exact.is_empty() {
        all.iter().filter(|q| q.args.iter().any(|a| a.contains(name))).collect()
    } else {
        exact
    };
    let list = |qs: &[&QemuProcess]| {
        qs.iter()
            .map(|q| format!("{} (pid {})", q.name.as_deref().unwrap_or("unnamed"), q.pid))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match hits.as_slice() {
        [q] => Ok(TargetGroup {
            name: name.to_string(),
            cgroups: vec![],
            pids: vec![q.pid],
            source: vec![format!("qemu guest {name} (pid {})", q.pid)],
            vcpu_names: true,
        }),
        [] if all.is_empty() => bail!("no QEMU guest named {name}: no QEMU process runs on this host"),
        [] => bail!(
            "no QEMU guest named {name}; running: {}",
            list(&all.iter().collect::<Vec<_>>())
        ),
        _ => bail!(
            "{} QEMU guests match {name}: {}; give the exact name or --pid",
            hits.len(),
            list(&hits)
        ),
    }
}

/// A QEMU guest on this host by its `-name` ([`pick_guest`]).
pub fn find_guest(name: &str) -> Result<TargetGroup> {
    pick_guest(&qemu_processes()?, name)
}

/// Every thread of a process and of its descendants living now (later
/// children are followed from fork by the BPF program).
pub fn threads_of(pid: u32) -> Result<Vec<u32>> {
    let mut parent_of: Vec<(u32, u32)> = Vec::new();
    for e in std::fs::read_dir("/proc").context("reading /proc")?.flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // Field 4 (ppid) follows the parenthesised comm, which may hold spaces.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        if let Some(ppid) = rest.split_whitespace().nth(1).and_then(|v| v.parse().ok()) {
            parent_of.push((p, ppid));
        }
    }
    let mut procs = vec![pid];
    let mut i = 0;
    while i < procs.len() {
        let p = procs[i];
        procs.extend(parent_of.iter().filter(|&&(_, pp)| pp == p).map(|&(c, _)| c));
        i += 1;
    }
    let mut tids = Vec::new();
    for p in procs {
        let dir = format!("/proc/{p}/task");
        let Ok(rd) = std::fs::read_dir(&dir) else {
            if p == pid {
                anyhow::bail!("process {pid} not found");
            }
            continue;
        };
        tids.extend(
            rd.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok())),
        );
    }
    Ok(tids)
}

/// comm and tgid of a thread, if it still exists.
pub fn thread_identity(tid: u32) -> Option<(String, u32)> {
    let comm = std::fs::read_to_string(format!("/proc/{tid}/comm")).ok()?;
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    let tgid = status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())?;
    Some((comm.trim_end().to_string(), tgid))
}

/// Cgroups of the targets (and below them) not yet in `known`, with their
/// group index; `known` is updated. Cgroups created after the start of a
/// recording are found by calling this again.
pub fn new_cgroup_ids(targets: &Targets, known: &mut HashMap<u64, u32>) -> Vec<(u64, u32)> {
    let mut fresh = Vec::new();
    for (gi, g) in targets.groups.iter().enumerate() {
        for cg in &g.cgroups {
            for dir in cgroup_tree(cg) {
                let Ok(id) = cgroup_id(&dir) else { continue };
                if known.insert(id, gi as u32).is_none() {
                    fresh.push((id, gi as u32));
                }
            }
        }
    }
    fresh
}

/// The id of the cgroup `tid` is in, in the hierarchy of `root`, read from
/// `/proc/<tid>/cgroup`; None when the thread is gone.
pub fn cgroup_of_thread(tid: u32, root: &CgroupRoot) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{tid}/cgroup")).ok()?;
    let rel = text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let ours = if root.v1 {
            controllers.split(',').any(|c| c == "cpu")
        } else {
            controllers.is_empty()
        };
        ours.then_some(path)
    })?;
    cgroup_id(&root.path.join(rel.trim_start_matches('/'))).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qemu(pid: u32, args: &[&str]) -> QemuProcess {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        QemuProcess {
            pid,
            name: guest_name(&args),
            args,
        }
    }

    #[test]
    fn a_guest_is_picked_by_its_exact_name_before_any_mention() {
        let all = [
            qemu(10, &["qemu-system-x86_64", "-name", "guest=ontime-t1,debug-threads=on"]),
            qemu(
                11,
                &["qemu-system-x86_64", "-name", "guest=ontime-t10,debug-threads=on"],
            ),
            qemu(12, &["/usr/bin/qemu-system-x86_64", "-name", "scada"]),
        ];
        assert_eq!(pick_guest(&all, "ontime-t1").unwrap().pids, vec![10]);
        assert_eq!(pick_guest(&all, "scada").unwrap().pids, vec![12]);
        let e = pick_guest(&all, "ontime-t").unwrap_err().to_string();
        assert!(
            e.contains("2 QEMU guests match ontime-t: ontime-t1 (pid 10), ontime-t10 (pid 11)"),
            "{e}"
        );
        let e = pick_guest(&all, "plc").unwrap_err().to_string();
        assert!(
            e.contains("running: ontime-t1 (pid 10), ontime-t10 (pid 11), scada (pid 12)"),
            "{e}"
        );
        assert!(pick_guest(&[], "plc")
            .unwrap_err()
            .to_string()
            .contains("no QEMU process runs"));
    }
}
