//! The lab report's headline table as Markdown (`ontime lab report DIR
//! --markdown`), so the tables in docs/results.md are regenerated from
//! committed runs by the binary, not by hand.
//!
//! One row per setting (and per source, when simulated runs sit beside
//! measured ones): the repetitions' worst-tenant figures as the median
//! with the range over the runs, so a reader sees how many runs a figure
//! rests on and how far they spread.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use ontime_scenario::results::RunResults;

/// Median and range of one figure over a setting's runs.
struct Spread {
    median: u64,
    min: u64,
    max: u64,
    n: usize,
}

impl Spread {
    fn of(mut v: Vec<u64>) -> Option<Spread> {
        if v.is_empty() {
            return None;
        }
        v.sort_unstable();
        let n = v.len();
        // Whole nanoseconds: the mean of the middle two rounds down.
        let median = ontime_core::stats::quantile_sorted(&v, 0.5, |x| x as f64) as u64;
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
            n,
        })
    }

    fn text(&self, show: fn(u64) -> String) -> String {
        if self.n == 1 || self.min == self.max {
            show(self.median)
        } else {
            format!("{} ({}-{})", show(self.median), show(self.min), show(self.max))
        }
    }
}

fn ms(ns: u64) -> String {
    if ns < 1_000_000 {
        format!("{:.0} us", ns as f64 / 1e3)
    } else {
        format!("{:.2} ms", ns as f64 / 1e6)
    }
}

fn count(n: u64) -> String {
    n.to_string()
}

/// The table of one results directory.
pub fn table(dir: &Path) -> Result<String> {
    let runs = super::report::load_runs(dir)?;
    if runs.is_empty() {
        return Err(ontime_core::bad_input(format!("{} holds no runs", dir.display())));
    }
    let mut t = table_of(&runs);
    if runs[0].record.workload == ontime_scenario::record::Workload::Io {
        t.push('\n');
        t.push_str(&io_table(&runs));
    }
    if runs.iter().any(|r| r.explanations.is_some()) {
        t.push('\n');
        t.push_str(&why_table(&runs));
    }
    if runs.iter().any(|r| r.truth.is_some()) {
        t.push('\n');
        t.push_str(&confusion_table(&runs));
    }
    Ok(t)
}

/// Why, per setting: every tenant's late events of every run explained
/// together (docs/explain.md), the largest causes first.
/// The runs' settings, each once, in the order the runs were made.
fn settings_in_order(runs: &[RunResults]) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    for r in runs {
        let k = setting(r);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys
}

fn why_table(runs: &[RunResults]) -> String {
    let keys = settings_in_order(runs);
    let mut s = String::from(
        "| setting | runs explained | why late (all tenants' late events of the runs together) |\n|---|---|---|\n",
    );
    for k in &keys {
        let of: Vec<&RunResults> = runs.iter().filter(|r| &setting(r) == k).collect();
        let with = of.iter().filter(|r| r.explanations.is_some()).count();
        let pooled = ontime_explain::summary::PooledExplanation::of(
            of.iter()
                .filter_map(|r| r.explanations.as_ref())
                .flat_map(|x| x.tenants.values().map(|t| t.primary().0)),
        );
        let why = if with == 0 {
            "no recording explained".to_string()
        } else {
            pooled.sentence()
        };
        let _ = writeln!(s, "| {k} | {with} of {} | {why} |", of.len());
    }
    s.push_str("\nLate: over each run's threshold (the scenario's tightest target, else the run's p99.9); a cause's share is of the explained events' summed lateness.\n");
    s
}

/// The attribution against the causes injected at known times, pooled
/// over the runs (docs/explain.md, "Ground truth").
fn confusion_table(runs: &[RunResults]) -> String {
    let Some((caption, columns, rows)) = truth_table(runs) else {
        return String::new();
    };
    let mut s = format!("{caption}\n\n");
    let _ = writeln!(s, "| {} |", columns.join(" | "));
    let _ = writeln!(s, "|{}", "---|".repeat(columns.len()));
    for row in rows {
        let _ = writeln!(s, "| {} |", row.join(" | "));
    }
    s
}

