//! A recording analysed: [`analyze`] runs the [`Analyzer`] over a
//! recording at any set of windows and returns the [`Analysis`], the type
//! every consumer (observe's report, the lab, profile, sim) reads and
//! writes as JSON.
use std::collections::{HashMap, HashSet};

use ontime_core::duration::format_ns;
use serde::{Deserialize, Serialize};

use crate::analyze::{AnalysisOptions, Analyzer};
use crate::report::GroupReport;
pub use crate::wake_detail::WakeDetail;
pub use crate::wakeups::{WakePlacement, WakePreemption, WakePreemptionByKind, WAKE_AT_ONCE_NS};
use ontime_recording::groups::{counts_as_vcpu, is_vcpu_name};
use ontime_recording::recording::{Group, GroupKind, Recording};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RecordingInfo {
    pub mechanism: String,
    pub kernel: String,
    pub hostname: String,
    pub cpus: usize,
    pub start_realtime_ns: u64,
    pub duration_ns: u64,
    pub events: u64,
    pub lost: u64,
    /// False when the recording was cut short (no END block).
    pub complete: bool,
    pub unavailable: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Analysis {
    pub recording: RecordingInfo,
    pub windows_ns: Vec<u64>,
    /// Tenants first, then the host I/O path.
    pub groups: Vec<GroupReport>,
    /// Notes on what the figures cannot show.
    pub notes: Vec<String>,
    /// The most any thread's on-CPU time can be off by because events went
    /// missing (0 when none did).
    #[serde(default)]
    pub error_bound_ns: u64,
    /// Whether the host kept its CPUs busy while vCPUs waited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_conservation: Option<WorkConservation>,
    /// Wake-ups by who woke whom onto whom, and where the run-queue waits
    /// came from ([`crate::wake_detail::of_recording`]; `observe report
    /// --wakeups` adds them, absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_detail: Option<WakeDetail>,
}

/// vCPU time spent runnable behind a busy CPU, and how much of it passed
/// while another CPU was idle: Linux (and Xen's credit) keep a run queue
/// per CPU and balance them late, so a waiting vCPU can sit behind a busy
/// CPU while another idles. A global run queue never does that.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkConservation {
    pub queued_ns: u64,
    pub queued_while_idle_ns: u64,
    /// Where the host put waking threads (tenants' and the I/O path's);
    /// absent in analyses before it was counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wakeups: Option<WakePlacement>,
}

impl WorkConservation {
    /// Share of the queued time during which a CPU idled, 0..100.
    pub fn while_idle_pct(&self) -> f64 {
        crate::report::share_pct(self.queued_while_idle_ns, self.queued_ns)
    }
}

impl Analysis {
    pub fn has_kind(&self, k: GroupKind) -> bool {
        self.groups.iter().any(|g| g.kind == k)
    }

    pub fn tenants(&self) -> impl Iterator<Item = &GroupReport> {
        self.groups.iter().filter(|g| g.kind == GroupKind::Tenant)
    }
    pub fn host_io(&self) -> Option<&GroupReport> {
        self.groups.iter().find(|g| g.kind == GroupKind::HostIo)
    }

    /// The worst tenant figures at one window length, for a table row per
    /// recording (the lab's scheduler view).
    pub fn tenant_summary(&self, window_ns: u64) -> TenantSummary {
        let at = |g: &GroupReport| g.usage.iter().find(|u| u.window_ns == window_ns).cloned();
        let max_f =
            |it: &mut dyn Iterator<Item = f64>| it.fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
        let tenants: Vec<&GroupReport> = self.tenants().collect();
        let host = self.host_io().and_then(at);
        TenantSummary {
            peak: max_f(&mut tenants.iter().filter_map(|g| at(g)?.max)),
            above_one_cpu: max_f(&mut tenants.iter().filter_map(|g| at(g)?.above.first().map(|a| a.fraction))),
            mean_steal_pct: (!tenants.is_empty())
                .then(|| tenants.iter().map(|g| g.time_shares.steal_pct).sum::<f64>() / tenants.len() as f64),
            max_steal_pct: max_f(&mut tenants.iter().map(|g| g.time_shares.steal_pct)),
            contention_p99_ns: tenants.iter().filter_map(|g| g.contention.any.p99_ns).max(),
            contention_max_ns: tenants.iter().filter_map(|g| g.contention.any.max_ns).max(),
            full_episodes: tenants.iter().map(|g| g.contention.full.count).sum(),
            host_io_min: host.as_ref().and_then(|u| u.min),
            host_io_mean: host.as_ref().and_then(|u| u.mean),
        }
    }
}

/// See [`Analysis::tenant_summary`]: maxima over tenants unless named otherwise.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TenantSummary {
    /// Highest window use of any tenant, CPUs.
    pub peak: Option<f64>,
    /// Largest share of a tenant's windows above one CPU, 0..1.
    pub above_one_cpu: Option<f64>,
    /// Steal as a share of the vCPUs' wall time (document 002), mean and
    /// worst over tenants, %.
    pub mean_steal_pct: Option<f64>,
    pub max_steal_pct: Option<f64>,
    pub contention_p99_ns: Option<u64>,
    pub contention_max_ns: Option<u64>,
    /// Full-contention episodes, summed over tenants.
    pub full_episodes: u64,
    pub host_io_min: Option<f64>,
    pub host_io_mean: Option<f64>,
}

