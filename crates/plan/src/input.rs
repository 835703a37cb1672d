//! The planning input, read from TOML:
//!
//! ```toml
//! [[host]]                   # a kind of host
//! name = "r8"                # instances are r8-1, r8-2, ...
//! cores = 8
//! scheduler = "credit"       # credit (tslice), credit2, cfs, rr (tslice), fifo, edf, rtds (budget/period)
//! tslice = "30ms"
//! io_cost = "50us"           # host I/O path CPU per packet (two per poll)
//! io_cpus = 1.0              # CPU the I/O path may take; counts as vCPUs in rule 1
//! count = 40                 # instances available (default: as many as needed)
//!
//! [[tenant]]
//! name = "bms"
//! count = 20                 # bms-1 ... bms-20
//! vcpus = 1
//! rate = 200                 # polls per second
//! points = 10                # points per request (informational)
//! cpu_per_poll = "1.4ms"     # mean CPU per answered poll, or measured:
//! # cpu_per_poll_from = "results/doc-000/runs/000-rate=100-rep1/t0.json"
//! # or from an observe analysis (`ontime observe report --json`, a lab
//! # run's observe.json): the group's CPU over rate x observed time
//! # cpu_per_poll_from = "results/doc-000/runs/000-rate=100-rep1/observe.json"
//! # observe_group = "t0"     # which group (needed when there are several)
//! # or from the fleet (`ontime plan --from-fleet`): the tenant's mean CPU
//! # and busiest 100 ms over the windows `ontime analyse` has results for
//! # fleet = "plc-host-3/bms" # HOST/TENANT, or TENANT when one host has it
//! # peak_100ms_cpu = 0.9     # busiest 100 ms in CPUs, instead of the work model's
//! work_tail = 1.5            # Pareto shape of the per-poll CPU (omit: fixed)
//! # phase = "clock"          # spread | aligned | clock: polls of a second at once,
//! #                          # with clock every such tenant of a host together
//! # work_at = "request"      # answer | request: the CPU before each request
//! one_way = "10ms"           # WAN delay each way
//! target = "100ms"           # interval error at `percentile` at most this
//! percentile = "p99.999"
//!
//! [placement]                # only for `plan check`: instance -> tenants
//! "r8-1" = ["bms-1", "bms-2"]
//! ```

use anyhow::{bail, Context, Result};
use ontime_core::duration::{opt_text_ns, text_ns};
use ontime_core::work::{Phase, WorkAt, WorkModel};
use ontime_sim::noise::{Quantiles, Stalls};
use ontime_sim::sched::MeasuredWakeups;
use ontime_sim::sched::Model;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanInput {
    #[serde(rename = "host")]
    pub hosts: Vec<HostSpec>,
    #[serde(rename = "tenant")]
    pub tenants: Vec<TenantSpec>,
    /// Host instance -> tenant names (a placement to check).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub placement: BTreeMap<String, Vec<String>>,
    /// Where measured figures came from (the fleet, fitted tails), for the
    /// report; not part of the file.
    #[serde(skip)]
    pub notes: Vec<String>,
}

/// Finds a tenant's figures by its `fleet` name.
pub type FleetLookup<'a> = dyn Fn(&str) -> Result<FleetMeasure> + 'a;

/// A tenant's CPU as the fleet measured it (`ontime analyse` results).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FleetMeasure {
    /// "HOST/TENANT".
    pub source: String,
    pub windows: u64,
    /// Wall time of those windows.
    pub observed_ns: u64,
    /// Mean CPU over that time, in CPUs.
    pub mean_cpus: f64,
    /// Busiest 100 ms of any window, in CPUs.
    pub peak_100ms_cpus: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    pub name: String,
    pub cores: usize,
    #[serde(default = "default_scheduler")]
    pub scheduler: String,
    #[serde(default, with = "opt_text_ns", skip_serializing_if = "Option::is_none")]
    pub tslice: Option<u64>,
    #[serde(default, with = "opt_text_ns", skip_serializing_if = "Option::is_none")]
    pub budget: Option<u64>,
    #[serde(default, with = "opt_text_ns", skip_serializing_if = "Option::is_none")]
    pub period: Option<u64>,
    #[serde(default = "default_io_cost", with = "text_ns")]
    pub io_cost: u64,
    #[serde(default = "one")]
    pub io_cpus: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<usize>,
}

