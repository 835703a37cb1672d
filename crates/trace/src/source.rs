//! Where scheduler events come from, behind one trait: BPF programs on the
//! sched tracepoints (`bpf`), or perf tracepoint sampling where BPF cannot
//! load (`perf`). The recorder drives a source; the sources know nothing of
//! the recorder.

use anyhow::Result;
use std::time::Duration;

use crate::event::Event;

/// What the kernel side of a recording cost, read when it ends.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SourceCost {
    pub kernel_run_ns: Option<u64>,
    pub kernel_runs: Option<u64>,
    /// Events the kernel dropped without counting them as ring loss.
    pub extra_lost: u64,
}

/// Where scheduler events come from: BPF programs, or perf tracepoint
/// sampling where BPF cannot load.
pub(crate) trait EventSource {
    fn mechanism(&self) -> &'static str;
    fn attach(&mut self) -> Result<()>;
    /// Waits at most `timeout` for the kernel to report a filling buffer.
    fn wait(&mut self, timeout: Duration);
    /// Appends what the kernel delivered, in time order, and the comms
    /// carried by forks and execs. After `detach`, returns everything left.
    fn drain(&mut self, out: &mut Vec<Event>, comms: &mut Vec<(u32, String)>) -> Result<()>;
    fn detach(&mut self);
    /// The group of a tracked thread.
    fn group_of(&mut self, tid: u32) -> Option<u32>;
    /// Tracks `tid` from now on (wake-ups and migrations included).
    fn track(&mut self, tid: u32, group: u32);
    /// Picks up target cgroups created since the last call.
    fn rescan(&mut self) -> Result<()>;
    fn lost(&mut self) -> u64;
    fn cost(&mut self) -> SourceCost;
}

/// CPU time of the calling thread (a recorder's reader), ns.
pub fn thread_cpu_ns() -> u64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we pass.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    ontime_core::time::rusage_cpu_ns(&ru)
}
