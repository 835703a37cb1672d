//! The late events a probe kept in its JSON result (`late_events` of a
//! crawl or cyclic result, `--explain` or `--keep-late`, and the lab's
//! tenants), read typed; and a lab run's tenants explained together on
//! the run's recording (`explain.json`).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use ontime_core::late::{LateSet, ProbeEvent};
use ontime_recording::recording::Recording;
use serde::{Deserialize, Serialize};

use crate::summary::RunExplanation;

/// What is read of a probe's result: its late events, and whether it is a
/// crawl's (a crawl has a send lag).
#[derive(Deserialize)]
struct Kept {
    #[serde(default)]
    late_events: Option<LateSet>,
    #[serde(default)]
    send_lag: Option<serde::de::IgnoredAny>,
}

/// A probe result's late events and what they are ("polls sent late" or
/// "wake-ups"); None when it kept none.
pub fn read(path: &Path) -> Result<Option<(LateSet, &'static str)>> {
    let text = ontime_core::fsio::read_text_capped(path, "probe result", 256 << 20)?;
    let kept: Kept = serde_json::from_str(&text)
        .map_err(|e| ontime_core::bad_input(format!("{}: not a probe result: {e}", path.display())))?;
    let what = if kept.send_lag.is_some() {
        "polls sent late"
    } else {
        "wake-ups"
    };
    Ok(kept.late_events.map(|l| (l, what)))
}

/// A lab run's `explain.json`: each tenant's late events explained.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunExplanations {
    /// By tenant name (t0, t1, ...).
    pub tenants: BTreeMap<String, TenantExplanation>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TenantExplanation {
    /// "polls sent late" or "wake-ups".
    pub what: String,
    pub explanation: RunExplanation,
}

/// The late events each tenant's `tN.json` in `dir` kept: (tenant name,
/// events, what they are), for those that kept any.
pub fn read_tenants(dir: &Path, tenants: usize) -> Result<Vec<(String, LateSet, &'static str)>> {
    let mut out = Vec::new();
    for i in 0..tenants {
        let file = dir.join(format!("t{i}.json"));
        if file.exists() {
            if let Some((late, what)) = read(&file)? {
                out.push((format!("t{i}"), late, what));
            }
        }
    }
    Ok(out)
}

/// Explains every `tN.json` in `dir` that kept late events, on `rec`;
/// None when none did.
pub fn explain_tenants(rec: &Recording, dir: &Path, tenants: usize) -> Result<Option<RunExplanations>> {
    let sets = read_tenants(dir, tenants)?;
    let events: Vec<ProbeEvent> = sets.iter().flat_map(|(_, l, _)| l.events.iter().copied()).collect();
    let tl = crate::timeline::Timeline::from_recording(rec, &crate::summary::probe_tids(&events));
    Ok(explain_sets_on(&tl, rec, sets))
}

pub(crate) fn explain_sets_on(
    tl: &crate::timeline::Timeline,
    rec: &Recording,
    sets: Vec<(String, LateSet, &'static str)>,
) -> Option<RunExplanations> {
    let mut out = RunExplanations::default();
    for (name, late, what) in sets {
        let explanation = crate::summary::explain_run_on(
            tl,
            rec,
            &late.events,
            late.late,
            late.threshold_ns,
            &late.threshold_from,
        );
        out.tenants.insert(
            name,
            TenantExplanation {
                what: what.to_string(),
                explanation,
            },
        );
    }
    (!out.tenants.is_empty()).then_some(out)
}

/// As [`explain_tenants`], on the stretches of windows a flight recorder
/// kept (`summary::explain_stretches`), each read once for all tenants.
pub fn explain_tenants_in(
    stretches: &[Vec<std::path::PathBuf>],
    dir: &Path,
    tenants: usize,
) -> Result<Option<RunExplanations>> {
    let sets = read_tenants(dir, tenants)?;
    let refs: Vec<&LateSet> = sets.iter().map(|(_, l, _)| l).collect();
    let explained = crate::summary::explain_stretches(stretches, &refs);
    let mut out = RunExplanations::default();
    for ((name, _, what), explanation) in sets.into_iter().zip(explained) {
        out.tenants.insert(
            name,
            TenantExplanation {
                what: what.to_string(),
                explanation,
            },
        );
    }
    Ok((!out.tenants.is_empty()).then_some(out))
}
