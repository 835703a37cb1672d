//! The join: every tracked thread's time line (from the scheduler events,
//! exact) split into document 002's classes, and stack samples charged
//! with on-CPU time, steal and blocked time.
//!
//! Classes, summing to the thread's observed wall time:
//! run (on a CPU), idle (asleep by its own choice: for a QEMU vCPU thread
//! the guest halted), steal: runqueue (runnable while another task ran on
//! its CPU, split by who: another tenant, its own tenant's other threads,
//! the host I/O path, other host work, or an idle CPU waking up), steal:
//! host (VM exits other than HLT; needs KVM) and I/O wait (blocked,
//! uninterruptible).
//!
//! Attribution (document 002): a blank interval (steal or I/O wait) is
//! charged to the stack sampled just before it when the sample just after
//! it is the same thread in the same function; otherwise it is left
//! uncharged and counted as such. "The same function" is the program's
//! own innermost function (its innermost user-space frame: a sample taken
//! inside a system call or an interrupt has kernel frames on top that
//! differ from sample to sample), or the kernel leaf for kernel threads. Scheduler events make the intervals
//! exact, where document 002 counted missing samples. A thread's on-CPU
//! time (exact) is spread evenly over its samples; a thread that ran but
//! was never sampled shows as `[unsampled]`.
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use ontime_sched::analyze::{AnalysisOptions, Interval, Place};
use ontime_trace::event::kind;
use ontime_trace::recording::{GroupKind, Recording};
use serde::{Deserialize, Serialize};

use crate::symbols::Symbols;

/// Who ran while a thread waited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StealBy {
    /// Another tenant's threads.
    pub other_tenant_ns: u64,
    /// The thread's own tenant (its other threads).
    pub own_tenant_ns: u64,
    /// The host I/O path (relay, vhost, ksoftirqd).
    pub host_io_ns: u64,
    /// Any other host task.
    pub other_host_ns: u64,
    /// Nobody: the CPU was idle and waking up (wake-up latency).
    pub wakeup_ns: u64,
}

impl StealBy {
    pub fn total(&self) -> u64 {
        self.other_tenant_ns + self.own_tenant_ns + self.host_io_ns + self.other_host_ns + self.wakeup_ns
    }
    fn add(&mut self, o: &StealBy) {
        self.other_tenant_ns += o.other_tenant_ns;
        self.own_tenant_ns += o.own_tenant_ns;
        self.host_io_ns += o.host_io_ns;
        self.other_host_ns += o.other_host_ns;
        self.wakeup_ns += o.wakeup_ns;
    }
}

/// One program's time line in classes: a thread (a vCPU), or a tenant (the
/// sum over its threads, in thread-time).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Classes {
    pub name: String,
    /// The tenant (group) it belongs to.
    pub tenant: String,
    #[serde(skip)]
    pub tenant_index: u32,
    pub tid: Option<u32>,
    /// A vCPU thread (`CPU n/KVM`, `crawl-vcpu<k>`, `cyclic<k>`, or every
    /// thread of a tenant without such names): a tenant's figures sum its
    /// vCPU threads, as observe's do.
    #[serde(default)]
    pub vcpu: bool,
    pub threads: u32,
    /// Apparent time: the wall time observed (for a tenant, summed over
    /// its threads).
    pub apparent_ns: u64,
    pub run_ns: u64,
    pub idle_ns: u64,
    pub io_wait_ns: u64,
    pub steal_runqueue_ns: u64,
    pub steal_by: StealBy,
    /// Time on a CPU inside VM exits (kvm_exit to kvm_entry: the host's
    /// code, not the guest's; part of `run_ns`): None where KVM's exit
    /// events are not recorded (no KVM on the host, or not a vCPU). An
    /// exit that ends in a halt leaves the CPU, so halts are idle, not
    /// host steal.
    pub steal_host_ns: Option<u64>,
    /// Host steal by exit reason, largest first (where the recorder saw
    /// reasons: the perf recorder does, the BPF one not yet).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steal_host_by_reason: Vec<(String, u64)>,
    /// Apparent minus steal.
    pub corrected_ns: u64,
    /// Steal charged to a function, and left uncharged (the samples around
    /// it disagree or are missing).
    pub steal_charged_ns: u64,
    pub steal_uncharged_ns: u64,
    /// Steal right after a wake-up (scheduling latency: the thread was
    /// asleep, then runnable but not yet running) and steal while
    /// preempted (it was running); they add up to `steal_runqueue_ns`.
    pub steal_after_wakeup_ns: u64,
    pub steal_preempted_ns: u64,
    pub samples: u64,
}

