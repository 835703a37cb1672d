//! Flags declared once for every verb that records (observe record and
//! top, profile record, io record): what to record and how.

use clap::Args;
use ontime_trace::recorder::Mechanism;
use ontime_trace::targets::{TargetSpecs, Targets};

/// What to observe; shared by `record` and `top`.
#[derive(Args, Clone)]
pub struct TargetArgs {
    /// The running lab's tenants (cgroups ontime/t<i>)
    #[arg(long)]
    pub lab: bool,
    /// A tenant as a cgroup: [NAME=]PATH, absolute or relative to the cpu
    /// (v1) or unified (v2) hierarchy; repeatable
    #[arg(long, value_name = "[NAME=]PATH")]
    pub cgroup: Vec<String>,
    /// A tenant as a process (all its threads and later children): [NAME=]PID; repeatable
    #[arg(long, value_name = "[NAME=]PID")]
    pub pid: Vec<String>,
    /// A QEMU/KVM guest by its -name (guest=NAME), as QEMU, libvirt or the lab started it; vCPU threads are `CPU n/KVM` or `CPU n/TCG`; repeatable
    #[arg(long, value_name = "NAME")]
    pub guest: Vec<String>,
    /// Everything: every task's wake-ups; untargeted threads are grouped by process
    #[arg(long)]
    pub all: bool,
    /// Thread names of the host I/O path (`*` = any suffix), added to
    /// relay*, ontime-relay*, vhost-*, ksoftirqd/*; repeatable
    #[arg(long, value_name = "PATTERN")]
    pub host_io: Vec<String>,
}

impl TargetArgs {
    /// Parsed by the trace crate (the lab uses the same); a bad target is
    /// a usage error.
    pub fn resolve(&self) -> anyhow::Result<Targets> {
        TargetSpecs {
            lab: self.lab,
            cgroups: self.cgroup.clone(),
            pids: self.pid.clone(),
            guests: self.guest.clone(),
            all: self.all,
            host_io: self.host_io.clone(),
        }
        .resolve()
        .map_err(|e| crate::usage(e.0))
    }
}

/// `--mechanism`, declared once for record and top.
#[derive(Args)]
pub struct MechanismFlag {
    /// How events leave the kernel: bpf (filtered in the kernel, cheapest),
    /// perf (perf tracepoints, every event copied out), or auto (bpf, then perf)
    #[arg(long, default_value = "auto")]
    pub mechanism: Mechanism,
}
