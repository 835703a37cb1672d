//! Benchmark results: the raw figures a `bench/*.py` script measured, per
//! table, tool and round ([`BenchResult`], schema `ontime-bench/1`), and
//! what `ontime bench report` computes from them for bench/results.md:
//! each cell's median and range over the rounds (or a statistic of the
//! rounds' pooled histograms), the ratios of ontime to its peer and the
//! verdict on each target. The scripts drive the tools and keep what they
//! measured; every figure a claim rests on is computed here, so anyone can
//! recompute it from the committed files.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use ontime_core::bad_input;
use serde::{Deserialize, Serialize};

/// The schema tag every result carries.
pub const SCHEMA: &str = "ontime-bench/1";

/// The largest result file read (a result keeps sparse histograms of a
/// few thousand bins per round).
pub const MAX_RESULT_BYTES: u64 = 64 << 20;

/// Bins of one histogram at most (1-us bins up to 20 s).
const MAX_BINS: usize = 20_000_000;

/// One invocation of one benchmark script.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BenchResult {
    /// [`SCHEMA`].
    pub schema: String,
    /// The script's name without `.py`, e.g. `cyclic_vs_cyclictest`.
    pub bench: String,
    /// A heading for the result's section.
    pub title: String,
    /// The command line that made this file, as a user would type it.
    pub command: String,
    /// When the run began, RFC 3339 UTC.
    pub started: String,
    pub host: Host,
    /// The columns every table has.
    pub metrics: Vec<Metric>,
    pub tables: Vec<Table>,
    #[serde(default)]
    pub ratios: Vec<RatioSpec>,
    #[serde(default)]
    pub targets: Vec<Target>,
    /// Sentences about how the figures were taken (what a tool counts,
    /// what was alternated); facts, never figures computed by the script.
    #[serde(default)]
    pub method: Vec<String>,
}

/// The machine a result was measured on.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Host {
    /// `uname -r`.
    pub kernel: String,
    /// Online CPUs.
    pub cpus: u32,
    /// The 1-minute load average just before the run (what else ran).
    pub load_before: f64,
    /// `perf bench sched pipe` in us per operation just before the run,
    /// a gauge of this VM's speed that day; absent where perf is not.
    #[serde(default)]
    pub sched_pipe_us: Option<f64>,
}

/// A column: a value each round reports, or a statistic of a histogram
/// pooled over the rounds of a row.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Metric {
    /// The column's heading and the name ratios and targets use.
    pub name: String,
    /// The unit of the values (and of a histogram's bins): "us", "ns",
    /// "%", "MiB/s", "s", "x", or "" for a count.
    pub unit: String,
    pub source: Source,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(tag = "from", rename_all = "snake_case", deny_unknown_fields)]
pub enum Source {
    /// `values[key]` of each round, less `values[minus]`, times `scale`,
    /// divided by `values[per]` (a rate, a share), each where given; the
    /// cell is the median and range over the rounds. A null value is a
    /// round where the tool gave no figure.
    Value {
        key: String,
        #[serde(default)]
        minus: Option<String>,
        #[serde(default)]
        per: Option<String>,
        #[serde(default = "one")]
        scale: f64,
    },
    /// What a tool adds over the table's `baseline` row (the run without
    /// it), round by round: (values[key] - the baseline's values[key]) x
    /// `scale`, each side first divided by its own values[per] where given
    /// (a rate: rows that ran for different lengths), divided by the
    /// baseline's value when `relative` (a slowdown), plus the same round's
    /// value of the metric named `plus` (the tool's own cost) where given.
    /// Rounds pair by index when both rows ran the same number of rounds
    /// (they alternated); otherwise against the baseline's median.
    Over {
        key: String,
        baseline: String,
        #[serde(default = "one")]
        scale: f64,
        #[serde(default)]
        relative: bool,
        #[serde(default)]
        plus: Option<String>,
        #[serde(default)]
        per: Option<String>,
    },
    /// The quantile `q` (0 < q < 1) of `histograms[histogram]`, pooled
    /// over the row's rounds; unsupported (n/a) while the pool holds fewer
    /// than 1 / (1 - q) samples. A row whose rounds carry no such
    /// histogram but `values[or_value]` is a tool that computes this
    /// quantile itself from all its samples (ontime's probes do): the
    /// median and range of its own figures.
    Quantile {
        histogram: String,
        q: f64,
        #[serde(default)]
        or_value: Option<String>,
    },
    /// The number of samples in the pooled histogram (unbounded ones too).
    Count { histogram: String },
    /// The largest sample of the pooled histogram; a row without it uses
    /// `values[or_value]` as `Quantile` does.
    Max {
        histogram: String,
        #[serde(default)]
        or_value: Option<String>,
    },
}

fn one() -> f64 {
    1.0
}