/// Time charged to one stack of one thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Charge {
    pub samples: u64,
    pub on_cpu_ns: u64,
    pub steal_ns: u64,
    pub blocked_ns: u64,
}

/// The joined profile, before presentation.
#[derive(Debug, Default)]
pub struct Joined {
    /// Per tracked thread, then per tenant.
    pub threads: Vec<Classes>,
    pub tenants: Vec<Classes>,
    /// (tenant index, tid, stack id) -> charge; stack id `u32::MAX` is
    /// `[unsampled]` on-CPU time.
    pub charges: HashMap<(u32, u32, u32), Charge>,
    pub tenant_names: Vec<String>,
    pub thread_names: HashMap<u32, String>,
    pub duration_ns: u64,
    /// The most the time lines can be off by, from scheduler events that
    /// never reached the recorder (ontime-sched places that time by
    /// inference).
    pub error_bound_ns: u64,
    pub notes: Vec<String>,
    /// Per tenant (index as `tenant_names`), its threads' time per bin of
    /// `bin_ns` from the recording's start: [run, idle, steal, I/O wait].
    pub series: Vec<Vec<[u64; 4]>>,
    pub bin_ns: u64,
}

/// Adds `[start, end)` to the bins it covers, in class `class`.
fn add_to_bins(bins: &mut Vec<[u64; 4]>, bin_ns: u64, start: u64, end: u64, class: usize) {
    let mut t = start;
    while t < end {
        let i = (t / bin_ns) as usize;
        let edge = ((i as u64 + 1) * bin_ns).min(end);
        if bins.len() <= i {
            bins.resize(i + 1, [0; 4]);
        }
        bins[i][class] += edge - t;
        t = edge;
    }
}

/// Stack id standing for on-CPU time no sample saw.
pub const UNSAMPLED: u32 = u32::MAX;

