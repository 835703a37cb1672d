//! The agent's Prometheus exposition (text format 0.0.4, `/metrics`):
//! each tenant's figures from the latest finished window long enough for
//! them (a share that is n/a in it is left out), and the agent's
//! own counters and cost. Names follow Prometheus conventions (base units,
//! `_total` counters, `_ratio` shares).

use ontime_observe::top::esc;

use crate::wire::TenantFigures;
use std::fmt::Write as _;

#[derive(Clone, Debug, Default)]
pub struct AgentMetrics {
    pub host: String,
    pub windows_queued: u64,
    pub windows_published: u64,
    pub windows_dropped: u64,
    pub spool_bytes: u64,
    pub spool_windows: usize,
    pub cpu_ns: u64,
    pub max_rss_bytes: u64,
    /// The latest finished window's figures.
    pub tenants: Vec<TenantFigures>,
    pub last_window_end_realtime_ns: u64,
}

impl AgentMetrics {
    pub fn text(&self) -> String {
        let mut o = String::new();
        let h = format!("host=\"{}\"", esc(&self.host));
        let mut one = |name: &str, kind: &str, help: &str, v: f64| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{{h}}} {v}");
        };
        one(
            "ontime_agent_windows_total",
            "counter",
            "Windows recorded or replayed (and found in the spool at start).",
            self.windows_queued as f64,
        );
        one(
            "ontime_agent_windows_published_total",
            "counter",
            "Windows published to JetStream.",
            self.windows_published as f64,
        );
        one(
            "ontime_agent_windows_dropped_total",
            "counter",
            "Windows dropped because the spool was full.",
            self.windows_dropped as f64,
        );
        one(
            "ontime_agent_spool_bytes",
            "gauge",
            "Bytes of windows waiting in the spool.",
            self.spool_bytes as f64,
        );
        one(
            "ontime_agent_spool_windows",
            "gauge",
            "Windows waiting in the spool.",
            self.spool_windows as f64,
        );
        one(
            "ontime_agent_cpu_seconds_total",
            "counter",
            "CPU time of the agent (recorder, publisher, this exposition).",
            self.cpu_ns as f64 / 1e9,
        );
        one(
            "ontime_agent_resident_memory_max_bytes",
            "gauge",
            "Peak resident memory of the agent.",
            self.max_rss_bytes as f64,
        );
        one(
            "ontime_agent_last_window_end_seconds",
            "gauge",
            "End of the latest finished window, seconds since the epoch.",
            self.last_window_end_realtime_ns as f64 / 1e9,
        );
        let t = |name: &str| format!("{h},tenant=\"{}\"", esc(name));
        let mut per = |name: &str, kind: &str, help: &str, rows: Vec<(String, f64)>| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, v) in rows {
                let _ = writeln!(o, "{name}{{{labels}}} {v}");
            }
        };
        per(
            "ontime_tenant_steal_ratio",
            "gauge",
            "Steal in the latest window: the vCPUs' runnable-not-running share of their observed time.",
            self.tenants
                .iter()
                .filter_map(|f| Some((t(&f.name), f.steal_pct? / 100.0)))
                .collect(),
        );
        per(
            "ontime_tenant_window_cpus_max",
            "gauge",
            "Busiest 100 ms of the latest window, in CPUs.",
            self.tenants
                .iter()
                .filter_map(|f| Some((format!("{},window=\"100ms\"", t(&f.name)), f.peak_100ms_cpus?)))
                .collect(),
        );
        per(
            "ontime_tenant_contention_ratio",
            "gauge",
            "Share of the latest window with any of the tenant's threads waiting for a CPU.",
            self.tenants
                .iter()
                .filter_map(|f| Some((t(&f.name), f.contention_pct? / 100.0)))
                .collect(),
        );
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_names_each_tenant_and_the_agents_cost() {
        let m = AgentMetrics {
            host: "h1".into(),
            windows_published: 3,
            tenants: vec![TenantFigures {
                name: "plc".into(),
                steal_pct: Some(12.5),
                peak_100ms_cpus: Some(0.75),
                contention_pct: Some(4.0),
                ..Default::default()
            }],
            ..Default::default()
        };
        let t = m.text();
        assert!(t.contains("ontime_agent_windows_published_total{host=\"h1\"} 3"), "{t}");
        assert!(
            t.contains("ontime_tenant_steal_ratio{host=\"h1\",tenant=\"plc\"} 0.125"),
            "{t}"
        );
        assert!(
            t.contains("ontime_tenant_window_cpus_max{host=\"h1\",tenant=\"plc\",window=\"100ms\"} 0.75"),
            "{t}"
        );
        // Every sample line has its HELP and TYPE.
        for l in t.lines().filter(|l| !l.starts_with('#')) {
            let name = l.split('{').next().unwrap();
            assert!(t.contains(&format!("# TYPE {name} ")), "{name}");
        }
    }
}
