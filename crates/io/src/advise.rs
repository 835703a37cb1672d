//! `ontime io advise`: from a document-004 sweep, per workload class and
//! data size, the tenant memory, direct vs buffered I/O and swap setting
//! that measured best (with its margin over the next best), and whether
//! this host reproduced each of document 004's findings.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One measured cell: a run's setting and its tenants' mean throughput.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Cell {
    /// "fio randread", "dd write", "postmark".
    pub class: String,
    pub data_bytes: u64,
    /// Tenant memory limit.
    pub memory_bytes: u64,
    /// O_DIRECT in the tenant.
    pub direct: bool,
    /// Swap beyond memory: 0 = none; None = the host's default.
    pub swap_bytes: Option<u64>,
    /// Mean over the run's tenants, bytes per second.
    pub throughput_bps: f64,
    /// Worst tenant's p99 per-operation latency, when the tool measures it.
    pub p99_ns: Option<u64>,
    /// Share of application read bytes the guest cache absorbed (from
    /// the run's I/O recording), and of virtual-disk reads the host cache did.
    pub guest_absorbed: Option<f64>,
    pub host_absorbed: Option<f64>,
    /// The same for written bytes.
    #[serde(default)]
    pub guest_absorbed_writes: Option<f64>,
    #[serde(default)]
    pub host_absorbed_writes: Option<f64>,
    /// The run directory's name.
    pub run: String,
}