/// One condition of the benchmark (a load, a rate, a mode): a row per
/// tool.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Table {
    pub name: String,
    /// The rows' rounds ran alternately (round i of each row in turn), so
    /// round i of one row pairs with round i of another for per-round
    /// ratios and costs; otherwise rows compare by their medians.
    #[serde(default = "yes")]
    pub alternated: bool,
    pub rows: Vec<Row>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Row {
    /// The tool or configuration, e.g. "ontime", "cyclictest", "none".
    pub tool: String,
    /// In the order they ran; rounds of different rows with the same
    /// index ran alternately, so they pair for per-round ratios.
    pub rounds: Vec<Round>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Round {
    #[serde(default)]
    pub values: BTreeMap<String, Option<f64>>,
    #[serde(default)]
    pub histograms: BTreeMap<String, Histogram>,
}

/// Samples in bins of equal width, sparse: `[bin index, count]`; bin `i`
/// holds samples in [i * width, (i + 1) * width) and reads as its lower
/// edge, as cyclictest reads its 1-us bins.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Histogram {
    pub bin_width: f64,
    pub bins: Vec<[u64; 2]>,
    /// Samples above the last bin: their values are unknown, at most
    /// `max`.
    #[serde(default)]
    pub overflow: u64,
    /// Samples that never happened (a poll a tool dropped, a wake-up it
    /// skipped): unbounded lateness.
    #[serde(default)]
    pub unbounded: u64,
    /// The largest sample, where the tool reports it.
    #[serde(default)]
    pub max: Option<f64>,
}

/// ours / peer for one metric, in every table that has both rows.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RatioSpec {
    pub metric: String,
    pub ours: String,
    pub peer: String,
}

/// A target the benchmark judges: a ratio or a value, at most or at least
/// a bound, in one table or every table.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    /// As the issue or document states it, e.g. "ontime p99.99 <= 1.05 x
    /// cyclictest".
    pub name: String,
    pub judged: Judged,
    #[serde(default)]
    pub at_most: Option<f64>,
    #[serde(default)]
    pub at_least: Option<f64>,
    /// The table it applies to; every table when absent.
    #[serde(default)]
    pub table: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(tag = "on", rename_all = "snake_case", deny_unknown_fields)]
pub enum Judged {
    Ratio { metric: String, ours: String, peer: String },
    Value { tool: String, metric: String },
}

/// What a cell holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Figure {
    /// No round gave a figure.
    Missing,
    /// Too few samples for the quantile.
    Unsupported,
    /// The quantile falls among samples that never happened.
    Unbounded,
    /// The quantile falls in the overflow: at most this (the maximum).
    AtMost { value: f64 },
    /// One figure (a pooled statistic, or one round).
    One { value: f64 },
    /// The median and range over `n` rounds.
    Spread { median: f64, min: f64, max: f64, n: usize },
}

impl Figure {
    /// The value a ratio or a target uses: the median, the one figure, or
    /// the bound.
    pub fn central(&self) -> Option<f64> {
        match *self {
            Figure::One { value } | Figure::AtMost { value } => Some(value),
            Figure::Spread { median, .. } => Some(median),
            Figure::Unbounded => Some(f64::INFINITY),
            Figure::Missing | Figure::Unsupported => None,
        }
    }

    fn of_values(mut v: Vec<f64>) -> Figure {
        v.retain(|x| x.is_finite());
        v.sort_by(f64::total_cmp);
        match v.len() {
            0 => Figure::Missing,
            1 => Figure::One { value: v[0] },
            n => Figure::Spread {
                median: ontime_core::stats::quantile_sorted(&v, 0.5, |x| x),
                min: v[0],
                max: v[n - 1],
                n,
            },
        }
    }
}

/// A result read and checked: every name it uses resolves, every
/// histogram is bounded.
pub fn read(path: &Path) -> Result<BenchResult> {
    let text = ontime_core::fsio::read_text_capped(path, "benchmark result", MAX_RESULT_BYTES)?;
    let r: BenchResult = serde_json::from_str(&text)
        .map_err(|e| bad_input(format!("{}: not a benchmark result: {e}", path.display())))?;
    r.check().map_err(|e| bad_input(format!("{}: {e}", path.display())))?;
    Ok(r)
}

