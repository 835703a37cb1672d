//! The plan's and the check's own text: a table per host (tenants, vCPUs
//! and the I/O path, mean and 100 ms peak CPU, the scheduler, whether every
//! tenant keeps its target and the worst prediction), then what did not fit
//! and how the usual mean-CPU packing fares.

use crate::{CheckReport, HostPrediction, PlanReport};
use ontime_core::duration::format_ns;
use ontime_core::export::TextReport;
use std::fmt::Write as _;

fn worst(h: &HostPrediction) -> String {
    h.tenants
        .iter()
        .max_by(|a, b| {
            let r = |t: &crate::TenantPrediction| {
                t.predicted_ns
                    .map_or(f64::INFINITY, |v| v as f64 / t.target_ns.max(1) as f64)
            };
            r(a).total_cmp(&r(b))
        })
        .map(|t| {
            format!(
                "{} {} (target {}){}",
                t.percentile,
                t.predicted_ns.map_or("n/a".into(), format_ns),
                format_ns(t.target_ns),
                if t.missed > 0 {
                    format!(", {} missed", t.missed)
                } else {
                    String::new()
                }
            )
        })
        .unwrap_or_default()
}

fn inputs(notes: &[String]) -> String {
    notes.iter().map(|n| format!("measured: {n}\n")).collect()
}

fn host_table(hosts: &[HostPrediction]) -> String {
    let mut s = format!(
        "{:<10} {:>7} {:>9} {:>8} {:>10} {:>7} {:<26} {:<5} worst predicted\n",
        "host", "tenants", "vCPUs+IO", "mean CPU", "100ms peak", "I/O CPU", "scheduler", "keeps"
    );
    for h in hosts {
        let _ = writeln!(
            s,
            "{:<10} {:>7} {:>9} {:>8.2} {:>10.2} {:>7.2} {:<26} {:<5} {}",
            h.instance,
            h.tenants.len(),
            format!("{}+{}", h.vcpus, h.io_vcpus),
            h.mean_cpu,
            h.peak_100ms_cpu,
            h.io_cpu,
            match &h.pinning {
                Some(_) if h.soft_pinned => format!("{} +I/O soft-pinned", h.scheduler),
                Some(_) => format!("{} +I/O pinned", h.scheduler),
                None => h.scheduler.to_string(),
            },
            if h.meets { "yes" } else { "NO" },
            worst(h)
        );
    }
    for h in hosts {
        if let Some(p) = &h.pinning {
            let _ = writeln!(s, "{}: pinned by the planner: {p}", h.instance);
        }
        if let Some(why) = &h.not_simulated {
            let _ = writeln!(s, "{}: not simulated: {why}", h.instance);
        }
    }
    s
}

impl TextReport for PlanReport {
    fn text(&self) -> String {
        let r = self;
        let mut s = format!(
            "ontime plan: {} tenants on {} hosts, every host verified by the simulator ({:.1} s)\n",
            r.tenants,
            r.hosts.len(),
            r.elapsed_s
        );
        let _ = writeln!(s, "{}", r.verified_with);
        s += &inputs(&r.inputs);
        s += &host_table(&r.hosts);
        for (t, why) in &r.unplaced {
            let _ = writeln!(s, "unplaced: {t}: {why}");
        }
        let m = &r.mean_cpu_packing;
        let _ = writeln!(
        s,
        "\nusual practice ({}): {} hosts on paper; {} of them break a target ({} by document 000's rules, {} in the simulation; {} tenants miss){}",
        m.rule,
        m.hosts,
        m.broken_hosts.len(),
        m.broken_by_rules,
        m.broken_in_simulation,
        m.tenants_missing,
        if m.broken_hosts.is_empty() {
            String::new()
        } else {
            format!(": {}", m.broken_hosts.join(", "))
        }
    );
        match r.hosts_needed_without_limit {
            Some(n) => {
                let _ = writeln!(
                s,
                "keeping every target needs {n} hosts ({:+} against the mean-CPU packing); the input allows {}, so {} tenants stay unplaced",
                n as i64 - m.hosts as i64,
                r.hosts.len(),
                r.unplaced.len()
            );
            }
            None => {
                let _ = writeln!(
                    s,
                    "keeping every target needs {} hosts ({:+} against the mean-CPU packing)",
                    r.hosts.len(),
                    r.hosts.len() as i64 - m.hosts as i64
                );
            }
        }
        s
    }
}

impl TextReport for CheckReport {
    fn text(&self) -> String {
        let r = self;
        let mut s = format!(
            "ontime plan check: {} hosts predicted by the simulator\n",
            r.hosts.len()
        );
        let _ = writeln!(s, "{}", r.verified_with);
        s += &inputs(&r.inputs);
        s += &host_table(&r.hosts);
        if r.missing.is_empty() {
            s += "every placed tenant keeps its target\n";
        }
        for (t, h, why) in &r.missing {
            let _ = writeln!(s, "misses: {t} on {h}: {why}");
        }
        for t in &r.not_placed {
            let _ = writeln!(s, "not placed: {t}");
        }
        s
    }
}
