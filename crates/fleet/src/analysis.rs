//! One window file, analysed as `observe report` and `profile report`
//! would: each tenant's steal, busiest 100 ms, contention and, with stack
//! samples, its functions' corrected time and the window's pprof.

use std::path::Path;

use anyhow::Result;
use ontime_sched::analyze::AnalysisOptions;
use ontime_trace::recording::{GroupKind, Recording};

use crate::wire::TenantFigures;

/// What a window gives: its tenants' figures, the pprof (gzipped
/// profile.proto) when it has samples, and notes.
pub struct Analysed {
    pub tenants: Vec<TenantFigures>,
    pub pprof: Option<Vec<u8>>,
    pub notes: Vec<String>,
}

/// Functions kept per tenant and window.
pub const TOP_FUNCTIONS: usize = 5;

pub fn analyse(file: &Path) -> Result<Analysed> {
    let rec = Recording::read(file)?;
    let mut tenants = tenant_figures(&rec);
    let mut notes = Vec::new();
    let mut pprof = None;
    if rec.meta.sample_period_ns.is_some() {
        match ontime_profile::profile(&rec) {
            Ok(p) => {
                for t in &mut tenants {
                    let mut f: Vec<(String, u64)> = p
                        .report
                        .functions
                        .iter()
                        .filter(|r| r.tenant == t.name)
                        .map(|r| (r.function.clone(), r.program.corrected_ns))
                        .filter(|(_, ns)| *ns > 0)
                        .collect();
                    f.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                    f.truncate(TOP_FUNCTIONS);
                    t.functions = f;
                    t.sample_period_ns = rec.meta.sample_period_ns;
                }
                pprof = Some(p.pprof_bytes()?);
                notes.extend(p.report.notes.iter().cloned());
            }
            Err(e) => notes.push(format!("no profile: {e:#}")),
        }
    }
    Ok(Analysed { tenants, pprof, notes })
}

/// Each tenant's steal, busiest 100 ms and contention (no functions).
pub fn tenant_figures(rec: &Recording) -> Vec<TenantFigures> {
    let a = ontime_sched::analyze(
        rec,
        &AnalysisOptions {
            windows: vec![100_000_000],
            series: false,
        },
    );
    a.groups
        .iter()
        .filter(|g| g.kind == GroupKind::Tenant)
        .map(|g| TenantFigures {
            name: g.name.clone(),
            steal_pct: g.time_shares.steal_pct,
            peak_100ms_cpus: g.usage.first().and_then(|u| u.max),
            contention_pct: g.contention.any_pct,
            on_cpu_ns: g.on_cpu_ns,
            functions: Vec::new(),
            sample_period_ns: None,
        })
        .collect()
}
