//! Flags declared once for every verb that records (observe record and
//! top, profile record, io record): what to record and how; and `-D`,
//! declared once for every verb that runs or records for a while.

use clap::{Arg, Args};
use ontime_core::duration::{format_exact, parse_ns};
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
    /// bad input ([`ontime_core::BadInput`]).
    pub fn resolve(&self) -> anyhow::Result<Targets> {
        let targets = TargetSpecs {
            lab: self.lab,
            cgroups: self.cgroup.clone(),
            pids: self.pid.clone(),
            guests: self.guest.clone(),
            all: self.all,
            host_io: self.host_io.clone(),
        }
        .resolve()?;
        Ok(targets)
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

/// `-D/--duration`, declared once with one meaning: how long the verb runs
/// (or records). Not given, it is none and each verb applies its own
/// default ([`DurationFlag::or`]) or runs until stopped
/// ([`DurationFlag::until_stopped`]); the verb says which in its help
/// (`#[command(mut_arg("duration", DurationFlag::help(..)))]`).
#[derive(Args, Clone, Copy, Debug, Default)]
pub struct DurationFlag {
    /// How long to run, e.g. 30s
    #[arg(short = 'D', long, value_parser = parse_ns)]
    duration: Option<u64>,
}

impl DurationFlag {
    /// The duration given, else the verb's default (both ns).
    pub fn or(&self, default_ns: u64) -> u64 {
        self.duration.unwrap_or(default_ns)
    }

    /// The duration given; none runs until stopped (Ctrl-C, or a verb's
    /// own end such as cyclic's `-l`).
    pub fn until_stopped(&self) -> Option<u64> {
        self.duration
    }

    /// `-D` in one verb, for its `#[command(mut_arg("duration", ...))]`:
    /// its help there, ending in the default the verb applies with
    /// [`DurationFlag::or`], written as clap writes one ("[default: 10s]").
    /// `None` for a verb that runs until stopped; `help` says so.
    pub fn help(help: &'static str, default_ns: Option<u64>) -> impl FnOnce(Arg) -> Arg {
        move |a: Arg| match default_ns {
            Some(d) => a.help(format!("{help} [default: {}]", format_exact(d))),
            None => a.help(help),
        }
    }

    /// [`DurationFlag::help`], and `-d` as a second name: the recorders
    /// (observe record and top, profile record, io record and workload)
    /// have always taken it. Not on the shared flag: cyclic's `-d` is
    /// cyclictest's distance.
    pub fn help_and_d(help: &'static str, default_ns: Option<u64>) -> impl FnOnce(Arg) -> Arg {
        let with_help = Self::help(help, default_ns);
        move |a: Arg| with_help(a).visible_short_alias('d')
    }
}