/// The ground truth's caption, columns and rows: a row per injected
/// class, and per setting when the runs sweep several (each setting's
/// runs pooled: a class may meet its target on one device and not on
/// another); None when no run has one.
pub(crate) fn truth_table(runs: &[RunResults]) -> Option<(String, Vec<String>, Vec<Vec<String>>)> {
    use ontime_explain::truth::{Confusion, COLUMNS};
    let with = runs.iter().filter(|r| r.truth.is_some()).count();
    if with == 0 {
        return None;
    }
    let keys = settings_in_order(runs);
    let by_setting = keys.len() > 1;
    let mut columns: Vec<String> = COLUMNS.iter().map(|c| c.to_string()).collect();
    if by_setting {
        columns.insert(0, "setting".into());
    }
    let mut rows = Vec::new();
    for k in &keys {
        let (n, pooled) = Confusion::pooled(
            runs.iter()
                .filter(|r| &setting(r) == k)
                .filter_map(|r| r.truth.as_ref()),
        );
        if n == 0 {
            continue;
        }
        for row in pooled.cells() {
            let mut cells: Vec<String> = row.into();
            if by_setting {
                cells.insert(0, k.clone());
            }
            rows.push(cells);
        }
    }
    Some((Confusion::caption(with), columns, rows))
}

/// Document 004's figures per setting: the tenants' mean throughput (the
/// median and range over the runs), and over the runs' means what each
/// cache absorbed of the reads and how reads reached the virtual disk.
fn io_table(runs: &[RunResults]) -> String {
    let cells = crate::iocells::cells(runs);
    let mut out = String::from(
        "| setting | runs | MiB/s | guest cache absorbed (reads) | host cache absorbed (reads) | virtual reads per read | mean virtual read |\n|---|---|---|---|---|---|---|\n",
    );
    let mut keys: Vec<String> = Vec::new();
    for r in runs {
        let k = setting(r);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mean = |v: Vec<f64>| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let pct = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.0} %", v * 100.0));
    for k in &keys {
        let of: Vec<&ontime_io::advise::Cell> = cells
            .iter()
            .filter(|c| runs.iter().any(|r| r.name == c.run && &setting(r) == k))
            .collect();
        if of.is_empty() {
            continue;
        }
        let mut mibs: Vec<f64> = of.iter().map(|c| c.throughput_bps / 1048576.0).collect();
        mibs.sort_by(f64::total_cmp);
        let median = ontime_core::stats::quantile_sorted(&mibs, 0.5, |x| x);
        let spread = if mibs.len() > 1 {
            format!("{median:.1} ({:.1}-{:.1})", mibs[0], mibs[mibs.len() - 1])
        } else {
            format!("{median:.1}")
        };
        let per_read = mean(of.iter().filter_map(|c| c.requests?.virtual_per_op()).collect());
        let size = mean(of.iter().filter_map(|c| c.requests?.virtual_mean_bytes()).collect());
        let _ = writeln!(
            out,
            "| {k} | {} | {spread} | {} | {} | {} | {} |",
            of.len(),
            pct(mean(of.iter().filter_map(|c| c.guest_absorbed).collect())),
            pct(mean(of.iter().filter_map(|c| c.host_absorbed).collect())),
            per_read.map_or("-".into(), |v| format!("{v:.2}")),
            size.map_or("-".into(), |v| format!("{:.0} KiB", v / 1024.0)),
        );
    }
    out.push_str("\nPer setting: MiB/s is the tenants' mean throughput of each run, as the median over the runs (min-max); the other columns are means over the runs of the tenants' means.\n");
    out
}

fn setting(r: &RunResults) -> String {
    let s = r.setting();
    if s.is_empty() {
        "-".into()
    } else {
        s
    }
}