fn default_scheduler() -> String {
    "credit".into()
}
fn default_io_cost() -> u64 {
    50_000
}
fn one() -> f64 {
    1.0
}
fn one_usize() -> usize {
    1
}
fn default_period() -> u64 {
    1_000_000_000
}
fn default_one_way() -> u64 {
    10_000_000
}
fn default_percentile() -> String {
    "p99.999".into()
}

impl HostSpec {
    pub fn scheduler(&self) -> Result<Model> {
        Model::from_name(&self.scheduler, self.tslice, self.budget, self.period)
            .map_err(|e| anyhow::anyhow!("host {}: scheduler = {e}", self.name))
    }

    /// Whole cores the I/O path holds for rule 1.
    pub fn io_vcpus(&self) -> usize {
        self.io_cpus.ceil() as usize
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantSpec {
    pub name: String,
    #[serde(default = "one_usize")]
    pub count: usize,
    #[serde(default = "one_usize")]
    pub vcpus: usize,
    pub rate: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub points: Option<u32>,
    /// Mean CPU per answered poll; or `cpu_per_poll_from`.
    #[serde(default, with = "opt_text_ns", skip_serializing_if = "Option::is_none")]
    pub cpu_per_poll: Option<u64>,
    /// A crawler's measured result (`ontime crawl --result`, or a lab
    /// run's `t<i>.json`), relative to the input file: its CPU per
    /// answered poll is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_per_poll_from: Option<String>,
    /// With `cpu_per_poll_from` naming an observe analysis: the group
    /// (tenant, cgroup, process) whose CPU this tenant's polls cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observe_group: Option<String>,
    /// The tenant as the fleet knows it ("HOST/TENANT", or "TENANT" when
    /// one host has it): with `ontime plan --from-fleet` its CPU per poll
    /// and 100 ms peak come from the fleet's results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<String>,
    /// Its busiest 100 ms, in CPUs, as measured: used by the rules instead
    /// of the work model's, and (without `work_tail`) the work tail is
    /// fitted to it so the simulation bursts as the tenant did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_100ms_cpu: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_tail: Option<f64>,
    /// Where the crawler spends a poll's CPU: "answer" (default) or
    /// "request" (before it writes the request).
    #[serde(default, skip_serializing_if = "WorkAt::is_answer")]
    pub work_at: WorkAt,
    /// How it lays out a period's polls: "spread" (default), "aligned" or
    /// "clock" (all at once, on the host's whole seconds: every such
    /// tenant on a host bursts together, document 000's knee).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    #[serde(default = "default_period", with = "text_ns")]
    pub period: u64,
    #[serde(default = "default_one_way", with = "text_ns")]
    pub one_way: u64,
    #[serde(with = "text_ns")]
    pub target: u64,
    #[serde(default = "default_percentile")]
    pub percentile: String,
}

impl TenantSpec {
    /// Takes the fleet's figures: CPU per poll from the mean over the
    /// tenant's rate, and the measured peak.
    pub fn apply(&mut self, m: &FleetMeasure) {
        self.cpu_per_poll = Some(((m.mean_cpus * 1e9 / self.rate).round() as u64).max(1));
        // A window's busiest 100 ms can read a hair above the threads'
        // CPUs (accounting at the window's edges); more than the vCPUs
        // cannot run, and the rules cap it there too.
        self.peak_100ms_cpu = Some(m.peak_100ms_cpus.min(self.vcpus as f64));
    }

    pub fn work(&self) -> WorkModel {
        WorkModel {
            mean_ns: self.cpu_per_poll.unwrap_or(0),
            tail: self.work_tail.filter(|&t| t != 0.0),
        }
    }
    /// Mean CPU over a second, in CPUs.
    pub fn mean_cpu(&self) -> f64 {
        self.rate * self.cpu_per_poll.unwrap_or(0) as f64 / 1e9
    }
    /// The percentile of the target, 0..100 (None for "max").
    pub fn target_percentile(&self) -> Result<Option<f64>> {
        if self.percentile == "max" {
            return Ok(None);
        }
        let p: f64 = self
            .percentile
            .strip_prefix('p')
            .and_then(|s| s.parse().ok())
            .filter(|p| (0.0..100.0).contains(p))
            .with_context(|| {
                format!(
                    "tenant {}: percentile = \"{}\": use e.g. p99.999 or max",
                    self.name, self.percentile
                )
            })?;
        Ok(Some(p))
    }
}

/// CPU per answered poll from a crawler's JSON result (`resources`), or
/// from an observe analysis: the group's on-CPU time divided by the polls
/// the tenant's rate makes in the observed time (the recording is taken to
/// cover steady polling).
fn measured_cpu_per_poll(path: &Path, rate: f64, group: Option<&str>) -> Result<u64> {
    // Under the input rule: a FIFO or a device named here would block the
    // plan or never end.
    let text = ontime_core::fsio::read_text(path, "crawler result or observe analysis")?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    if let Some(groups) = v.get("groups").and_then(serde_json::Value::as_array) {
        return observed_cpu_per_poll(path, groups, rate, group);
    }
    v.pointer("/resources/cpu_per_poll_ns")
        .and_then(serde_json::Value::as_u64)
        .filter(|&n| n > 0)
        .with_context(|| {
            format!(
                "{} has no resources.cpu_per_poll_ns: give a crawler's result (ontime crawl --result, or a lab run's t<i>.json) or an observe analysis (ontime observe report --json)",
                path.display()
            )
        })
}

fn observed_cpu_per_poll(path: &Path, groups: &[serde_json::Value], rate: f64, group: Option<&str>) -> Result<u64> {
    let name_of = |g: &serde_json::Value| {
        g.get("name")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let names: Vec<String> = groups.iter().map(name_of).collect();
    let chosen = match group {
        Some(want) => groups.iter().find(|g| name_of(g) == want).with_context(|| {
            format!(
                "{} has no group \"{want}\" (it has: {})",
                path.display(),
                names.join(", ")
            )
        })?,
        None if groups.len() == 1 => &groups[0],
        None => bail!(
            "{} is an observe analysis of {} groups: say which with observe_group = \"...\" (one of: {})",
            path.display(),
            groups.len(),
            names.join(", ")
        ),
    };
    let on_cpu = chosen.get("on_cpu_ns").and_then(serde_json::Value::as_u64);
    let wall = chosen
        .pointer("/time_shares/wall_ns")
        .and_then(serde_json::Value::as_u64);
    match (on_cpu, wall) {
        (Some(cpu), Some(wall)) if cpu > 0 && wall > 0 => {
            let polls = rate * wall as f64 / 1e9;
            Ok((cpu as f64 / polls).round() as u64)
        }
        _ => bail!(
            "{}: group \"{}\" has no on-CPU time over an observed wall time (on_cpu_ns, time_shares.wall_ns)",
            path.display(),
            name_of(chosen)
        ),
    }
}

/// How a plan is made and verified.
#[derive(Clone, Debug)]
pub struct PlanOptions {
    pub seed: u64,
    /// Verify hosts on this many threads at once.
    pub jobs: usize,
    /// The hosts' own noise (`ontime sim calibrate`): wake-up jitter drawn
    /// for every send, and stalls of the whole host.
    pub host_noise: Option<Quantiles>,
    pub host_stalls: Option<Stalls>,
    /// How the hosts' kernel places and preempts waking fair threads, as
    /// measured (cfs hosts only; default: the kernel's rules as written).
    pub wakeups: MeasuredWakeups,
    /// Where the noise and stalls were measured (the calibration file and
    /// the runs it read), for the verdict.
    pub calibration: Option<String>,
}

impl Default for PlanOptions {
    fn default() -> PlanOptions {
        PlanOptions {
            seed: 1,
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            host_noise: None,
            host_stalls: None,
            wakeups: MeasuredWakeups::default(),
            calibration: None,
        }
    }
}

impl PlanOptions {
    /// What every verdict rests on: the simulator's models and the
    /// calibration (or its absence).
    pub fn verified_with(&self) -> String {
        let models = "each host's scheduler model (cfs: Linux's fair class with per-CPU run queues, \
                      wake-up preemption as measured or else by EEVDF's lag and slices; \
                      credit: Xen credit1 with per-pCPU queues, ticks, BOOST and the 1 ms rate limit; \
                      credit2 and rtds: one global queue)";
        match &self.calibration {
            Some(c) => format!("simulated with {models}; calibration {c}"),
            None => format!(
                "simulated with {models}; no calibration: no host noise or stalls, so optimistic on a noisy host (give --calibration)"
            ),
        }
    }
}

/// One tenant after `count` is expanded.
#[derive(Clone, Debug, PartialEq)]
pub struct Tenant {
    pub name: String,
    pub spec: TenantSpec,
}

impl PlanInput {
    pub fn read(path: &Path) -> Result<PlanInput> {
        Self::read_measured(path, None)
    }

    /// Reads the input; `fleet` looks up a tenant's `fleet = "..."` in the
    /// fleet's results (None: such tenants need their figures in the file,
    /// as `plan -o` writes them).
    pub fn read_measured(path: &Path, fleet: Option<&FleetLookup>) -> Result<PlanInput> {
        let mut input: PlanInput = ontime_core::config::read_toml(path, "plan input")?;
        let base = path.parent().unwrap_or(Path::new("."));
        for t in &mut input.tenants {
            if let (Some(name), Some(lookup)) = (&t.fleet, fleet) {
                let m = lookup(name).with_context(|| format!("tenant {}: fleet = \"{name}\"", t.name))?;
                t.apply(&m);
                input.notes.push(format!(
                    "{}: from the fleet's {} ({} windows, {:.0} s): mean {:.3} CPUs at {} polls/s = {} per poll, busiest 100 ms {:.3} CPUs",
                    t.name,
                    m.source,
                    m.windows,
                    m.observed_ns as f64 / 1e9,
                    m.mean_cpus,
                    t.rate,
                    t.cpu_per_poll.map_or("-".into(), ontime_core::duration::format_ns),
                    m.peak_100ms_cpus
                ));
            } else if let (Some(name), None, None) = (&t.fleet, fleet, t.cpu_per_poll) {
                bail!(
                    "tenant {}: fleet = \"{name}\" takes its figures from the fleet: run with --from-fleet (and --nats), or give cpu_per_poll",
                    t.name
                );
            }
            if let (Some(from), None) = (&t.cpu_per_poll_from, t.cpu_per_poll) {
                t.cpu_per_poll = Some(
                    measured_cpu_per_poll(&base.join(from), t.rate, t.observe_group.as_deref())
                        .with_context(|| format!("tenant {}: cpu_per_poll_from = \"{from}\"", t.name))?,
                );
            }
        }
        input.validate().with_context(|| format!("in {}", path.display()))?;
        for t in &mut input.tenants {
            if let (Some(peak), None, Some(mean)) = (t.peak_100ms_cpu, t.work_tail, t.cpu_per_poll) {
                if let Some(tail) = crate::peak::fit_tail(t.rate, mean, t.vcpus, peak) {
                    t.work_tail = Some(tail);
                    input.notes.push(format!(
                        "{}: per-poll work drawn Pareto {tail:.2} so its simulated busiest 100 ms matches the measured {peak:.3} CPUs",
                        t.name
                    ));
                }
            }
        }
        Ok(input)
    }

    pub fn validate(&self) -> Result<()> {
        if self.hosts.is_empty() {
            bail!("no [[host]]: describe at least one kind of host");
        }
        if self.tenants.is_empty() {
            bail!("no [[tenant]]: describe the tenants to place");
        }
        use ontime_core::limits::{self, MAX_DURATION_NS, MAX_POLLS_PER_SECOND, MAX_SIM_CPUS, MAX_TENANTS};
        let msg = anyhow::Error::msg;
        for h in &self.hosts {
            let host = || format!("host {}", h.name);
            h.scheduler()?;
            limits::count("cores", h.cores as u64, 1, MAX_SIM_CPUS)
                .map_err(msg)
                .with_context(host)?;
            if !(h.io_cpus.is_finite() && (0.0..=h.cores as f64).contains(&h.io_cpus)) {
                bail!(
                    "{}: io_cpus = {} is out of range: give 0 .. {} (its cores)",
                    host(),
                    h.io_cpus,
                    h.cores
                );
            }
            if let Some(n) = h.count {
                limits::count("count", n as u64, 1, MAX_TENANTS)
                    .map_err(msg)
                    .with_context(host)?;
            }
            limits::duration("io_cost", h.io_cost, 0, limits::MAX_IO_COST_NS)
                .map_err(msg)
                .with_context(host)?;
        }
        let mut total = 0u64;
        for t in &self.tenants {
            let tenant = || format!("tenant {}", t.name);
            limits::count("count", t.count as u64, 1, MAX_TENANTS)
                .map_err(msg)
                .with_context(tenant)?;
            total += t.count as u64;
            if total > MAX_TENANTS {
                bail!("the tenants' counts add up to more than {MAX_TENANTS}: plan them in parts");
            }
            limits::count("vcpus", t.vcpus as u64, 1, MAX_SIM_CPUS)
                .map_err(msg)
                .with_context(tenant)?;
            limits::rate("rate", t.rate, MAX_POLLS_PER_SECOND)
                .map_err(msg)
                .with_context(tenant)?;
            limits::duration("period", t.period, limits::MIN_PERIOD_NS, MAX_DURATION_NS)
                .map_err(msg)
                .with_context(tenant)?;
            limits::duration("target", t.target, 1_000, MAX_DURATION_NS)
                .map_err(msg)
                .with_context(tenant)?;
            limits::duration("one_way", t.one_way, 0, 10_000_000_000)
                .map_err(msg)
                .with_context(tenant)?;
            if let Some(c) = t.cpu_per_poll {
                limits::duration("cpu_per_poll", c, 1, 1_000_000_000)
                    .map_err(msg)
                    .with_context(tenant)?;
            }
            if let Some(p) = t.peak_100ms_cpu {
                if !(p.is_finite() && p > 0.0 && p <= t.vcpus as f64 + 0.05) {
                    bail!(
                        "tenant {}: peak_100ms_cpu = {p} is out of range: give its busiest 100 ms in CPUs, above 0 and at most its {} vCPUs",
                        t.name,
                        t.vcpus
                    );
                }
            }
        }
        for t in &self.tenants {
            if let (None, None) = (t.cpu_per_poll, &t.cpu_per_poll_from) {
                bail!(
                    "tenant {}: give cpu_per_poll (e.g. \"1.4ms\") or cpu_per_poll_from (a crawler's result)",
                    t.name
                );
            }
            t.work()
                .validate()
                .map_err(anyhow::Error::msg)
                .with_context(|| format!("tenant {}", t.name))?;
            t.target_percentile()?;
        }
        let names = self.expanded();
        let mut seen = std::collections::HashSet::new();
        for t in &names {
            if !seen.insert(&t.name) {
                bail!(
                    "tenant name {} appears twice: names must be unique after expansion",
                    t.name
                );
            }
        }
        Ok(())
    }

    /// Every tenant, `count` copies named name-1 ... name-N (a count of 1
    /// keeps the name).
    pub fn expanded(&self) -> Vec<Tenant> {
        let mut v = Vec::new();
        for t in &self.tenants {
            for i in 1..=t.count {
                v.push(Tenant {
                    name: if t.count == 1 {
                        t.name.clone()
                    } else {
                        format!("{}-{i}", t.name)
                    },
                    spec: t.clone(),
                });
            }
        }
        v
    }

    /// The kind of host an instance name belongs to: "r8-3" -> "r8".
    pub fn host_of(&self, instance: &str) -> Option<&HostSpec> {
        self.hosts.iter().find(|h| h.name == instance).or_else(|| {
            let (kind, n) = instance.rsplit_once('-')?;
            n.parse::<usize>().ok()?;
            self.hosts.iter().find(|h| h.name == kind)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tenant's CPU per poll can come from a crawler's measured result,
    /// relative to the input file; a result without it is refused.
    #[test]
    fn cpu_per_poll_from_a_crawl_result() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("t0.json"),
            r#"{"polls": {"ok": 10}, "resources": {"cpu_per_poll_ns": 1428272}}"#,
        )
        .unwrap();
        let input = dir.path().join("in.toml");
        let text = "[[host]]\nname = 'h'\ncores = 4\n[[tenant]]\nname = 't'\nrate = 100\ncpu_per_poll_from = 't0.json'\ntarget = '10ms'\n";
        std::fs::write(&input, text).unwrap();
        let p = PlanInput::read(&input).unwrap();
        assert_eq!(p.tenants[0].cpu_per_poll, Some(1_428_272));
        assert!((p.tenants[0].mean_cpu() - 0.1428).abs() < 1e-3);
        std::fs::write(dir.path().join("t0.json"), r#"{"polls": {}}"#).unwrap();
        let e = format!("{:#}", PlanInput::read(&input).unwrap_err());
        assert!(
            e.contains("cpu_per_poll_from") && e.contains("resources.cpu_per_poll_ns"),
            "{e}"
        );
        std::fs::write(&input, text.replace("cpu_per_poll_from = 't0.json'\n", "")).unwrap();
        let e = format!("{:#}", PlanInput::read(&input).unwrap_err());
        assert!(e.contains("give cpu_per_poll"), "{e}");
    }

    /// From the fleet: the mean gives CPU per poll, the peak is kept and
    /// the work tail fitted to it; without the fleet such a tenant needs
    /// its figures in the file.
    #[test]
    fn a_tenant_measured_by_the_fleet() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.toml");
        std::fs::write(
            &input,
            "[[host]]\nname = 'h'\ncores = 4\n[[tenant]]\nname = 't'\nrate = 100\nfleet = 'h1/t'\ntarget = '10ms'\n",
        )
        .unwrap();
        let e = format!("{:#}", PlanInput::read(&input).unwrap_err());
        assert!(e.contains("--from-fleet"), "{e}");
        let lookup = |name: &str| -> Result<FleetMeasure> {
            assert_eq!(name, "h1/t");
            Ok(FleetMeasure {
                source: name.into(),
                windows: 20,
                observed_ns: 600_000_000_000,
                mean_cpus: 0.14,
                peak_100ms_cpus: 0.5,
            })
        };
        let p = PlanInput::read_measured(&input, Some(&lookup)).unwrap();
        let t = &p.tenants[0];
        assert_eq!(t.cpu_per_poll, Some(1_400_000));
        assert_eq!(t.peak_100ms_cpu, Some(0.5));
        let tail = t.work_tail.expect("a peak 3.5x the mean needs a heavy tail");
        let drawn = crate::peak::peak_cpu(100.0, &t.work(), 1, crate::peak::FIT_SEED);
        assert!((drawn - 0.5).abs() < 0.02, "Pareto {tail} draws a peak of {drawn}");
        assert!(p.notes.iter().any(|n| n.contains("h1/t")), "{:?}", p.notes);
        // A peak no higher than the steady mean needs no tail.
        assert_eq!(crate::peak::fit_tail(100.0, 1_400_000, 1, 0.14), None);
    }

    /// From an observe analysis: the named group's CPU over the polls its
    /// rate makes in the observed time; several groups need a name.
    #[test]
    fn cpu_per_poll_from_an_observe_analysis() {
        let dir = tempfile::tempdir().unwrap();
        let group = |name: &str, cpu: u64| {
            format!(r#"{{"name": "{name}", "on_cpu_ns": {cpu}, "time_shares": {{"wall_ns": 10000000000}}}}"#)
        };
        std::fs::write(
            dir.path().join("observe.json"),
            format!(
                r#"{{"groups": [{}, {}]}}"#,
                group("t0", 2_000_000_000),
                group("host", 5)
            ),
        )
        .unwrap();
        let input = dir.path().join("in.toml");
        let text = "[[host]]\nname = 'h'\ncores = 4\n[[tenant]]\nname = 't'\nrate = 100\ncpu_per_poll_from = 'observe.json'\nobserve_group = 't0'\ntarget = '10ms'\n";
        std::fs::write(&input, text).unwrap();
        // 2 s of CPU over 10 s at 100 polls/s: 2 ms per poll.
        assert_eq!(
            PlanInput::read(&input).unwrap().tenants[0].cpu_per_poll,
            Some(2_000_000)
        );
        std::fs::write(&input, text.replace("observe_group = 't0'\n", "")).unwrap();
        let e = format!("{:#}", PlanInput::read(&input).unwrap_err());
        assert!(e.contains("observe_group") && e.contains("t0, host"), "{e}");
        std::fs::write(&input, text.replace("'t0'", "'t9'")).unwrap();
        let e = format!("{:#}", PlanInput::read(&input).unwrap_err());
        assert!(e.contains("no group \"t9\""), "{e}");
    }
}