impl BenchResult {
    fn check(&self) -> std::result::Result<(), String> {
        if self.schema != SCHEMA {
            return Err(format!("schema {:?}; this ontime reads {SCHEMA:?}", self.schema));
        }
        let metric = |name: &str| self.metrics.iter().find(|m| m.name == name);
        let mut names = std::collections::BTreeSet::new();
        for m in &self.metrics {
            if !names.insert(&m.name) {
                return Err(format!("metric {:?} is named twice", m.name));
            }
            match &m.source {
                Source::Quantile { q, .. } if !(*q > 0.0 && *q < 1.0) => {
                    return Err(format!("metric {:?}: quantile {q} is not in (0, 1)", m.name));
                }
                Source::Value { scale, .. } if !scale.is_finite() => {
                    return Err(format!("metric {:?}: scale {scale}", m.name));
                }
                Source::Over {
                    baseline, scale, plus, ..
                } => {
                    if !scale.is_finite() {
                        return Err(format!("metric {:?}: scale {scale}", m.name));
                    }
                    if let Some(p) = plus {
                        if !matches!(metric(p).map(|x| &x.source), Some(Source::Value { .. })) {
                            return Err(format!("metric {:?}: plus {p:?} is not a metric of values", m.name));
                        }
                    }
                    if !self.tables.iter().any(|t| t.rows.iter().any(|r| &r.tool == baseline)) {
                        return Err(format!("metric {:?}: no row is its baseline {baseline:?}", m.name));
                    }
                }
                _ => {}
            }
        }
        for t in &self.tables {
            for row in &t.rows {
                let mut widths: BTreeMap<&str, f64> = BTreeMap::new();
                for (i, round) in row.rounds.iter().enumerate() {
                    for (name, h) in &round.histograms {
                        let at = || format!("table {:?}, {} round {}: histogram {name:?}", t.name, row.tool, i + 1);
                        h.check().map_err(|e| format!("{}: {e}", at()))?;
                        if *widths.entry(name).or_insert(h.bin_width) != h.bin_width {
                            return Err(format!("{}: bins of another width than its other rounds'", at()));
                        }
                    }
                }
            }
        }
        let tool = |name: &str| self.tables.iter().any(|t| t.rows.iter().any(|r| r.tool == name));
        for r in &self.ratios {
            if metric(&r.metric).is_none() || !tool(&r.ours) || !tool(&r.peer) {
                return Err(format!(
                    "ratio {}/{} of {:?} names what the result lacks",
                    r.ours, r.peer, r.metric
                ));
            }
        }
        for t in &self.targets {
            let ok = match &t.judged {
                Judged::Ratio { metric: m, ours, peer } => metric(m).is_some() && tool(ours) && tool(peer),
                Judged::Value { tool: w, metric: m } => metric(m).is_some() && tool(w),
            };
            if !ok || t.at_most.is_none() == t.at_least.is_none() {
                return Err(format!(
                    "target {:?} needs a metric and tools of the result and one of at_most, at_least",
                    t.name
                ));
            }
            if let Some(name) = &t.table {
                if !self.tables.iter().any(|x| &x.name == name) {
                    return Err(format!(
                        "target {:?} names table {name:?}, which the result lacks",
                        t.name
                    ));
                }
            }
        }
        Ok(())
    }

    fn metric(&self, name: &str) -> Option<&Metric> {
        self.metrics.iter().find(|m| m.name == name)
    }

    /// A row's figure for one metric in its table.
    pub fn figure(&self, table: &Table, row: &Row, metric: &Metric) -> Figure {
        match &metric.source {
            Source::Value { .. } => {
                Figure::of_values(self.value_rounds(row, &metric.source).into_iter().flatten().collect())
            }
            Source::Over { .. } => Figure::of_values(self.over(table, row, &metric.source)),
            Source::Quantile { histogram, q, or_value } => match (pooled(row, histogram), or_value) {
                (Some(h), _) => h.quantile(*q),
                (None, Some(key)) => Figure::of_values(
                    row.rounds
                        .iter()
                        .filter_map(|r| r.values.get(key).copied().flatten())
                        .collect(),
                ),
                (None, None) => Figure::Missing,
            },
            Source::Count { histogram } => match pooled(row, histogram) {
                Some(h) => Figure::One {
                    value: (h.total()) as f64,
                },
                None => Figure::Missing,
            },
            Source::Max { histogram, or_value } => match (pooled(row, histogram), or_value) {
                (Some(h), _) => h.max.map_or(Figure::Missing, |value| Figure::One { value }),
                (None, Some(key)) => {
                    let own: Vec<f64> = row
                        .rounds
                        .iter()
                        .filter_map(|r| r.values.get(key).copied().flatten())
                        .collect();
                    own.into_iter()
                        .reduce(f64::max)
                        .map_or(Figure::Missing, |value| Figure::One { value })
                }
                (None, None) => Figure::Missing,
            },
        }
    }

    /// Each round's value of a per-round source (`Value` or `Over`).
    fn per_round(&self, table: &Table, row: &Row, source: &Source) -> Option<Vec<Option<f64>>> {
        match source {
            Source::Value { .. } => Some(self.value_rounds(row, source)),
            Source::Over { .. } => {
                let v = self.over_rounds(table, row, source);
                (v.len() == row.rounds.len()).then_some(v)
            }
            _ => None,
        }
    }

    fn value_rounds(&self, row: &Row, source: &Source) -> Vec<Option<f64>> {
        let Source::Value { key, minus, per, scale } = source else {
            return Vec::new();
        };
        let get = |r: &Round, k: &str| r.values.get(k).copied().flatten();
        row.rounds
            .iter()
            .map(|r| {
                let mut v = get(r, key)?;
                if let Some(m) = minus {
                    v -= get(r, m)?;
                }
                v *= scale;
                if let Some(p) = per {
                    let d = get(r, p)?;
                    if d == 0.0 {
                        return None;
                    }
                    v /= d;
                }
                Some(v)
            })
            .collect()
    }

    fn over(&self, table: &Table, row: &Row, source: &Source) -> Vec<f64> {
        self.over_rounds(table, row, source).into_iter().flatten().collect()
    }

