//! `ontime io advise`: from a document-004 sweep, per workload class and
//! data size, the setting (tenant memory, direct vs buffered I/O in the
//! tenant, the host cache's mode, swap) that measured best, with its margin
//! over the next best and the spread of the repetitions, and whether this
//! host reproduced each of document 004's findings. A difference counts only
//! where it exceeds the repetitions' spread: the better setting's worst
//! repetition above the other's best.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One measured cell: a run's setting and its tenants' mean throughput.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Cell {
    /// "fio randread", "dd write", "postmark".
    pub class: String,
    pub data_bytes: u64,
    /// Tenant memory limit (a QEMU tenant: the guest's memory).
    pub memory_bytes: u64,
    /// O_DIRECT in the tenant (document 004's direct I/O: no guest cache).
    pub direct: bool,
    /// The host cache bypassed under the tenant's disk (QEMU's
    /// cache = "none", a loop device's direct I/O).
    #[serde(default)]
    pub host_direct: bool,
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
    /// Requests at each layer, summed over the run's tenants (document
    /// 004's figures 9 and 10), when the run recorded them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<RequestShape>,
    /// The run directory's name.
    pub run: String,
}

/// Read operations and bytes at the application layer and the two disks
/// below (reads: the workloads lay out their files with buffered writes
/// whatever the setting).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestShape {
    pub application_ops: u64,
    #[serde(default)]
    pub application_bytes: u64,
    pub virtual_ops: u64,
    pub virtual_bytes: u64,
    pub physical_ops: u64,
    pub physical_bytes: u64,
}

impl RequestShape {
    /// Virtual-disk requests per application operation.
    pub fn virtual_per_op(&self) -> Option<f64> {
        (self.application_ops > 0).then(|| self.virtual_ops as f64 / self.application_ops as f64)
    }
    pub fn virtual_mean_bytes(&self) -> Option<f64> {
        (self.virtual_ops > 0).then(|| self.virtual_bytes as f64 / self.virtual_ops as f64)
    }
    pub fn physical_per_op(&self) -> Option<f64> {
        (self.application_ops > 0).then(|| self.physical_ops as f64 / self.application_ops as f64)
    }
    pub fn physical_mean_bytes(&self) -> Option<f64> {
        (self.physical_ops > 0).then(|| self.physical_bytes as f64 / self.physical_ops as f64)
    }
}

/// A setting the advice chooses between.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Setting {
    pub memory_bytes: u64,
    pub direct: bool,
    #[serde(default)]
    pub host_direct: bool,
    pub swap_bytes: Option<u64>,
}

impl Setting {
    fn of(c: &Cell) -> Setting {
        Setting {
            memory_bytes: c.memory_bytes,
            direct: c.direct,
            host_direct: c.host_direct,
            swap_bytes: c.swap_bytes,
        }
    }
}

/// One setting's repetitions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    pub mean_bps: f64,
    pub min_bps: f64,
    pub max_bps: f64,
    pub repetitions: usize,
}

impl Measured {
    fn of(v: &[f64]) -> Measured {
        Measured {
            mean_bps: v.iter().sum::<f64>() / v.len().max(1) as f64,
            min_bps: v.iter().copied().fold(f64::INFINITY, f64::min),
            max_bps: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            repetitions: v.len(),
        }
    }
    /// (max - min) / mean.
    pub fn spread(&self) -> Option<f64> {
        (self.repetitions > 1 && self.mean_bps > 0.0).then(|| (self.max_bps - self.min_bps) / self.mean_bps)
    }
}

/// How one setting compares with another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Better in every repetition than the other's best.
    Wins,
    /// Worse in every repetition than the other's worst.
    Loses,
    /// The ranges overlap (or one repetition each: no spread to judge by).
    WithinSpread,
}