/// Threads outside any group become one group per process when the
/// recording tracked everything.
fn effective_groups(rec: &Recording) -> (Vec<Group>, HashMap<u32, u32>) {
    let mut groups = rec.meta.groups.clone();
    let mut of: HashMap<u32, u32> = HashMap::new();
    let mut by_process: HashMap<u32, u32> = HashMap::new();
    let mut tids: Vec<_> = rec.threads.values().collect();
    tids.sort_by_key(|t| t.tid);
    for t in tids {
        if let Some(g) = t.group.filter(|&g| (g as usize) < groups.len()) {
            of.insert(t.tid, g);
        } else if rec.meta.track_all && t.tgid != 0 && t.tgid != u32::MAX {
            let g = *by_process.entry(t.tgid).or_insert_with(|| {
                let name = rec
                    .threads
                    .get(&t.tgid)
                    .map(|p| p.comm.clone())
                    .unwrap_or_else(|| t.comm.clone());
                groups.push(Group {
                    name: format!("{name}[{}]", t.tgid),
                    kind: GroupKind::Tenant,
                    source: vec![],
                    vcpu_names: false,
                });
                groups.len() as u32 - 1
            });
            of.insert(t.tid, g);
        }
    }
    (groups, of)
}

pub fn analyze(rec: &Recording, opts: &AnalysisOptions) -> Analysis {
    analyze_with(rec, opts, None)
}

/// [`analyze`], handing every closed interval of every tracked thread's
/// time line to `intervals` as well (profile joins stacks to them).
pub fn analyze_with(
    rec: &Recording,
    opts: &AnalysisOptions,
    intervals: Option<crate::analyze::IntervalSink>,
) -> Analysis {
    let (groups, group_of) = effective_groups(rec);
    let mut a = Analyzer::new(rec.meta.start_ns, rec.meta.cpus, &groups, opts);
    if let Some(sink) = intervals {
        a.on_interval(sink);
    }
    let comm_of = |tid: &u32| rec.threads.get(tid).map(|t| t.comm.as_str()).unwrap_or("");
    let named: HashSet<u32> = group_of
        .iter()
        .filter(|(tid, _)| is_vcpu_name(comm_of(tid)))
        .map(|(_, &g)| g)
        .collect();
    for (tid, &g) in &group_of {
        let vcpu = counts_as_vcpu(&groups[g as usize], comm_of(tid), named.contains(&g));
        a.set_thread(*tid, g, vcpu);
    }
    for e in &rec.events {
        a.feed(e);
    }
    let end_ns = rec
        .end
        .as_ref()
        .map(|e| e.end_ns)
        .unwrap_or_else(|| rec.events.last().map(|e| e.ts).unwrap_or(rec.meta.start_ns));
    a.finish(end_ns);
    let name_of = |tid: u32| match rec.threads.get(&tid) {
        Some(t) => t.comm.clone(),
        None => format!("tid {tid}"),
    };
    let lost = rec.end.as_ref().map(|e| e.lost).unwrap_or(0);
    let mut notes = Vec::new();
    if lost > 0 {
        notes.push(format!("{lost} events were lost (ring full): figures are approximate"));
    }
    if rec.end.is_none() {
        notes.push("the recording was cut short; it is analysed up to its last event".into());
    }
    if a.anomalies > 0 {
        notes.push(format!(
            "{} switches left a CPU the thread was not seen to take (up to {} of CPU time placed by inference)",
            a.anomalies,
            format_ns(a.uncertain_ns)
        ));
    }
    if a.vanished > 0 {
        notes.push(format!(
            "{} switch-outs never reached the recorder (the kernel left no trace of them); up to {} of CPU time may be credited to the threads concerned",
            a.vanished,
            format_ns(a.vanished_ns)
        ));
    }
    if a.disorder > 0 {
        notes.push(format!("{} events arrived out of time order", a.disorder));
    }
    if a.rejected > 0 {
        notes.push(format!(
            "{} events with timestamps over an hour past the previous one were left out (corrupt recording)",
            a.rejected
        ));
    }
    let mut windows = opts.windows.clone();
    windows.sort_unstable();
    windows.dedup();
    Analysis {
        recording: RecordingInfo {
            mechanism: rec.meta.mechanism.clone(),
            kernel: rec.meta.kernel.clone(),
            hostname: rec.meta.hostname.clone(),
            cpus: rec.meta.cpus,
            start_realtime_ns: rec.meta.start_realtime_ns,
            duration_ns: end_ns.saturating_sub(rec.meta.start_ns),
            events: rec.events.len() as u64,
            lost,
            complete: rec.end.is_some(),
            unavailable: rec.meta.unavailable.clone(),
        },
        windows_ns: windows,
        groups: a.report(&name_of),
        notes,
        error_bound_ns: a.uncertain_ns + a.vanished_ns,
        work_conservation: Some(WorkConservation {
            queued_ns: a.queued_ns,
            queued_while_idle_ns: a.queued_while_idle_ns,
            wakeups: Some(a.wake_placement),
        }),
        wake_detail: None,
    }
}