    fn over_rounds(&self, table: &Table, row: &Row, source: &Source) -> Vec<Option<f64>> {
        let Source::Over {
            key,
            baseline,
            scale,
            relative,
            plus,
            per,
        } = source
        else {
            return Vec::new();
        };
        let Some(base) = table.rows.iter().find(|r| &r.tool == baseline) else {
            return Vec::new();
        };
        // values[key], as a rate of values[per] where given.
        let of = |r: &Round| -> Option<f64> {
            let v = r.values.get(key).copied().flatten()?;
            match per {
                Some(p) => {
                    let d = r.values.get(p).copied().flatten()?;
                    (d != 0.0).then(|| v / d)
                }
                None => Some(v),
            }
        };
        let base_values: Vec<Option<f64>> = base.rounds.iter().map(of).collect();
        let base_median = Figure::of_values(base_values.iter().flatten().copied().collect()).central();
        let paired = table.alternated && base.rounds.len() == row.rounds.len();
        let own: Option<Vec<Option<f64>>> = plus.as_ref().and_then(|name| {
            let m = self.metric(name)?;
            // A cost over the baseline cannot add itself.
            (!matches!(m.source, Source::Over { .. })).then(|| self.value_rounds(row, &m.source))
        });
        if plus.is_some() && own.is_none() {
            return Vec::new();
        }
        row.rounds
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let x = of(r)?;
                let b = if paired { base_values[i]? } else { base_median? };
                let mut v = (x - b) * scale;
                if *relative {
                    if b == 0.0 {
                        return None;
                    }
                    v /= b;
                }
                if let Some(own) = &own {
                    v += own.get(i).copied().flatten()?;
                }
                Some(v)
            })
            .collect()
    }

    /// ours / peer in one table: per round where both rows report each
    /// round's value (they ran alternately), else of the central figures.
    pub fn ratio(&self, table: &Table, metric: &str, ours: &str, peer: &str) -> Figure {
        let (Some(m), Some(a), Some(b)) = (
            self.metric(metric),
            table.rows.iter().find(|r| r.tool == ours),
            table.rows.iter().find(|r| r.tool == peer),
        ) else {
            return Figure::Missing;
        };
        if table.alternated && a.rounds.len() == b.rounds.len() && a.rounds.len() > 1 {
            if let (Some(x), Some(y)) = (self.per_round(table, a, &m.source), self.per_round(table, b, &m.source)) {
                let paired: Option<Vec<f64>> = x
                    .iter()
                    .zip(&y)
                    .map(|(x, y)| {
                        let (x, y) = ((*x)?, (*y)?);
                        (y > 0.0).then_some(x / y)
                    })
                    .collect();
                if let Some(v) = paired {
                    return Figure::of_values(v);
                }
            }
        }
        let (fa, fb) = (self.figure(table, a, m), self.figure(table, b, m));
        // A bound is not a value: ours over "at most the peer's maximum"
        // would understate the ratio.
        if matches!(fa, Figure::AtMost { .. }) || matches!(fb, Figure::AtMost { .. }) {
            return Figure::Missing;
        }
        match (fa.central(), fb.central()) {
            (Some(x), Some(_)) if x.is_infinite() => Figure::Unbounded,
            (Some(_), Some(y)) if y.is_infinite() => Figure::One { value: 0.0 },
            (Some(x), Some(y)) if y > 0.0 => Figure::One { value: x / y },
            _ => Figure::Missing,
        }
    }

    /// Each table's figure for a target and whether it meets the bound.
    pub fn judge(&self, target: &Target) -> Vec<(String, Figure, Option<bool>)> {
        self.tables
            .iter()
            .filter(|t| target.table.as_ref().is_none_or(|name| &t.name == name))
            .filter_map(|t| {
                let fig = match &target.judged {
                    Judged::Ratio { metric, ours, peer } => {
                        if !t.rows.iter().any(|r| &r.tool == ours) || !t.rows.iter().any(|r| &r.tool == peer) {
                            return None;
                        }
                        self.ratio(t, metric, ours, peer)
                    }
                    Judged::Value { tool, metric } => {
                        let row = t.rows.iter().find(|r| &r.tool == tool)?;
                        self.figure(t, row, self.metric(metric)?)
                    }
                };
                let met = fig
                    .central()
                    .map(|v| target.at_most.is_none_or(|b| v <= b) && target.at_least.is_none_or(|b| v >= b));
                Some((t.name.clone(), fig, met))
            })
            .collect()
    }
}

fn pooled(row: &Row, name: &str) -> Option<Histogram> {
    let mut pool: Option<Histogram> = None;
    for r in &row.rounds {
        let h = r.histograms.get(name)?;
        match &mut pool {
            None => pool = Some(h.clone()),
            Some(p) => p.add(h),
        }
    }
    pool
}

impl Histogram {
    fn check(&self) -> std::result::Result<(), String> {
        if !(self.bin_width > 0.0 && self.bin_width.is_finite()) {
            return Err(format!("bin width {}", self.bin_width));
        }
        if self.bins.len() > MAX_BINS {
            return Err(format!("{} bins; at most {MAX_BINS}", self.bins.len()));
        }
        if self.bins.windows(2).any(|w| w[0][0] >= w[1][0]) {
            return Err("bins out of order or repeated".into());
        }
        if self.max.is_some_and(|m| !m.is_finite()) {
            return Err("max is not a number".into());
        }
        let total = self
            .bins
            .iter()
            .try_fold(self.overflow.checked_add(self.unbounded), |acc, b| {
                acc.and_then(|a| a.checked_add(b[1])).map(Some)
            })
            .flatten();
        if total.is_none_or(|t| t > 1 << 53) {
            return Err("more than 2^53 samples".into());
        }
        Ok(())
    }

