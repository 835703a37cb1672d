//! The application layer without per-call tracing: each tracked thread's
//! I/O counters (`/proc/TID/task/TID/io`: bytes and calls of the read and
//! write families, files or not) since the recording began. Threads that
//! end during the recording are counted by the BPF program at their exit
//! (`task_exit` in bpf/io.bpf.c), which this reader's baselines feed.

use std::collections::HashMap;
use std::path::Path;

use crate::io_layout::AppCounters;
use crate::targets::{cgroup_tree, Targets};

/// One thread's counters: (rchar, wchar, syscr, syscw).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadIo {
    pub rchar: u64,
    pub wchar: u64,
    pub syscr: u64,
    pub syscw: u64,
}

impl ThreadIo {
    fn since(self, base: ThreadIo) -> ThreadIo {
        ThreadIo {
            rchar: self.rchar.saturating_sub(base.rchar),
            wchar: self.wchar.saturating_sub(base.wchar),
            syscr: self.syscr.saturating_sub(base.syscr),
            syscw: self.syscw.saturating_sub(base.syscw),
        }
    }

    fn add(&mut self, o: ThreadIo) {
        self.rchar += o.rchar;
        self.wchar += o.wchar;
        self.syscr += o.syscr;
        self.syscw += o.syscw;
    }

    /// The text of a `/proc/.../io` file.
    pub fn parse(text: &str) -> Option<ThreadIo> {
        let mut io = ThreadIo::default();
        let mut seen = 0;
        for line in text.lines() {
            let Some((k, v)) = line.split_once(':') else { continue };
            let Ok(v) = v.trim().parse() else { continue };
            let slot = match k {
                "rchar" => &mut io.rchar,
                "wchar" => &mut io.wchar,
                "syscr" => &mut io.syscr,
                "syscw" => &mut io.syscw,
                _ => continue,
            };
            *slot = v;
            seen += 1;
        }
        (seen == 4).then_some(io)
    }
}

/// A living thread's counters; None when it is gone or a zombie (an
/// exited thread was counted at its exit).
fn thread_io(tid: u32) -> Option<ThreadIo> {
    let dir = format!("/proc/{tid}/task/{tid}");
    let stat = std::fs::read_to_string(format!("{dir}/stat")).ok()?;
    let state = stat.rsplit_once(')')?.1.split_whitespace().next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    ThreadIo::parse(&std::fs::read_to_string(format!("{dir}/io")).ok()?)
}

/// Thread ids in a cgroup (v2 `cgroup.threads`, v1 `tasks`).
fn cgroup_threads(dir: &Path) -> Vec<u32> {
    ["cgroup.threads", "tasks"]
        .iter()
        .find_map(|f| std::fs::read_to_string(dir.join(f)).ok())
        .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// Thread ids of a process.
fn process_threads(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Every thread of the targets now, with its group.
fn threads_of(targets: &Targets) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    for (gi, g) in targets.groups.iter().enumerate() {
        let gi = gi as u32;
        for &pid in &g.pids {
            out.extend(process_threads(pid).into_iter().map(|t| (t, gi)));
        }
        for cg in &g.cgroups {
            for dir in cgroup_tree(cg) {
                out.extend(cgroup_threads(&dir).into_iter().map(|t| (t, gi)));
            }
        }
    }
    out.sort_unstable();
    out.dedup_by_key(|x| x.0);
    out
}

/// Reads the targets' thread counters against their values at the start.
pub struct AppCounterReader {
    baseline: HashMap<u32, ThreadIo>,
}

impl AppCounterReader {
    /// The reader, and each living thread's counters now: the baselines
    /// the exit program subtracts.
    pub fn start(targets: &Targets) -> AppCounterReader {
        let baseline = threads_of(targets)
            .into_iter()
            .filter_map(|(tid, _)| Some((tid, thread_io(tid)?)))
            .collect();
        AppCounterReader { baseline }
    }

    pub fn baselines(&self) -> impl Iterator<Item = (u32, ThreadIo)> + '_ {
        self.baseline.iter().map(|(&t, &io)| (t, io))
    }

    /// Each group's counters since the start: its living threads' growth
    /// plus `exited` (the exit program's sums, per group index).
    pub fn sample(&mut self, targets: &Targets, exited: &HashMap<u32, ThreadIo>) -> Vec<AppCounters> {
        let mut sums: HashMap<u32, ThreadIo> = exited.clone();
        let mut alive = HashMap::new();
        for (tid, group) in threads_of(targets) {
            let Some(now) = thread_io(tid) else { continue };
            let base = self.baseline.get(&tid).copied().unwrap_or_default();
            sums.entry(group).or_default().add(now.since(base));
            alive.insert(tid, base);
        }
        // A thread id seen again later is a new thread: it starts at zero.
        self.baseline.retain(|t, _| alive.contains_key(t));
        let mut out: Vec<AppCounters> = (0..targets.groups.len() as u32)
            .map(|group| {
                let s = sums.get(&group).copied().unwrap_or_default();
                AppCounters {
                    group,
                    rchar: s.rchar,
                    wchar: s.wchar,
                    syscr: s.syscr,
                    syscw: s.syscw,
                }
            })
            .collect();
        out.sort_by_key(|a| a.group);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_io_text_is_parsed_and_incomplete_text_refused() {
        let text = "rchar: 323934931\nwchar: 323929600\nsyscr: 632687\nsyscw: 632675\nread_bytes: 0\nwrite_bytes: 0\ncancelled_write_bytes: 0\n";
        assert_eq!(
            ThreadIo::parse(text),
            Some(ThreadIo {
                rchar: 323934931,
                wchar: 323929600,
                syscr: 632687,
                syscw: 632675
            })
        );
        assert_eq!(ThreadIo::parse("rchar: 1\nwchar: 2\n"), None);
    }

    #[test]
    fn this_threads_reads_are_counted_since_the_start() {
        let me = std::process::id();
        let targets = Targets::of(vec![crate::targets::TargetGroup::process("me", me)]);
        let mut r = AppCounterReader::start(&targets);
        let before = r.sample(&targets, &HashMap::new())[0];
        let data = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let after = r.sample(&targets, &HashMap::new())[0];
        assert!(
            after.rchar >= before.rchar + data.len() as u64,
            "{before:?} -> {after:?} after reading {} bytes",
            data.len()
        );
        assert!(after.syscr > before.syscr);
    }
}