/// A setting the advice chooses between.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Setting {
    pub memory_bytes: u64,
    pub direct: bool,
    pub swap_bytes: Option<u64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Advice {
    pub class: String,
    pub data_bytes: u64,
    pub best: Setting,
    pub best_bps: f64,
    pub runner_up: Option<(Setting, f64)>,
    /// best / runner-up - 1.
    pub margin: Option<f64>,
    /// Cells (repetitions pooled) behind this line.
    pub settings: usize,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Finding {
    pub claim: String,
    /// None: the sweep lacks the cells to tell.
    pub reproduced: Option<bool>,
    pub evidence: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct AdviceReport {
    pub advice: Vec<Advice>,
    pub findings: Vec<Finding>,
    pub cells: usize,
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// Mean throughput per (class, data size) and setting, repetitions pooled.
type Grid = BTreeMap<(String, u64), BTreeMap<Setting, f64>>;

fn grid(cells: &[Cell]) -> Grid {
    let mut acc: BTreeMap<(String, u64), BTreeMap<Setting, Vec<f64>>> = BTreeMap::new();
    for c in cells {
        acc.entry((c.class.clone(), c.data_bytes))
            .or_default()
            .entry(Setting {
                memory_bytes: c.memory_bytes,
                direct: c.direct,
                swap_bytes: c.swap_bytes,
            })
            .or_default()
            .push(c.throughput_bps);
    }
    acc.into_iter()
        .map(|(k, m)| (k, m.into_iter().map(|(s, v)| (s, mean(&v))).collect()))
        .collect()
}

pub fn advise(cells: &[Cell]) -> AdviceReport {
    let g = grid(cells);
    let mut advice = Vec::new();
    for ((class, data), settings) in &g {
        let mut ranked: Vec<(&Setting, f64)> = settings.iter().map(|(s, v)| (s, *v)).collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
        let Some((best, best_bps)) = ranked.first().map(|(s, v)| ((*s).clone(), *v)) else {
            continue;
        };
        let runner_up = ranked.get(1).map(|(s, v)| ((*s).clone(), *v));
        advice.push(Advice {
            class: class.clone(),
            data_bytes: *data,
            margin: runner_up.as_ref().filter(|r| r.1 > 0.0).map(|r| best_bps / r.1 - 1.0),
            best,
            best_bps,
            runner_up,
            settings: ranked.len(),
        });
    }
    AdviceReport {
        findings: findings(&g),
        advice,
        cells: cells.len(),
    }
}

fn mib(b: u64) -> String {
    format!("{} MiB", b >> 20)
}

pub fn setting_text(s: &Setting) -> String {
    format!(
        "memory {}, {}, swap {}",
        mib(s.memory_bytes),
        if s.direct { "direct" } else { "buffered" },
        match s.swap_bytes {
            None => "host default".into(),
            Some(0) => "none".into(),
            Some(b) => mib(b),
        }
    )
}

/// (swap setting, throughput) of settings that differ only in swap.
type SwapResults = Vec<(Option<u64>, f64)>;

/// Document 004's three findings, tested on the grid.
fn findings(g: &Grid) -> Vec<Finding> {
    let memories: Vec<u64> = {
        let mut m: Vec<u64> = g.values().flat_map(|s| s.keys().map(|k| k.memory_bytes)).collect();
        m.sort();
        m.dedup();
        m
    };
    let (Some(&lo), Some(&hi)) = (memories.first(), memories.last()) else {
        return vec![];
    };
    // Best throughput over the other settings at one memory size.
    let best_at = |s: &BTreeMap<Setting, f64>, mem: u64| {
        s.iter()
            .filter(|(k, _)| k.memory_bytes == mem)
            .map(|(_, v)| *v)
            .fold(None, |a: Option<f64>, v| Some(a.map_or(v, |a| a.max(v))))
    };
    let mut out = Vec::new();

    // 1. Data smaller than memory: more memory wins.
    let mut wins = 0;
    let mut total = 0;
    let mut ev = Vec::new();
    for ((class, data), s) in g {
        if lo == hi || *data > hi {
            continue;
        }
        if let (Some(a), Some(b)) = (best_at(s, hi), best_at(s, lo)) {
            total += 1;
            if a > b {
                wins += 1;
            }
            ev.push(format!(
                "{class} {}: {:.1} vs {:.1} MiB/s",
                mib(*data),
                a / 1048576.0,
                b / 1048576.0
            ));
        }
    }
    out.push(Finding {
        claim: format!(
            "small data (fits the larger memory): more tenant memory wins ({} vs {})",
            mib(hi),
            mib(lo)
        ),
        reproduced: (total > 0).then_some(wins * 2 > total),
        evidence: if total == 0 {
            "the sweep has no data size at or below the largest memory with two memory sizes".into()
        } else {
            format!(
                "{wins} of {total} (larger vs smaller memory, best setting each): {}",
                ev.join("; ")
            )
        },
    });

    // 2. Data larger than memory: less memory and direct I/O win; the two
    // halves apart, as a host may reproduce one and not the other.
    let large: Vec<(&String, u64, &Setting)> = g
        .iter()
        .filter(|((_, data), _)| *data > hi)
        .filter_map(|((class, data), s)| Some((class, *data, s.iter().max_by(|a, b| a.1.total_cmp(b.1))?.0)))
        .collect();
    let ev: Vec<String> = large
        .iter()
        .map(|(class, data, best)| format!("{class} {}: best {}", mib(*data), setting_text(best)))
        .collect();
    for (claim, test) in [
        (
            "large data (beyond every memory size): less tenant memory wins",
            (|b: &Setting, lo: u64| b.memory_bytes == lo) as fn(&Setting, u64) -> bool,
        ),
        ("large data: direct I/O in the tenant wins", |b: &Setting, _| b.direct),
    ] {
        let wins = large.iter().filter(|(_, _, b)| test(b, lo)).count();
        out.push(Finding {
            claim: claim.into(),
            reproduced: (!large.is_empty() && lo != hi).then_some(wins * 2 > large.len()),
            evidence: if large.is_empty() {
                "the sweep has no data size above the largest memory".into()
            } else {
                format!("{wins} of {}: {}", large.len(), ev.join("; "))
            },
        });
    }

    // 3. No swap is usually best: among settings that differ only in swap.
    let mut wins = 0;
    let mut total = 0;
    let mut spreads = Vec::new();
    for s in g.values() {
        let mut by_rest: BTreeMap<(u64, bool), SwapResults> = BTreeMap::new();
        for (k, v) in s {
            by_rest
                .entry((k.memory_bytes, k.direct))
                .or_default()
                .push((k.swap_bytes, *v));
        }
        for list in by_rest.values() {
            if list.len() < 2 || !list.iter().any(|(sw, _)| *sw == Some(0)) {
                continue;
            }
            total += 1;
            let hi_v = list.iter().map(|x| x.1).fold(f64::MIN, f64::max);
            let lo_v = list.iter().map(|x| x.1).fold(f64::MAX, f64::min);
            if lo_v > 0.0 {
                spreads.push(hi_v / lo_v - 1.0);
            }
            let best = list.iter().max_by(|a, b| a.1.total_cmp(&b.1)).map(|(sw, _)| *sw);
            if best == Some(Some(0)) {
                wins += 1;
            }
        }
    }
    out.push(Finding {
        claim: "no swap is usually best".into(),
        reproduced: (total > 0).then_some(wins * 2 > total),
        evidence: if total == 0 {
            "the sweep does not vary swap with swap = none among the values".into()
        } else {
            spreads.sort_by(f64::total_cmp);
            format!(
                "swap = none was best in {wins} of {total} groups that differ only in swap; best over worst swap setting: median +{:.0} %, largest +{:.0} %",
                spreads.get(spreads.len() / 2).copied().unwrap_or(0.0) * 100.0,
                spreads.last().copied().unwrap_or(0.0) * 100.0
            )
        },
    });
    out
}

/// The advice as text.
pub fn text(r: &AdviceReport) -> String {
    let mut s = format!(
        "advice from {} measured cells (mean throughput of the tenants)\n\n",
        r.cells
    );
    s.push_str(&format!(
        "{:<16} {:>9}  {:<44} {:>10}  {:>8}\n",
        "workload", "data", "best setting", "MiB/s", "margin"
    ));
    for a in &r.advice {
        s.push_str(&format!(
            "{:<16} {:>9}  {:<44} {:>10.1}  {:>8}\n",
            a.class,
            mib(a.data_bytes),
            setting_text(&a.best),
            a.best_bps / 1048576.0,
            a.margin
                .map(|m| format!("+{:.0} %", m * 100.0))
                .unwrap_or_else(|| "-".into())
        ));
        if let Some((s2, v)) = &a.runner_up {
            s.push_str(&format!(
                "{:<16} {:>9}  next: {:<38} {:>10.1}\n",
                "",
                "",
                setting_text(s2),
                v / 1048576.0
            ));
        }
    }
    s.push_str("\ndocument 004's findings on this host:\n");
    for f in &r.findings {
        s.push_str(&format!(
            "- {}: {}\n  {}\n",
            f.claim,
            match f.reproduced {
                Some(true) => "reproduced",
                Some(false) => "NOT reproduced",
                None => "not tested",
            },
            f.evidence
        ));
    }
    s
}

impl ontime_core::export::TextReport for AdviceReport {
    fn text(&self) -> String {
        text(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(class: &str, data: u64, mem: u64, direct: bool, swap: u64, mibs: f64) -> Cell {
        Cell {
            class: class.into(),
            data_bytes: data << 20,
            memory_bytes: mem << 20,
            direct,
            swap_bytes: Some(swap << 20),
            throughput_bps: mibs * 1048576.0,
            p99_ns: None,
            guest_absorbed: None,
            host_absorbed: None,
            guest_absorbed_writes: None,
            host_absorbed_writes: None,
            run: String::new(),
        }
    }

    #[test]
    fn the_best_setting_and_its_margin_per_class_and_size() {
        let cells = vec![
            cell("fio randread", 64, 128, false, 0, 400.0),
            cell("fio randread", 64, 128, false, 0, 200.0), // a repetition: mean 300
            cell("fio randread", 64, 512, false, 0, 360.0),
            cell("fio randread", 64, 512, true, 0, 100.0),
            cell("fio randread", 1024, 128, true, 0, 90.0),
            cell("fio randread", 1024, 512, false, 0, 60.0),
            cell("fio randread", 1024, 512, false, 128, 50.0),
        ];
        let r = advise(&cells);
        assert_eq!(r.advice.len(), 2);
        let small = &r.advice[0];
        assert_eq!(small.best.memory_bytes, 512 << 20);
        assert!((small.margin.unwrap() - 0.2).abs() < 1e-9, "360 over 300");
        let large = &r.advice[1];
        assert!(large.best.direct && large.best.memory_bytes == 128 << 20);
        assert_eq!(r.findings[0].reproduced, Some(true), "{:?}", r.findings[0]);
        assert_eq!(r.findings[1].reproduced, Some(true), "{:?}", r.findings[1]);
        assert_eq!(r.findings[2].reproduced, Some(true), "{:?}", r.findings[2]);
        assert_eq!(r.findings[3].reproduced, Some(true), "{:?}", r.findings[3]);
        assert!(r.findings[3].evidence.contains("median +20 %"), "{:?}", r.findings[3]);
        assert!(text(&r).contains("+20 %"));
    }

    #[test]
    fn findings_say_when_the_sweep_cannot_tell() {
        let r = advise(&[cell("dd write", 64, 128, false, 0, 10.0)]);
        assert!(r.findings.iter().all(|f| f.reproduced.is_none()));
    }
}