    fn total(&self) -> u64 {
        self.bins
            .iter()
            .map(|b| b[1])
            .fold(self.overflow.saturating_add(self.unbounded), u64::saturating_add)
    }

    /// Pools another round's histogram of the same bins (the result's
    /// check refuses a row whose rounds' bins differ in width).
    fn add(&mut self, other: &Histogram) {
        let mut merged: BTreeMap<u64, u64> = self.bins.iter().map(|b| (b[0], b[1])).collect();
        for b in &other.bins {
            let c = merged.entry(b[0]).or_default();
            *c = c.saturating_add(b[1]);
        }
        self.bins = merged.into_iter().map(|(i, c)| [i, c]).collect();
        self.overflow = self.overflow.saturating_add(other.overflow);
        self.unbounded = self.unbounded.saturating_add(other.unbounded);
        self.max = match (self.max, other.max) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }

    /// The lower edge of the bin holding the sample of rank ceil(q * n).
    fn quantile(&self, q: f64) -> Figure {
        let total = self.total();
        if total == 0 || !ontime_core::stats::supports(total, q * 100.0) {
            return Figure::Unsupported;
        }
        let rank = ((q * total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for b in &self.bins {
            seen = seen.saturating_add(b[1]);
            if seen >= rank {
                return Figure::One {
                    value: b[0] as f64 * self.bin_width,
                };
            }
        }
        seen = seen.saturating_add(self.overflow);
        if seen >= rank {
            // Above the last bin: only the maximum bounds it, if known.
            return match self.max {
                Some(value) => Figure::AtMost { value },
                None => Figure::Unsupported,
            };
        }
        Figure::Unbounded
    }
}

fn number(v: f64) -> String {
    // A baseline's cost over itself is -0.0: no sign on nothing.
    let v = if v == 0.0 { 0.0 } else { v };
    let a = v.abs();
    // Counts and whole values read without decimals.
    if a == 0.0 || a >= 100.0 || (a >= 1.0 && v.fract() == 0.0) {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn with_unit(v: f64, unit: &str) -> String {
    match unit {
        "" => number(v),
        "%" => format!("{} %", number(v)),
        "x" => format!("{} x", number(v)),
        u => format!("{} {u}", number(v)),
    }
}

/// A cell as bench/results.md prints it.
pub fn text(fig: &Figure, unit: &str) -> String {
    match *fig {
        Figure::Missing => "-".into(),
        Figure::Unsupported => "n/a".into(),
        Figure::Unbounded => "unbounded".into(),
        Figure::AtMost { value } => format!("<= {}", with_unit(value, unit)),
        Figure::One { value } => with_unit(value, unit),
        Figure::Spread { median, min, max, .. } if min == max => with_unit(median, unit),
        Figure::Spread { median, min, max, .. } => {
            // "(-1.0--0.5)" would not read; a negative range says "to".
            let dash = if min < 0.0 { " to " } else { "-" };
            format!("{} ({}{dash}{})", with_unit(median, unit), number(min), number(max))
        }
    }
}

fn verdict(judged: &[(String, Figure, Option<bool>)]) -> String {
    let known: Vec<bool> = judged.iter().filter_map(|j| j.2).collect();
    let met = known.iter().filter(|m| **m).count();
    match (known.len(), met) {
        (0, _) => "unknown".into(),
        (n, m) if m == n => "met".into(),
        (_, 0) => "not met".into(),
        (n, m) => format!("met in {m} of {n}"),
    }
}

fn target_unit(r: &BenchResult, t: &Target) -> String {
    match &t.judged {
        Judged::Ratio { .. } => "".into(),
        Judged::Value { metric, .. } => r.metric(metric).map(|m| m.unit.clone()).unwrap_or_default(),
    }
}

/// One result as Markdown: the command and host, a table per condition
/// with a ratio row per declared ratio, and each target's verdict.
pub fn markdown(r: &BenchResult) -> String {
    let mut s = String::new();
    let speed = r
        .host
        .sched_pipe_us
        .map(|us| format!(", `perf bench sched pipe` {} us/op", number(us)))
        .unwrap_or_default();
    let _ = writeln!(
        s,
        "`{}`, started {} on {} CPUs, Linux {}, load {} before{speed}.",
        r.command,
        r.started,
        r.host.cpus,
        r.host.kernel,
        number(r.host.load_before)
    );
    for m in &r.method {
        let _ = writeln!(s, "{m}");
    }
    for t in &r.tables {
        let _ = writeln!(s);
        if r.tables.len() > 1 {
            let _ = writeln!(s, "{}:", t.name);
            let _ = writeln!(s);
        }
        let _ = write!(s, "| tool | rounds |");
        for m in &r.metrics {
            let _ = write!(s, " {} |", m.name);
        }
        let _ = writeln!(s);
        let _ = writeln!(s, "|---|---|{}", "---|".repeat(r.metrics.len()));
        for row in &t.rows {
            let _ = write!(s, "| {} | {} |", row.tool, row.rounds.len());
            for m in &r.metrics {
                let fig = r.figure(t, row, m);
                // Rounds that gave no figure are said, not hidden.
                let used = match (&m.source, &fig) {
                    (Source::Value { .. } | Source::Over { .. }, Figure::Spread { n, .. }) => *n,
                    (Source::Value { .. } | Source::Over { .. }, Figure::One { .. }) => 1,
                    _ => row.rounds.len(),
                };
                let of = if used < row.rounds.len() && !matches!(fig, Figure::Missing) {
                    format!(" ({used} of {})", row.rounds.len())
                } else {
                    String::new()
                };
                let _ = write!(s, " {}{of} |", text(&fig, &m.unit));
            }
            let _ = writeln!(s);
        }
        let mut pairs: Vec<(&str, &str)> = Vec::new();
        for x in &r.ratios {
            if !pairs.contains(&(x.ours.as_str(), x.peer.as_str())) {
                pairs.push((&x.ours, &x.peer));
            }
        }
        for (ours, peer) in pairs {
            if !t.rows.iter().any(|x| x.tool == ours) || !t.rows.iter().any(|x| x.tool == peer) {
                continue;
            }
            let _ = write!(s, "| {ours} / {peer} | |");
            for m in &r.metrics {
                let cell = if r
                    .ratios
                    .iter()
                    .any(|x| x.metric == m.name && x.ours == ours && x.peer == peer)
                {
                    text(&r.ratio(t, &m.name, ours, peer), "")
                } else {
                    String::new()
                };
                let _ = write!(s, " {cell} |");
            }
            let _ = writeln!(s);
        }
    }
    if !r.targets.is_empty() {
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "Cells: the median (min-max) over the rounds, or a statistic of the rounds' histograms pooled; ratios and costs round by round where the rounds alternated, else of the medians or pooled figures."
        );
        let _ = writeln!(s);
        for t in &r.targets {
            let judged = r.judge(t);
            let unit = target_unit(r, t);
            let figures: Vec<String> = judged
                .iter()
                .map(|(table, fig, _)| {
                    if judged.len() > 1 {
                        format!("{table}: {}", text(fig, &unit))
                    } else {
                        text(fig, &unit)
                    }
                })
                .collect();
            let _ = writeln!(s, "- {}: {} ({})", t.name, verdict(&judged), figures.join("; "));
        }
    }
    s
}

/// The summary over several results: a row per target.
pub fn summary(results: &[(String, BenchResult)]) -> String {
    let mut s = String::from("| benchmark | command | target | figure | met |\n|---|---|---|---|---|\n");
    for (file, r) in results {
        for t in &r.targets {
            let judged = r.judge(t);
            let unit = target_unit(r, t);
            let figures: Vec<String> = judged.iter().map(|(_, f, _)| text(f, &unit)).collect();
            let _ = writeln!(
                s,
                "| [{}]({file}) | `{}` | {} | {} | {} |",
                r.bench,
                r.command,
                t.name,
                figures.join("; "),
                verdict(&judged)
            );
        }
        if r.targets.is_empty() {
            let _ = writeln!(s, "| [{}]({file}) | `{}` | (none) | | |", r.bench, r.command);
        }
    }
    s
}

/// One result's computed figures, for `--json`.
#[derive(Serialize)]
pub struct Computed<'a> {
    pub file: &'a str,
    pub bench: &'a str,
    pub command: &'a str,
    pub tables: Vec<ComputedTable<'a>>,
    pub targets: Vec<ComputedTarget<'a>>,
}

#[derive(Serialize)]
pub struct ComputedTable<'a> {
    pub name: &'a str,
    /// tool -> metric -> figure.
    pub cells: BTreeMap<&'a str, BTreeMap<&'a str, Figure>>,
    /// "ours / peer" -> metric -> figure.
    pub ratios: BTreeMap<String, BTreeMap<&'a str, Figure>>,
}

#[derive(Serialize)]
pub struct ComputedTarget<'a> {
    pub name: &'a str,
    /// Each table judged: its name, figure and whether it meets the bound
    /// (null when the figure is unknown).
    pub tables: Vec<(String, Figure, Option<bool>)>,
    pub verdict: String,
}