/// Joins `rec`'s scheduler time lines with its samples (symbolised as
/// `syms`).
pub fn join(rec: &Recording, syms: &Symbols) -> Joined {
    let collected: Rc<RefCell<Vec<Interval>>> = Rc::default();
    let sink = collected.clone();
    let analysis = ontime_sched::analyze_with(
        rec,
        &AnalysisOptions {
            windows: vec![1_000_000_000],
            series: false,
        },
        Some(Box::new(move |iv: &Interval| sink.borrow_mut().push(*iv))),
    );
    let mut intervals = std::mem::take(&mut *collected.borrow_mut());
    let vcpu_of: HashMap<u32, bool> = analysis
        .groups
        .iter()
        .flat_map(|g| g.threads.iter().map(|t| (t.tid, t.vcpu)))
        .collect();
    intervals.sort_by_key(|iv| (iv.tid, iv.start_ns));
    let group_kind = |g: u32| rec.meta.groups.get(g as usize).map(|g| g.kind);
    let group_of = |tid: u32| rec.threads.get(&tid).and_then(|t| t.group);
    let start = rec.meta.start_ns;

    // VM exits per thread: (exit, entry) pairs, relative ns. A vCPU
    // thread in an exit is on a CPU but runs the host's code, not the
    // guest's (document 002's host steal).
    let mut exits: HashMap<u32, Vec<Exit>> = HashMap::new();
    {
        let mut open: HashMap<u32, (u64, u32, u8)> = HashMap::new();
        for e in &rec.events {
            let t = e.ts.saturating_sub(rec.meta.start_ns);
            match e.kind {
                kind::KVM_EXIT => {
                    open.insert(e.a, (t, e.c, e.flags));
                }
                kind::KVM_ENTRY => {
                    if let Some((x, reason, isa)) = open.remove(&e.a) {
                        exits.entry(e.a).or_default().push(Exit {
                            start: x,
                            end: t,
                            reason,
                            isa,
                        });
                    }
                }
                _ => {}
            }
        }
    }
    // Samples per thread, in time order, with their index.
    let mut samples_of: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, s) in rec.samples.samples.iter().enumerate() {
        samples_of.entry(s.tid).or_default().push(i);
    }
    let rel = |i: usize| rec.samples.samples[i].ts.saturating_sub(start);

    let mut out = Joined {
        tenant_names: analysis.groups.iter().map(|g| g.name.clone()).collect(),
        duration_ns: analysis.recording.duration_ns,
        error_bound_ns: analysis.error_bound_ns,
        notes: analysis.notes.clone(),
        series: vec![Vec::new(); analysis.groups.len()],
        // About 15 to 60 bars: 1 s bins for runs of 15 s or more.
        bin_ns: if analysis.recording.duration_ns >= 15_000_000_000 {
            1_000_000_000
        } else {
            100_000_000
        },
        ..Joined::default()
    };
    for line in intervals.chunk_by(|a, b| a.tid == b.tid) {
        let tid = line[0].tid;
        let tenant = line[0].group;
        let tenant_name = out.tenant_names.get(tenant as usize).cloned().unwrap_or_default();
        let name = rec
            .threads
            .get(&tid)
            .map(|t| t.comm.clone())
            .unwrap_or_else(|| format!("tid {tid}"));
        out.thread_names.insert(tid, name.clone());
        let mut c = Classes {
            name,
            tenant: tenant_name,
            tenant_index: tenant,
            tid: Some(tid),
            vcpu: vcpu_of.get(&tid).copied().unwrap_or(true),
            threads: 1,
            ..Classes::default()
        };
        let empty = Vec::new();
        let samples = samples_of.get(&tid).unwrap_or(&empty);
        c.samples = samples.len() as u64;
        // Whether the thread last ran (preempted) or slept (woken) before
        // the current wait.
        let mut woken = true;
        let thread_exits = exits.get(&tid);
        if thread_exits.is_some() {
            c.steal_host_ns = Some(0);
        }
        let mut by_reason: HashMap<String, u64> = HashMap::new();
        for iv in line {
            let d = iv.end_ns - iv.start_ns;
            c.apparent_ns += d;
            if let (Some(x), Place::Running { .. }) = (thread_exits, iv.place) {
                let mut in_exits = 0;
                for (exit, ns) in overlaps(x, iv.start_ns, iv.end_ns) {
                    in_exits += ns;
                    *by_reason.entry(exit_reason_name(exit.reason, exit.isa)).or_default() += ns;
                }
                c.steal_host_ns = c.steal_host_ns.map(|h| h + in_exits);
            }
            let class = match iv.place {
                Place::Running { .. } => 0,
                Place::Sleeping => 1,
                Place::Waiting { .. } => 2,
                Place::Blocked => 3,
            };
            if let Some(bins) = out.series.get_mut(tenant as usize) {
                add_to_bins(bins, out.bin_ns, iv.start_ns, iv.end_ns, class);
            }
            match iv.place {
                Place::Running { .. } => {
                    c.run_ns += d;
                    woken = false;
                }
                Place::Sleeping => {
                    c.idle_ns += d;
                    woken = true;
                }
                Place::Blocked => {
                    woken = true;
                    c.io_wait_ns += d;
                    if let Some(stack) = charged_stack(samples, &rel, syms, iv) {
                        out.charges.entry((tenant, tid, stack)).or_default().blocked_ns += d;
                    }
                }
                Place::Waiting { behind, .. } => {
                    c.steal_runqueue_ns += d;
                    if woken {
                        c.steal_after_wakeup_ns += d;
                    } else {
                        c.steal_preempted_ns += d;
                    }
                    let who = if behind == 0 {
                        &mut c.steal_by.wakeup_ns
                    } else {
                        match group_of(behind) {
                            Some(g) if g == tenant => &mut c.steal_by.own_tenant_ns,
                            Some(g) if group_kind(g) == Some(GroupKind::HostIo) => &mut c.steal_by.host_io_ns,
                            Some(_) => &mut c.steal_by.other_tenant_ns,
                            None => &mut c.steal_by.other_host_ns,
                        }
                    };
                    *who += d;
                    match charged_stack(samples, &rel, syms, iv) {
                        Some(stack) => {
                            c.steal_charged_ns += d;
                            out.charges.entry((tenant, tid, stack)).or_default().steal_ns += d;
                        }
                        None => c.steal_uncharged_ns += d,
                    }
                }
            }
        }
        c.corrected_ns = c.apparent_ns - c.steal_runqueue_ns - c.steal_host_ns.unwrap_or(0);
        c.steal_host_by_reason = by_reason.into_iter().filter(|(_, ns)| *ns > 0).collect();
        c.steal_host_by_reason
            .sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        // On-CPU time, exact per thread, spread over its samples.
        if samples.is_empty() {
            if c.run_ns > 0 {
                out.charges.entry((tenant, tid, UNSAMPLED)).or_default().on_cpu_ns += c.run_ns;
            }
        } else {
            let n = samples.len() as u64;
            for (k, &i) in samples.iter().enumerate() {
                // Spread the remainder over the first samples: sums stay exact.
                let share = c.run_ns / n + u64::from((k as u64) < c.run_ns % n);
                let e = out.charges.entry((tenant, tid, syms.sample_stack[i])).or_default();
                e.samples += 1;
                e.on_cpu_ns += share;
            }
        }
        out.threads.push(c);
    }
    // Threads sampled but never switched while recorded (alone on a CPU
    // throughout): no time line, so their run time comes from the samples.
    let period = rec.meta.sample_period_ns.unwrap_or(0);
    let mut lone: Vec<(&u32, &Vec<usize>)> = samples_of
        .iter()
        .filter(|(tid, _)| !out.thread_names.contains_key(tid))
        .collect();
    lone.sort_by_key(|(tid, _)| **tid);
    for (&tid, samples) in lone {
        let Some(tenant) = group_of(tid).filter(|&g| (g as usize) < out.tenant_names.len()) else {
            continue;
        };
        let run = (samples.len() as u64).saturating_mul(period);
        let name = rec
            .threads
            .get(&tid)
            .map(|t| t.comm.clone())
            .unwrap_or_else(|| format!("tid {tid}"));
        out.notes.push(format!(
            "{name} [{tid}] never switched while recorded: its run time ({} samples) is estimated from the samples",
            samples.len()
        ));
        out.thread_names.insert(tid, name.clone());
        for &i in samples {
            let e = out.charges.entry((tenant, tid, syms.sample_stack[i])).or_default();
            e.samples += 1;
            e.on_cpu_ns += period;
        }
        out.threads.push(Classes {
            name,
            tenant: out.tenant_names[tenant as usize].clone(),
            tenant_index: tenant,
            tid: Some(tid),
            vcpu: true,
            threads: 1,
            apparent_ns: run,
            run_ns: run,
            corrected_ns: run,
            samples: samples.len() as u64,
            ..Classes::default()
        });
    }
    // Tenants: sums over their threads.
    let mut tenants: Vec<Classes> = out
        .tenant_names
        .iter()
        .enumerate()
        .map(|(i, n)| Classes {
            name: n.clone(),
            tenant: n.clone(),
            tenant_index: i as u32,
            ..Classes::default()
        })
        .collect();
    let has_vcpu: Vec<bool> = (0..tenants.len())
        .map(|t| out.threads.iter().any(|c| c.tenant_index as usize == t && c.vcpu))
        .collect();
    for c in &out.threads {
        if has_vcpu.get(c.tenant_index as usize) == Some(&true) && !c.vcpu {
            continue;
        }
        if let Some(s) = tenants.get_mut(c.tenant_index as usize) {
            s.threads += 1;
            s.apparent_ns += c.apparent_ns;
            s.run_ns += c.run_ns;
            s.idle_ns += c.idle_ns;
            s.io_wait_ns += c.io_wait_ns;
            s.steal_runqueue_ns += c.steal_runqueue_ns;
            s.steal_by.add(&c.steal_by);
            s.corrected_ns += c.corrected_ns;
            if let Some(h) = c.steal_host_ns {
                s.steal_host_ns = Some(s.steal_host_ns.unwrap_or(0) + h);
            }
            for (r, ns) in &c.steal_host_by_reason {
                match s.steal_host_by_reason.iter_mut().find(|x| &x.0 == r) {
                    Some(x) => x.1 += ns,
                    None => s.steal_host_by_reason.push((r.clone(), *ns)),
                }
            }
            s.steal_charged_ns += c.steal_charged_ns;
            s.steal_uncharged_ns += c.steal_uncharged_ns;
            s.steal_after_wakeup_ns += c.steal_after_wakeup_ns;
            s.steal_preempted_ns += c.steal_preempted_ns;
            s.samples += c.samples;
        }
    }
    out.tenants = tenants.into_iter().filter(|t| t.threads > 0).collect();
    out
}