fn compare(a: &Measured, b: &Measured) -> Outcome {
    if a.repetitions < 2 || b.repetitions < 2 {
        return Outcome::WithinSpread;
    }
    if a.min_bps > b.max_bps {
        Outcome::Wins
    } else if a.max_bps < b.min_bps {
        Outcome::Loses
    } else {
        Outcome::WithinSpread
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Advice {
    pub class: String,
    pub data_bytes: u64,
    pub best: Setting,
    pub best_bps: f64,
    #[serde(default)]
    pub best_measured: Measured,
    pub runner_up: Option<(Setting, f64)>,
    /// best / runner-up - 1.
    pub margin: Option<f64>,
    /// The best's worst repetition above the runner-up's best.
    #[serde(default)]
    pub beyond_spread: bool,
    /// Settings measured for this class and size.
    pub settings: usize,
}

/// Whether this host reproduced one of the document's findings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Most comparisons went the document's way beyond the spread.
    Reproduced,
    /// Most went the other way beyond the spread.
    Contradicted,
    /// Neither: differences within the repetitions' spread, or mixed.
    NotShown,
    /// The sweep lacks the cells to tell.
    NotTested,
}

impl Verdict {
    pub fn text(self) -> &'static str {
        match self {
            Verdict::Reproduced => "reproduced",
            Verdict::Contradicted => "CONTRADICTED",
            Verdict::NotShown => "not shown (within the spread, or mixed)",
            Verdict::NotTested => "not tested by this sweep",
        }
    }

    /// From comparisons: more than half clear wins reproduce the finding,
    /// more than half clear losses contradict it.
    fn of(outcomes: &[Outcome]) -> Verdict {
        let n = outcomes.len();
        let wins = outcomes.iter().filter(|o| **o == Outcome::Wins).count();
        let losses = outcomes.iter().filter(|o| **o == Outcome::Loses).count();
        if n == 0 {
            Verdict::NotTested
        } else if wins * 2 > n {
            Verdict::Reproduced
        } else if losses * 2 > n {
            Verdict::Contradicted
        } else {
            Verdict::NotShown
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Finding {
    pub claim: String,
    pub verdict: Verdict,
    pub evidence: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct AdviceReport {
    pub advice: Vec<Advice>,
    pub findings: Vec<Finding>,
    pub cells: usize,
    /// Most repetitions of any setting.
    #[serde(default)]
    pub repetitions: usize,
    /// Median spread ((max - min) / mean) over settings with repetitions.
    #[serde(default)]
    pub median_spread: Option<f64>,
}

/// Each (class, data size)'s settings with their repetitions.
type Grid = BTreeMap<(String, u64), BTreeMap<Setting, Measured>>;

fn grid(cells: &[Cell]) -> Grid {
    let mut acc: BTreeMap<(String, u64), BTreeMap<Setting, Vec<f64>>> = BTreeMap::new();
    for c in cells {
        acc.entry((c.class.clone(), c.data_bytes))
            .or_default()
            .entry(Setting::of(c))
            .or_default()
            .push(c.throughput_bps);
    }
    acc.into_iter()
        .map(|(k, m)| (k, m.into_iter().map(|(s, v)| (s, Measured::of(&v))).collect()))
        .collect()
}

pub fn advise(cells: &[Cell]) -> AdviceReport {
    let g = grid(cells);
    let mut advice = Vec::new();
    let mut spreads = Vec::new();
    let mut repetitions = 0;
    for ((class, data), settings) in &g {
        for m in settings.values() {
            spreads.extend(m.spread());
            repetitions = repetitions.max(m.repetitions);
        }
        let mut ranked: Vec<(&Setting, &Measured)> = settings.iter().collect();
        ranked.sort_by(|a, b| b.1.mean_bps.total_cmp(&a.1.mean_bps));
        let Some((best, best_m)) = ranked.first().map(|(s, m)| ((*s).clone(), (*m).clone())) else {
            continue;
        };
        let next = ranked.get(1);
        advice.push(Advice {
            class: class.clone(),
            data_bytes: *data,
            margin: next
                .filter(|r| r.1.mean_bps > 0.0)
                .map(|r| best_m.mean_bps / r.1.mean_bps - 1.0),
            beyond_spread: next.is_some_and(|r| compare(&best_m, r.1) == Outcome::Wins),
            runner_up: next.map(|(s, m)| ((*s).clone(), m.mean_bps)),
            best_bps: best_m.mean_bps,
            best,
            best_measured: best_m,
            settings: ranked.len(),
        });
    }
    spreads.sort_by(f64::total_cmp);
    AdviceReport {
        findings: findings(&g, cells),
        advice,
        cells: cells.len(),
        repetitions,
        median_spread: spreads.get(spreads.len() / 2).copied(),
    }
}

fn mib(b: u64) -> String {
    format!("{} MiB", b >> 20)
}

fn mibs(bps: f64) -> String {
    format!("{:.1}", bps / 1048576.0)
}

pub fn setting_text(s: &Setting) -> String {
    format!(
        "memory {}, {}{}, swap {}",
        mib(s.memory_bytes),
        if s.direct { "direct" } else { "buffered" },
        if s.host_direct { ", host cache off" } else { "" },
        match s.swap_bytes {
            None => "host default".into(),
            Some(0) => "none".into(),
            Some(b) => mib(b),
        }
    )
}

/// A measured range: "12.3 (11.9-12.8)".
fn range_text(m: &Measured) -> String {
    if m.repetitions > 1 {
        format!("{} ({}-{})", mibs(m.mean_bps), mibs(m.min_bps), mibs(m.max_bps))
    } else {
        mibs(m.mean_bps)
    }
}

fn outcome_text(o: Outcome) -> &'static str {
    match o {
        Outcome::Wins => "yes",
        Outcome::Loses => "no, the other way",
        Outcome::WithinSpread => "within spread",
    }
}

/// Pairs of settings of one (class, size) that differ in one respect only:
/// `key` is the setting without that respect, `which` tells the two apart.
fn pairs(
    s: &BTreeMap<Setting, Measured>,
    key: impl Fn(&Setting) -> Setting,
    which: impl Fn(&Setting) -> Option<bool>,
) -> Vec<(&Setting, &Measured, &Setting, &Measured)> {
    let mut out = Vec::new();
    for (a, ma) in s {
        if which(a) != Some(true) {
            continue;
        }
        for (b, mb) in s {
            if which(b) == Some(false) && key(a) == key(b) {
                out.push((a, ma, b, mb));
            }
        }
    }
    out
}

/// Document 004's findings, tested on the grid, like against like.
fn findings(g: &Grid, cells: &[Cell]) -> Vec<Finding> {
    let memories: Vec<u64> = {
        let mut m: Vec<u64> = g.values().flat_map(|s| s.keys().map(|k| k.memory_bytes)).collect();
        m.sort();
        m.dedup();
        m
    };
    let (Some(&lo), Some(&hi)) = (memories.first(), memories.last()) else {
        return vec![];
    };
    let mut out = Vec::new();
    let by_memory = |s: &Setting| Setting {
        memory_bytes: 0,
        ..s.clone()
    };
    // A test over one respect: (claim, which cells, key, which side should win).
    let mut test = |claim: String,
                    sizes: &dyn Fn(u64) -> bool,
                    key: &dyn Fn(&Setting) -> Setting,
                    which: &dyn Fn(&Setting) -> Option<bool>,
                    none_why: &str| {
        let mut outcomes = Vec::new();
        let mut ev = Vec::new();
        for ((class, data), s) in g {
            if !sizes(*data) {
                continue;
            }
            for (a, ma, b, mb) in pairs(s, key, which) {
                let o = compare(ma, mb);
                outcomes.push(o);
                ev.push(format!(
                    "{class} {}, {} vs {}: {} vs {} MiB/s: {}",
                    mib(*data),
                    setting_text(a),
                    setting_text(b),
                    range_text(ma),
                    range_text(mb),
                    outcome_text(o)
                ));
            }
        }
        let verdict = Verdict::of(&outcomes);
        let wins = outcomes.iter().filter(|o| **o == Outcome::Wins).count();
        out.push(Finding {
            claim,
            verdict,
            evidence: if outcomes.is_empty() {
                none_why.to_string()
            } else {
                format!(
                    "{wins} of {} comparisons beyond the spread: {}",
                    outcomes.len(),
                    ev.join("; ")
                )
            },
        });
    };

    // 1. Data that fits: more memory wins.
    test(
        format!(
            "small data (fits {}): more tenant memory wins ({} over {})",
            mib(hi),
            mib(hi),
            mib(lo)
        ),
        &|data| lo != hi && data <= hi,
        &by_memory,
        &|s| match s.memory_bytes {
            m if m == hi => Some(true),
            m if m == lo => Some(false),
            _ => None,
        },
        "the sweep has no data size at or below the largest memory with two memory sizes",
    );
    // 2. Data beyond every memory: less memory wins, and direct I/O (no
    // guest cache) wins; apart, as a host may reproduce one and not the other.
    test(
        format!(
            "large data (beyond {}): less tenant memory wins ({} over {})",
            mib(hi),
            mib(lo),
            mib(hi)
        ),
        &|data| lo != hi && data > hi,
        &by_memory,
        &|s| match s.memory_bytes {
            m if m == lo => Some(true),
            m if m == hi => Some(false),
            _ => None,
        },
        "the sweep has no data size above the largest memory with two memory sizes",
    );
    test(
        "large data: direct I/O in the tenant (no guest cache) wins over buffered".into(),
        &|data| data > hi,
        &|s| Setting {
            direct: false,
            ..s.clone()
        },
        &|s| Some(s.direct),
        "the sweep has no data size above the largest memory with direct and buffered I/O",
    );
    // 3. No swap is usually best.
    test(
        "no swap is usually best".into(),
        &|_| true,
        &|s| Setting {
            swap_bytes: None,
            ..s.clone()
        },
        &|s| match s.swap_bytes {
            Some(0) => Some(true),
            Some(_) => Some(false),
            None => None,
        },
        "the sweep does not vary swap with swap = none among the values",
    );
    out.push(request_shape(cells));
    out
}

/// Finding 4, figures 9-10: buffered I/O reaches the disks as many small requests,
/// direct I/O as few large ones; cells of one workload and size that differ
/// only in direct vs buffered, repetitions pooled.
fn request_shape(cells: &[Cell]) -> Finding {
    let mut pooled: BTreeMap<(String, u64, Setting), RequestShape> = BTreeMap::new();
    for c in cells {
        let Some(r) = c.requests else { continue };
        let e = pooled
            .entry((c.class.clone(), c.data_bytes, Setting::of(c)))
            .or_default();
        e.application_ops += r.application_ops;
        e.application_bytes += r.application_bytes;
        e.virtual_ops += r.virtual_ops;
        e.virtual_bytes += r.virtual_bytes;
        e.physical_ops += r.physical_ops;
        e.physical_bytes += r.physical_bytes;
    }
    let mut total = 0;
    let mut held = 0;
    let mut ev = Vec::new();
    let mut skipped = Vec::new();
    for ((class, data, s), direct) in pooled.iter().filter(|(k, _)| k.2.direct) {
        let buffered_key = (
            class.clone(),
            *data,
            Setting {
                direct: false,
                ..s.clone()
            },
        );
        let Some(buffered) = pooled.get(&buffered_key) else {
            continue;
        };
        // Nothing to split or merge in reads of one page, and nothing to
        // count where the guest cache kept the reads from the disk.
        let one_page = buffered.application_bytes <= buffered.application_ops * 4096;
        let absorbed = buffered.virtual_bytes * 2 < buffered.application_bytes;
        if one_page || absorbed {
            skipped.push(format!(
                "{class} {} memory {} ({})",
                mib(*data),
                mib(s.memory_bytes),
                if one_page {
                    "reads of one page"
                } else {
                    "the guest cache kept most reads"
                }
            ));
            continue;
        }
        let (Some(bn), Some(dn), Some(bs), Some(ds)) = (
            buffered.virtual_per_op(),
            direct.virtual_per_op(),
            buffered.virtual_mean_bytes(),
            direct.virtual_mean_bytes(),
        ) else {
            continue;
        };
        total += 1;
        let ok = bn > dn && bs < ds;
        if ok {
            held += 1;
        }
        ev.push(format!(
            "{class} {}, memory {}: virtual-disk read requests per read {bn:.2} buffered vs {dn:.2} direct, mean size {:.0} vs {:.0} KiB{}",
            mib(*data),
            mib(s.memory_bytes),
            bs / 1024.0,
            ds / 1024.0,
            match (buffered.physical_mean_bytes(), direct.physical_mean_bytes()) {
                (Some(p), Some(q)) => format!("; physical mean size {:.0} vs {:.0} KiB", p / 1024.0, q / 1024.0),
                _ => String::new(),
            }
        ));
    }
    Finding {
        claim: "buffered I/O reaches the disks as many small requests, direct I/O as few large ones (figures 9-10)"
            .into(),
        verdict: if total == 0 {
            Verdict::NotTested
        } else if held * 2 > total {
            Verdict::Reproduced
        } else if held == 0 {
            Verdict::Contradicted
        } else {
            Verdict::NotShown
        },
        evidence: {
            let mut e = if total == 0 {
                "no pair of recorded runs differing only in direct vs buffered I/O whose buffered reads reached the disk in more than one page".to_string()
            } else {
                format!(
                    "{held} of {total} pairs (counts, not throughput: no spread needed): {}",
                    ev.join("; ")
                )
            };
            if !skipped.is_empty() {
                e.push_str(&format!("; not comparable: {}", skipped.join(", ")));
            }
            e
        },
    }
}

/// The advice as text.
pub fn text(r: &AdviceReport) -> String {
    let mut s = format!(
        "advice from {} measured cells (mean throughput of the tenants; {} repetition(s) per setting{})\n\n",
        r.cells,
        r.repetitions,
        r.median_spread
            .map(|m| format!(", median spread (max - min) / mean {:.0} %", m * 100.0))
            .unwrap_or_default()
    );
    s.push_str(&format!(
        "{:<16} {:>9}  {:<52} {:>22}  {:>8}\n",
        "workload", "data", "best setting", "MiB/s (min-max)", "margin"
    ));
    for a in &r.advice {
        s.push_str(&format!(
            "{:<16} {:>9}  {:<52} {:>22}  {:>8}\n",
            a.class,
            mib(a.data_bytes),
            setting_text(&a.best),
            range_text(&a.best_measured),
            a.margin
                .map(|m| format!("+{:.0} %{}", m * 100.0, if a.beyond_spread { "" } else { "~" }))
                .unwrap_or_else(|| "-".into())
        ));
        if let Some((s2, v)) = &a.runner_up {
            s.push_str(&format!(
                "{:<16} {:>9}  next: {:<46} {:>22}\n",
                "",
                "",
                setting_text(s2),
                mibs(*v)
            ));
        }
    }
    if r.advice.iter().any(|a| a.margin.is_some() && !a.beyond_spread) {
        s.push_str("~ = the margin is within the repetitions' spread: either setting may be best\n");
    }
    s.push_str(
        "\ndocument 004's findings on this host (a difference counts when it exceeds the repetitions' spread):\n",
    );
    for f in &r.findings {
        s.push_str(&format!("- {}: {}\n  {}\n", f.claim, f.verdict.text(), f.evidence));
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
            host_direct: false,
            swap_bytes: Some(swap << 20),
            throughput_bps: mibs * 1048576.0,
            p99_ns: None,
            guest_absorbed: None,
            host_absorbed: None,
            guest_absorbed_writes: None,
            host_absorbed_writes: None,
            requests: None,
            run: String::new(),
        }
    }

    /// Three repetitions around `mibs`, +-`spread` MiB/s.
    fn reps(class: &str, data: u64, mem: u64, direct: bool, swap: u64, mibs: f64, spread: f64) -> Vec<Cell> {
        [mibs - spread, mibs, mibs + spread]
            .iter()
            .map(|m| cell(class, data, mem, direct, swap, *m))
            .collect()
    }

    #[test]
    fn findings_count_only_differences_beyond_the_spread() {
        let mut cells = Vec::new();
        // Small data: 512M memory clearly beats 128M.
        cells.extend(reps("fio randread", 64, 128, false, 0, 300.0, 10.0));
        cells.extend(reps("fio randread", 64, 512, false, 0, 360.0, 10.0));
        // Large data: less memory better, but within the spread.
        cells.extend(reps("fio randread", 1024, 128, false, 0, 62.0, 5.0));
        cells.extend(reps("fio randread", 1024, 512, false, 0, 60.0, 5.0));
        // Direct beats buffered clearly at both memories.
        cells.extend(reps("fio randread", 1024, 128, true, 0, 90.0, 2.0));
        cells.extend(reps("fio randread", 1024, 512, true, 0, 80.0, 2.0));
        // Swap: clearly worse.
        cells.extend(reps("fio randread", 1024, 128, false, 128, 40.0, 2.0));
        let r = advise(&cells);
        let v: Vec<Verdict> = r.findings.iter().map(|f| f.verdict).collect();
        assert_eq!(
            v,
            [
                Verdict::Reproduced,
                Verdict::NotShown,
                Verdict::Reproduced,
                Verdict::Reproduced,
                Verdict::NotTested
            ],
            "{r:#?}"
        );
        assert_eq!(r.repetitions, 3);
        let small = &r.advice[0];
        assert_eq!(small.best.memory_bytes, 512 << 20);
        assert!((small.margin.unwrap() - 0.2).abs() < 1e-9, "360 over 300");
        assert!(small.beyond_spread);
        assert!(text(&r).contains("350.0-370.0"), "{}", text(&r));
    }

    #[test]
    fn a_single_repetition_shows_nothing_beyond_noise() {
        let cells = vec![
            cell("fio randread", 64, 128, false, 0, 300.0),
            cell("fio randread", 64, 512, false, 0, 360.0),
        ];
        let r = advise(&cells);
        assert_eq!(r.findings[0].verdict, Verdict::NotShown, "{:?}", r.findings[0]);
        assert!(!r.advice[0].beyond_spread);
        assert!(text(&r).contains("+20 %~"));
    }

    #[test]
    fn the_host_cache_mode_is_a_setting_of_its_own() {
        let mut a = cell("dd read", 512, 192, false, 0, 100.0);
        let mut b = a.clone();
        b.host_direct = true;
        b.throughput_bps = 50.0 * 1048576.0;
        a.run = "a".into();
        let r = advise(&[a, b]);
        assert_eq!(r.advice[0].settings, 2);
        assert!(setting_text(&r.advice[0].runner_up.as_ref().unwrap().0).contains("host cache off"));
    }

    #[test]
    fn buffered_reaches_the_disks_as_more_smaller_requests() {
        let shape = |ops: u64, vops, vbytes| RequestShape {
            application_ops: ops,
            application_bytes: ops << 20,
            virtual_ops: vops,
            virtual_bytes: vbytes,
            physical_ops: vops / 2,
            physical_bytes: vbytes,
        };
        let mut b = cell("dd read", 512, 192, false, 0, 100.0);
        b.requests = Some(shape(512, 4096, 512 << 20));
        let mut d = cell("dd read", 512, 192, true, 0, 100.0);
        d.requests = Some(shape(512, 1024, 512 << 20));
        let r = advise(&[b.clone(), d.clone()]);
        let f = r.findings.last().unwrap();
        assert_eq!(f.verdict, Verdict::Reproduced, "{f:?}");
        assert!(f.evidence.contains("8.00 buffered vs 2.00 direct"), "{f:?}");
        d.requests = Some(shape(512, 8192, 512 << 20));
        let r = advise(&[b, d]);
        assert_eq!(r.findings.last().unwrap().verdict, Verdict::Contradicted);
    }

    #[test]
    fn findings_say_when_the_sweep_cannot_tell() {
        let r = advise(&[cell("dd write", 64, 128, false, 0, 10.0)]);
        assert!(r.findings.iter().all(|f| f.verdict == Verdict::NotTested), "{r:#?}");
    }
}