pub fn computed<'a>(file: &'a str, r: &'a BenchResult) -> Computed<'a> {
    let tables = r
        .tables
        .iter()
        .map(|t| ComputedTable {
            name: &t.name,
            cells: t
                .rows
                .iter()
                .map(|row| {
                    (
                        row.tool.as_str(),
                        r.metrics
                            .iter()
                            .map(|m| (m.name.as_str(), r.figure(t, row, m)))
                            .collect(),
                    )
                })
                .collect(),
            ratios: r
                .ratios
                .iter()
                .filter(|x| t.rows.iter().any(|row| row.tool == x.ours) && t.rows.iter().any(|row| row.tool == x.peer))
                .fold(
                    BTreeMap::new(),
                    |mut acc: BTreeMap<String, BTreeMap<&str, Figure>>, x| {
                        acc.entry(format!("{} / {}", x.ours, x.peer))
                            .or_default()
                            .insert(&x.metric, r.ratio(t, &x.metric, &x.ours, &x.peer));
                        acc
                    },
                ),
        })
        .collect();
    let targets = r
        .targets
        .iter()
        .map(|t| {
            let judged = r.judge(t);
            ComputedTarget {
                name: &t.name,
                verdict: verdict(&judged),
                tables: judged,
            }
        })
        .collect();
    Computed {
        file,
        bench: &r.bench,
        command: &r.command,
        tables,
        targets,
    }
}