/// One VM exit of a vCPU thread: kvm_exit to kvm_entry, relative ns, with
/// its reason in the numbering of `isa` (1 VMX, 2 SVM; 0 not recorded).
#[derive(Clone, Copy, Debug)]
struct Exit {
    start: u64,
    end: u64,
    reason: u32,
    isa: u8,
}

/// The exits that overlap `[a, b)` (sorted, disjoint), with how much.
fn overlaps(spans: &[Exit], a: u64, b: u64) -> impl Iterator<Item = (&Exit, u64)> {
    let first = spans.partition_point(|s| s.end <= a);
    spans[first..]
        .iter()
        .take_while(move |s| s.start < b)
        .map(move |s| (s, s.end.min(b).saturating_sub(s.start.max(a))))
}

/// A VM exit reason's name (the kernel's own, for the common ones).
fn exit_reason_name(reason: u32, isa: u8) -> String {
    let vmx = |r: u32| match r {
        0 => Some("EXCEPTION_NMI"),
        1 => Some("EXTERNAL_INTERRUPT"),
        7 => Some("INTERRUPT_WINDOW"),
        10 => Some("CPUID"),
        12 => Some("HLT"),
        18 => Some("VMCALL"),
        28 => Some("CR_ACCESS"),
        30 => Some("IO_INSTRUCTION"),
        31 => Some("MSR_READ"),
        32 => Some("MSR_WRITE"),
        40 => Some("PAUSE_INSTRUCTION"),
        44 => Some("APIC_ACCESS"),
        48 => Some("EPT_VIOLATION"),
        49 => Some("EPT_MISCONFIG"),
        52 => Some("PREEMPTION_TIMER"),
        56 => Some("APIC_WRITE"),
        _ => None,
    };
    let svm = |r: u32| match r {
        0x060 => Some("interrupt"),
        0x072 => Some("cpuid"),
        0x077 => Some("pause"),
        0x078 => Some("hlt"),
        0x07b => Some("io"),
        0x07c => Some("msr"),
        0x081 => Some("hypercall"),
        0x400 => Some("npf"),
        _ => None,
    };
    match isa {
        1 => vmx(reason & 0xffff)
            .map(String::from)
            .unwrap_or_else(|| format!("VMX {reason}")),
        2 => svm(reason)
            .map(String::from)
            .unwrap_or_else(|| format!("SVM {reason:#x}")),
        _ => "reason not recorded".into(),
    }
}