fn table_of(runs: &[RunResults]) -> String {
    let mut out = String::new();
    let Some(first) = runs.first() else {
        return "No runs.\n".into();
    };
    let workload = first.record.workload;
    let metric = workload.metric();
    let with_relay = runs.iter().any(|r| r.record.relay.is_some());
    // Runs judged again from the gateway's receive log (QEMU tenants,
    // protocols whose answers carry no receive time).
    let with_reference = runs.iter().any(|r| r.record.reference.is_some());
    let keys = settings_in_order(runs);
    // p99.999 where some run supports it (>= 100 000 samples in every
    // tenant: the worst tenant is unknown while one of them falls short).
    let deep = runs.iter().any(|r| r.worst_tenant(Some(99.999)).is_some());
    let mut columns: Vec<(&str, Option<f64>)> = vec![("p99", Some(99.0)), ("p99.9", Some(99.9))];
    if deep {
        columns.push(("p99.999", Some(99.999)));
    }
    columns.push(("max", None));
    let _ = write!(out, "| setting | runs | worst {metric}");
    for (name, _) in &columns {
        let _ = write!(out, " {name} |");
    }
    let _ = write!(out, " {} |", workload.misses());
    if with_relay {
        out.push_str(" relay delay p99 |");
    }
    if with_reference {
        out.push_str(" by the gateway's stamps p99 |");
    }
    out.push_str("\n|---|---|");
    for _ in 0..columns.len() + 1 + usize::from(with_relay) + usize::from(with_reference) {
        out.push_str("---|");
    }
    out.push('\n');
    for k in &keys {
        let of: Vec<&RunResults> = runs
            .iter()
            .filter(|r| &setting(r) == k && (r.record.complete || r.record.simulated.is_some()))
            .collect();
        let incomplete = runs
            .iter()
            .filter(|r| &setting(r) == k && !r.record.complete && r.record.simulated.is_none())
            .count();
        // The worst tenant of a run; a run none of whose tenants supports
        // the percentile is left out, and the cell says on how many runs
        // it rests.
        let worst = |p: Option<f64>| Spread::of(of.iter().filter_map(|r| r.worst_tenant(p)).collect());
        let cell = |s: Option<Spread>, show: fn(u64) -> String| match s {
            None => "n/a".to_string(),
            Some(s) if s.n < of.len() => format!("{} [{} of {} runs]", s.text(show), s.n, of.len()),
            Some(s) => s.text(show),
        };
        let missed = Spread::of(of.iter().map(|r| r.missed()).collect());
        let runs_text = if incomplete > 0 {
            format!("{} (+{incomplete} incomplete)", of.len())
        } else {
            of.len().to_string()
        };
        let _ = write!(out, "| {k} | {runs_text} |");
        for (_, p) in &columns {
            let _ = write!(out, " {} |", cell(worst(*p), ms));
        }
        let _ = write!(out, " {} |", cell(missed, count));
        if with_relay {
            let relay = Spread::of(
                of.iter()
                    .filter_map(|r| r.record.relay.as_ref().and_then(|x| x.delay.percentile(99.0)))
                    .collect(),
            );
            let _ = write!(out, " {} |", cell(relay, ms));
        }
        if with_reference {
            let reference = Spread::of(
                of.iter()
                    .filter_map(|r| {
                        r.record
                            .reference
                            .as_ref()
                            .and_then(|j| j.interval_error.percentile(99.0))
                    })
                    .collect(),
            );
            let _ = write!(out, " {} |", cell(reference, ms));
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "\nPer setting: the worst tenant's {metric} of each run, as the median over the runs (min-max); {} summed over a run's tenants, likewise.",
        workload.misses()
    );
    if with_reference {
        out.push_str("By the gateway's stamps: every tenant's polls judged again from the building gateway's receive log (kernel stamps, the host's clock), where a run has it: QEMU tenants, crawlers over Modbus or BACnet (whose own interval error is taken at their sends: in runs whose log judged each tenant's building, the figures before this column are the gateway's too), and pollers ontime did not write (`tenant.command`), judged from their packets.\n");
    }
    out.push_str(&class_waits(runs, &keys));
    out.push_str(&why_missed(runs, &keys));
    out
}

/// Per setting and channel: every run's deadline misses together, what
/// their overruns were made of (docs/net.md, "Why a packet missed").
fn why_missed(runs: &[RunResults], keys: &[String]) -> String {
    use ontime_explain::kept::NetExplanation;
    use ontime_explain::summary::PooledExplanation;
    use ontime_net::miss::MissCauses;
    // Each run's controller report and explanation on the recording, read
    // once (the HTML report's views).
    let views = crate::netreport::views(runs);
    let (mut rows, mut flows) = (String::new(), String::new());
    for k in keys {
        let mut n = 0;
        let mut pooled: Vec<MissCauses> = Vec::new();
        let mut explained: Vec<&NetExplanation> = Vec::new();
        for r in runs.iter().filter(|r| &setting(r) == k && r.record.complete) {
            let Some(v) = views.iter().find(|v| v.run == r.name) else {
                continue;
            };
            if let Some(c) = &v.controller {
                n += 1;
                for m in &c.miss_causes {
                    match pooled.iter_mut().find(|p| p.channel == m.channel && p.from == m.from) {
                        Some(p) => p.merge(m),
                        None => pooled.push(m.clone()),
                    }
                }
            }
            if let Some(x) = &v.relay_part {
                explained.push(x);
            }
        }
        pooled.sort_by_key(|p| p.channel);
        for p in &pooled {
            // The relay thread's part of the worst misses, every run's together.
            let relay: Vec<_> = explained
                .iter()
                .flat_map(|x| x.channels.iter())
                .filter(|c| c.channel == p.channel && c.from == p.from)
                .map(|c| &c.explanation)
                .collect();
            let relay = if relay.is_empty() {
                String::new()
            } else {
                let pooled = PooledExplanation::of(relay.into_iter());
                format!("; the relay's part of the worst, on its thread: {}", pooled.sentence())
            };
            let _ = writeln!(
                rows,
                "| {k} | {} from {} | {n} | {} of {} | {}{relay} |",
                p.channel,
                p.from,
                p.with_path,
                p.misses,
                p.sentence()
            );
        }
        let mut names: Vec<&str> = explained
            .iter()
            .flat_map(|x| x.flows.iter())
            .map(|f| f.flow.as_str())
            .collect();
        names.sort_unstable();
        names.dedup();
        for name in names {
            let pooled = PooledExplanation::of(
                explained
                    .iter()
                    .flat_map(|x| x.flows.iter())
                    .filter(|f| f.flow == name)
                    .map(|f| &f.explanation),
            );
            let _ = writeln!(flows, "| {k} | {name} | {} | {} |", pooled.runs, pooled.sentence());
        }
    }
    if !flows.is_empty() {
        flows = format!(
            "\n| setting | flow | runs | why its datagrams were late end to end (the worst of each run, all runs together) |\n|---|---|---|---|\n{flows}\nEnd to end: the sender's send call to the receiver's return from recv, each late datagram an event of the receiving thread.\n"
        );
    }
    if rows.is_empty() {
        return flows;
    }
    format!(
        "\n| setting | channel | runs | recorded | why the deadlines were missed (all runs together) |\n|---|---|---|---|---|\n{rows}\nEach miss the receivers' checks reported, joined with the relay's record of its frame; a share is of the misses' summed overrun (docs/net.md, \"Why a packet missed\").\n{flows}"
    )
}

/// Document 003's experiment 1: per setting and class at the bottleneck
/// (a channel, or best effort), the longest wait in the relay's queue of
/// each run (its fixed delay taken off), as median (min-max) over the runs.
fn class_waits(runs: &[RunResults], keys: &[String]) -> String {
    let mut rows = String::new();
    for k in keys {
        let of: Vec<&RunResults> = runs.iter().filter(|r| &setting(r) == k && r.record.complete).collect();
        let mut classes: Vec<&String> = of
            .iter()
            .filter_map(|r| r.record.relay.as_ref()?.channels.as_ref())
            .flat_map(|c| c.delay_by_class.keys())
            .collect();
        classes.sort();
        classes.dedup();
        for class in classes {
            let waits = Spread::of(
                of.iter()
                    .filter_map(|r| {
                        let relay = r.record.relay.as_ref()?;
                        let max = relay.channels.as_ref()?.delay_by_class.get(class)?.max_ns?;
                        Some(max.saturating_sub(relay.settings.delay_ns))
                    })
                    .collect(),
            );
            if let Some(w) = waits {
                let _ = writeln!(rows, "| {k} | {class} | {} | {} |", w.n, w.text(ms));
            }
        }
    }
    if rows.is_empty() {
        return String::new();
    }
    format!(
        "\n| setting | class at the bottleneck | runs | longest queue wait |\n|---|---|---|---|\n{rows}\nThe longest wait of each class in the relay's queue in each run (its fixed delay taken off), as the median over the runs (min-max).\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spread_is_the_median_and_range_of_the_runs() {
        let s = Spread::of(vec![5_000_000, 1_000_000, 3_000_000]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (3_000_000, 1_000_000, 5_000_000, 3));
        assert_eq!(s.text(ms), "3.00 ms (1.00 ms-5.00 ms)");
        assert_eq!(Spread::of(vec![2_000, 4_000]).unwrap().median, 3_000);
        assert!(Spread::of(vec![]).is_none());
        assert_eq!(Spread::of(vec![7]).unwrap().text(count), "7");
    }
}