/// Reads each file in order (a directory: its `*.json`, sorted).
pub fn read_all(paths: &[std::path::PathBuf]) -> Result<Vec<(String, BenchResult)>> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut inside: Vec<_> = std::fs::read_dir(p)
                .with_context(|| format!("reading {}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|x| x == "json"))
                .collect();
            inside.sort();
            files.extend(inside);
        } else {
            files.push(p.clone());
        }
    }
    if files.is_empty() {
        return Err(bad_input(
            "no benchmark results given (bench/*.py --out FILE writes one)",
        ));
    }
    files
        .into_iter()
        .map(|f| Ok((f.display().to_string(), read(&f)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(bins: &[(u64, u64)], overflow: u64, unbounded: u64, max: Option<f64>) -> Histogram {
        Histogram {
            bin_width: 1.0,
            bins: bins.iter().map(|&(i, c)| [i, c]).collect(),
            overflow,
            unbounded,
            max,
        }
    }

    #[test]
    fn a_quantile_needs_enough_samples_and_reads_the_bins_lower_edge() {
        let h = hist(&[(3, 90), (7, 9), (50, 1)], 0, 0, Some(50.0));
        assert_eq!(h.quantile(0.5), Figure::One { value: 3.0 });
        assert_eq!(h.quantile(0.99), Figure::One { value: 7.0 });
        assert_eq!(h.quantile(0.999), Figure::Unsupported);
        let over = hist(&[(3, 99)], 1, 0, Some(9000.0));
        assert_eq!(over.quantile(0.99), Figure::One { value: 3.0 });
        assert_eq!(
            hist(&[(3, 998)], 2, 0, Some(9000.0)).quantile(0.999),
            Figure::AtMost { value: 9000.0 }
        );
        assert_eq!(hist(&[(3, 998)], 0, 2, None).quantile(0.999), Figure::Unbounded);
    }

    #[test]
    fn pooled_histograms_add_their_bins_overflow_and_max() {
        let mut a = hist(&[(1, 2), (5, 1)], 1, 0, Some(70.0));
        a.add(&hist(&[(1, 1), (9, 1)], 0, 3, Some(40.0)));
        assert_eq!(a.bins, vec![[1, 3], [5, 1], [9, 1]]);
        assert_eq!((a.overflow, a.unbounded, a.max, a.total()), (1, 3, Some(70.0), 9));
    }

    fn result(ours: &[f64], peer: &[f64]) -> BenchResult {
        let rows = |tool: &str, v: &[f64]| Row {
            tool: tool.into(),
            rounds: v
                .iter()
                .map(|&x| Round {
                    values: [("cpu".to_string(), Some(x))].into(),
                    histograms: BTreeMap::new(),
                })
                .collect(),
        };
        BenchResult {
            schema: SCHEMA.into(),
            bench: "t".into(),
            title: "t".into(),
            command: "bench/t.py".into(),
            started: "2026-11-28T00:00:00Z".into(),
            host: Host {
                kernel: "6.1".into(),
                cpus: 2,
                load_before: 0.1,
                sched_pipe_us: None,
            },
            metrics: vec![Metric {
                name: "cpu".into(),
                unit: "%".into(),
                source: Source::Value {
                    key: "cpu".into(),
                    minus: None,
                    per: None,
                    scale: 1.0,
                },
            }],
            tables: vec![Table {
                name: "idle".into(),
                alternated: true,
                rows: vec![rows("ontime", ours), rows("perf", peer)],
            }],
            ratios: vec![RatioSpec {
                metric: "cpu".into(),
                ours: "ontime".into(),
                peer: "perf".into(),
            }],
            targets: vec![Target {
                name: "ontime <= 0.5 x perf".into(),
                judged: Judged::Ratio {
                    metric: "cpu".into(),
                    ours: "ontime".into(),
                    peer: "perf".into(),
                },
                at_most: Some(0.5),
                at_least: None,
                table: None,
            }],
            method: vec![],
        }
    }

    #[test]
    fn alternating_rounds_pair_into_per_round_ratios_and_the_median_is_judged() {
        let r = result(&[1.0, 2.0, 3.0], &[4.0, 2.0, 10.0]);
        r.check().unwrap();
        let fig = r.ratio(&r.tables[0], "cpu", "ontime", "perf");
        assert_eq!(
            fig,
            Figure::Spread {
                median: 0.3,
                min: 0.25,
                max: 1.0,
                n: 3
            }
        );
        let judged = r.judge(&r.targets[0]);
        assert_eq!(judged[0].2, Some(true));
        let md = markdown(&r);
        assert!(md.contains("| ontime | 3 | 2 % (1-3) |"), "{md}");
        assert!(md.contains("| ontime / perf | | 0.300 (0.250-1) |"), "{md}");
        assert!(md.contains("- ontime <= 0.5 x perf: met (0.300 (0.250-1))"), "{md}");
    }

    /// Rows that ran for different lengths compare as rates: each side's
    /// value over its own values[per] before the difference.
    #[test]
    fn a_rate_over_the_baseline_divides_each_side_by_its_own_length() {
        let mut r = result(&[30.0, 22.0], &[20.0, 20.0]);
        for (rows, spans) in [(0, [15.0, 11.0]), (1, [10.0, 10.0])] {
            for (round, span) in r.tables[0].rows[rows].rounds.iter_mut().zip(spans) {
                round.values.insert("span".into(), Some(span));
            }
        }
        r.metrics.push(Metric {
            name: "added".into(),
            unit: "%".into(),
            source: Source::Over {
                key: "cpu".into(),
                baseline: "perf".into(),
                scale: 100.0,
                relative: false,
                plus: None,
                per: Some("span".into()),
            },
        });
        r.check().unwrap();
        let t = &r.tables[0];
        let added = r.figure(t, &t.rows[0], r.metric("added").unwrap());
        let Figure::Spread { min, max, .. } = added else {
            panic!("{added:?}")
        };
        // 30/15 - 20/10 = 0; 22/11 - 20/10 = 0: the same rate.
        assert!(min.abs() < 1e-9 && max.abs() < 1e-9, "{added:?}");
    }

    #[test]
    fn a_cost_over_the_baseline_adds_the_tools_own_share_round_by_round() {
        let mut r = result(&[110.0, 104.0], &[100.0, 100.0]);
        // "perf" plays the run alone here; ontime's own CPU: 2 s of 100 s.
        for (round, cpu_s) in r.tables[0].rows[0].rounds.iter_mut().zip([2.0, 1.0]) {
            round.values.insert("own_s".into(), Some(cpu_s));
        }
        r.metrics.push(Metric {
            name: "own".into(),
            unit: "%".into(),
            source: Source::Value {
                key: "own_s".into(),
                minus: None,
                per: Some("cpu".into()),
                scale: 100.0,
            },
        });
        r.metrics.push(Metric {
            name: "cost".into(),
            unit: "%".into(),
            source: Source::Over {
                key: "cpu".into(),
                baseline: "perf".into(),
                scale: 100.0,
                relative: true,
                plus: Some("own".into()),
                per: None,
            },
        });
        r.check().unwrap();
        let t = &r.tables[0];
        let cost = r.figure(t, &t.rows[0], r.metric("cost").unwrap());
        let Figure::Spread { min, max, .. } = cost else {
            panic!("{cost:?}")
        };
        // 10 % slower + 2/110 of its time; 4 % + 1/104.
        assert!((max - (10.0 + 200.0 / 110.0)).abs() < 1e-9 && (min - (4.0 + 100.0 / 104.0)).abs() < 1e-9);
        r.metrics[2] = Metric {
            name: "cost".into(),
            unit: "%".into(),
            source: Source::Over {
                key: "cpu".into(),
                baseline: "perf".into(),
                scale: 1.0,
                relative: false,
                plus: Some("cost".into()),
                per: None,
            },
        };
        assert!(r.check().unwrap_err().contains("plus"));
    }

    #[test]
    fn a_result_naming_what_it_lacks_is_refused() {
        let mut r = result(&[1.0], &[2.0]);
        r.targets[0].judged = Judged::Value {
            tool: "nobody".into(),
            metric: "cpu".into(),
        };
        assert!(r.check().unwrap_err().contains("target"));
        let mut r = result(&[1.0], &[2.0]);
        r.schema = "ontime-bench/0".into();
        assert!(r.check().unwrap_err().contains("schema"));
    }

    #[test]
    fn a_dropped_peer_is_unbounded_and_ours_over_it_is_zero() {
        let mut r = result(&[1.0], &[2.0]);
        r.metrics.push(Metric {
            name: "p99".into(),
            unit: "us".into(),
            source: Source::Quantile {
                histogram: "lag".into(),
                q: 0.99,
                or_value: None,
            },
        });
        r.tables[0].rows[0].rounds[0]
            .histograms
            .insert("lag".into(), hist(&[(10, 100)], 0, 0, Some(10.0)));
        r.tables[0].rows[1].rounds[0]
            .histograms
            .insert("lag".into(), hist(&[(10, 50)], 0, 50, None));
        let m = r.metric("p99").unwrap();
        assert_eq!(r.figure(&r.tables[0], &r.tables[0].rows[1], m), Figure::Unbounded);
        assert_eq!(
            r.ratio(&r.tables[0], "p99", "ontime", "perf"),
            Figure::One { value: 0.0 }
        );
    }
}