/// The stack a blank interval is charged to: the thread's sample just
/// before it, when the sample just after it is in the same leaf function.
fn charged_stack(samples: &[usize], rel: &dyn Fn(usize) -> u64, syms: &Symbols, iv: &Interval) -> Option<u32> {
    // First sample at or after the interval's end.
    let after = samples.partition_point(|&i| rel(i) < iv.end_ns);
    if after == 0 || after >= samples.len() {
        return None;
    }
    let before = samples[after - 1];
    if rel(before) > iv.start_ns {
        // A sample inside a blank interval: the thread was not on a CPU,
        // so the time line and the samples disagree; charge nothing.
        return None;
    }
    let (sb, sa) = (syms.sample_stack[before], syms.sample_stack[samples[after]]);
    let (fb, fa) = (syms.program_frame(sb)?, syms.program_frame(sa)?);
    (syms.frames[fb as usize].function == syms.frames[fa as usize].function).then_some(sb)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ontime_trace::event::{kind, Event, F_PREV_RUNNABLE};
    use ontime_trace::recording::{Group, Meta, ThreadInfo};
    use ontime_trace::sampler::SampleBatch;

    const MS: u64 = 1_000_000;

    fn switch(ms: u64, prev: u32, next: u32, flags: u8, state: u32) -> Event {
        Event {
            ts: ms * MS,
            a: prev,
            b: next,
            c: state,
            cpu: 0,
            kind: kind::SWITCH,
            flags,
        }
    }

    /// Tenant t (thread 10) and tenant u (thread 11) share one CPU. Thread
    /// 10 waits twice behind 11: the first wait sits between two samples in
    /// f (charged to f's stack), the second between g and f (uncharged).
    fn recording() -> Recording {
        let group = |name: &str| Group {
            name: name.into(),
            kind: GroupKind::Tenant,
            source: vec![],
            vcpu_names: false,
        };
        let mut samples = SampleBatch::default();
        for (ms10, tid, ip) in [(25, 10, 1), (55, 10, 1), (65, 10, 2), (95, 10, 1), (40, 11, 3)] {
            samples.push(ms10 * MS / 10, 1, tid, 0, &[], &[ip]);
        }
        samples.sort_by_time();
        let mut threads = std::collections::HashMap::new();
        for (tid, g) in [(10, 0), (11, 1)] {
            threads.insert(
                tid,
                ThreadInfo {
                    tid,
                    tgid: tid,
                    comm: format!("w{tid}"),
                    group: Some(g),
                },
            );
        }
        let mut rec = Recording::of_events(
            Meta {
                version: 1,
                mechanism: "bpf".into(),
                start_ns: 0,
                start_realtime_ns: 0,
                cpus: 1,
                kernel: "test".into(),
                hostname: "h".into(),
                groups: vec![group("t"), group("u")],
                track_all: false,
                unavailable: vec![],
                command_line: vec![],
                ontime_version: "test".into(),
                clocksource: "tsc".into(),
                sample_period_ns: Some(MS),
                io: None,
            },
            threads,
            vec![
                switch(1, 0, 10, 0, 0),
                switch(3, 10, 11, F_PREV_RUNNABLE, 0),
                switch(5, 11, 10, F_PREV_RUNNABLE, 0),
                switch(7, 10, 11, F_PREV_RUNNABLE, 0),
                switch(9, 11, 10, F_PREV_RUNNABLE, 0),
                switch(10, 10, 0, 0, 1),
            ],
            12 * MS,
        );
        rec.samples = samples;
        rec
    }

    #[test]
    fn steal_between_samples_in_one_function_is_charged_to_it_and_the_rest_is_not() {
        let rec = recording();
        // Frames: 0 = f, 1 = g, 2 = h; sample order (by time): 10@2.5 f,
        // 11@4 h, 10@5.5 f, 10@6.5 g, 10@9.5 f.
        let syms = Symbols::by_hand(&["f", "g", "h"], &[&[0], &[1], &[2]], &[0, 2, 0, 1, 0]);
        let j = join(&rec, &syms);
        let t = j.threads.iter().find(|c| c.tid == Some(10)).expect("thread 10");
        assert_eq!(t.steal_runqueue_ns, 4 * MS);
        assert_eq!((t.steal_charged_ns, t.steal_uncharged_ns), (2 * MS, 2 * MS));
        assert_eq!(t.steal_by.other_tenant_ns, 4 * MS, "behind tenant u");
        assert_eq!(t.run_ns, 5 * MS);
        assert_eq!(t.idle_ns, 2 * MS, "asleep from 10 ms to the end");
        assert_eq!(t.apparent_ns, t.run_ns + t.idle_ns + t.steal_runqueue_ns + t.io_wait_ns);
        assert_eq!(t.corrected_ns, t.apparent_ns - t.steal_runqueue_ns);
        // f's stack got the charged steal; on-CPU time is spread exactly.
        let f = j.charges[&(0, 10, 0)];
        assert_eq!((f.steal_ns, f.samples), (2 * MS, 3));
        let on_cpu: u64 = j
            .charges
            .iter()
            .filter(|(k, _)| k.1 == 10)
            .map(|(_, c)| c.on_cpu_ns)
            .sum();
        assert_eq!(on_cpu, t.run_ns);
        // The time series holds the same time, bin by bin.
        let bins = &j.series[0];
        let sum = |k: usize| bins.iter().map(|b| b[k]).sum::<u64>();
        assert_eq!((sum(0), sum(1), sum(2)), (t.run_ns, t.idle_ns, t.steal_runqueue_ns));
        assert_eq!(
            (j.bin_ns, bins.len()),
            (100 * MS, 1),
            "a 12 ms recording is one 100 ms bin"
        );
    }

    /// A thread that never switched while recorded has no time line; its
    /// run time comes from its samples and a note says so.
    /// A vCPU thread's time inside VM exits (kvm_exit to kvm_entry while it
    /// holds its CPU) is host steal, out of its run time and its corrected
    /// time.
    #[test]
    fn time_in_vm_exits_is_host_steal() {
        let mut rec = recording();
        // Exits carry VMX reasons (isa 1): 30 IO_INSTRUCTION, 48
        // EPT_VIOLATION.
        let kvm = |ms10: u64, k: u8| Event {
            ts: ms10 * MS / 10,
            a: 10,
            b: 0,
            c: if ms10 == 60 { 48 } else { 30 },
            cpu: 0,
            kind: k,
            flags: 1,
        };
        // Running 1-3 ms: an exit 1.5-2 ms; 5-7 ms: an exit 6-6.5 ms; an
        // exit from 2.9 ms lasts past its switch-out at 3 ms (0.1 ms on CPU).
        rec.events.extend([
            kvm(15, kind::KVM_EXIT),
            kvm(20, kind::KVM_ENTRY),
            kvm(29, kind::KVM_EXIT),
            kvm(50, kind::KVM_ENTRY),
            kvm(60, kind::KVM_EXIT),
            kvm(65, kind::KVM_ENTRY),
        ]);
        rec.events.sort_by_key(|e| e.ts);
        let syms = Symbols::by_hand(&["f", "g", "h"], &[&[0], &[1], &[2]], &[0, 2, 0, 1, 0]);
        let j = join(&rec, &syms);
        let t = j.threads.iter().find(|c| c.tid == Some(10)).expect("thread 10");
        assert_eq!(t.steal_host_ns, Some(MS + MS / 10));
        assert_eq!(
            t.steal_host_by_reason,
            [
                ("IO_INSTRUCTION".to_string(), 6 * MS / 10),
                ("EPT_VIOLATION".to_string(), MS / 2)
            ]
        );
        assert_eq!(t.corrected_ns, t.apparent_ns - t.steal_runqueue_ns - MS - MS / 10);
        let other = j.threads.iter().find(|c| c.tid == Some(11)).expect("thread 11");
        assert_eq!(other.steal_host_ns, None, "no exits recorded for it");
    }

    #[test]
    fn time_is_split_at_bin_edges() {
        let mut bins = Vec::new();
        add_to_bins(&mut bins, 10, 5, 27, 2);
        assert_eq!(bins, [[0, 0, 5, 0], [0, 0, 10, 0], [0, 0, 7, 0]]);
    }

    #[test]
    fn a_thread_seen_only_in_samples_is_estimated_from_them() {
        let mut rec = recording();
        rec.events.clear();
        let syms = Symbols::by_hand(&["f", "g", "h"], &[&[0], &[1], &[2]], &[0, 2, 0, 1, 0]);
        let j = join(&rec, &syms);
        let t = j.threads.iter().find(|c| c.tid == Some(10)).expect("thread 10");
        assert_eq!(t.run_ns, 4 * MS, "four samples of 1 ms");
        assert!(j.notes.iter().any(|n| n.contains("never switched")), "{:?}", j.notes);
    }
}
