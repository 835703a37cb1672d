//! The I/O side of a lab report (document 004): each run as a cell of the
//! sweep (setting, throughput, latency, absorption), the advice drawn from
//! them (`ontime io advise`) and the report's I/O section.
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Result;
use ontime_core::duration::format_ns;
use ontime_io::advise::{advise, setting_text, AdviceReport, Cell, RequestShape};

use crate::html::esc;
use ontime_scenario::results::{ProbeResult, RunResults};

/// The run's layered analysis, when it recorded I/O.
pub fn analysis(r: &RunResults) -> Option<ontime_io::IoAnalysis> {
    let f = r.record.io.as_ref()?.analysis.as_ref()?;
    ontime_scenario::results::read_json(&r.dir.join(f), "I/O analysis").ok()
}

/// One cell per run with I/O tenants.
pub fn cells(runs: &[RunResults]) -> Vec<Cell> {
    let mut out = Vec::new();
    for r in runs {
        let t = &r.record.config.tenant;
        let (Some(io), Some(mem)) = (&t.io, t.memory.as_deref()) else {
            continue;
        };
        let results: Vec<&ontime_io::workload::WorkloadResult> = r
            .tenants
            .iter()
            .filter_map(|(_, p)| match p {
                ProbeResult::Io(w) => Some(w.as_ref()),
                _ => None,
            })
            .collect();
        if results.is_empty() {
            continue;
        }
        let (Ok(data), Ok(memory)) = (
            ontime_core::size::parse_bytes(&io.size),
            ontime_core::size::parse_bytes(mem),
        ) else {
            continue;
        };
        let a = analysis(r);
        let mean = |f: &dyn Fn(&ontime_io::TenantIo) -> Option<f64>| {
            let v: Vec<f64> = a.as_ref()?.tenants.iter().filter_map(f).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        out.push(Cell {
            class: io.class(),
            data_bytes: data,
            memory_bytes: memory,
            direct: io.direct,
            host_direct: t
                .disk
                .as_ref()
                .is_some_and(|d| d.direct || d.cache == Some(ontime_scenario::vm::DiskCache::None)),
            requests: a.as_ref().map(request_shape),
            swap_bytes: t.swap_bytes().ok().flatten(),
            throughput_bps: results.iter().map(|w| w.throughput_bps).sum::<f64>() / results.len() as f64,
            p99_ns: results.iter().filter_map(|w| w.latency.percentile(99.0)).max(),
            guest_absorbed: mean(&|t| t.absorption.guest_cache_reads.share),
            host_absorbed: mean(&|t| t.absorption.host_cache_reads.share),
            guest_absorbed_writes: mean(&|t| t.absorption.guest_cache_writes.share),
            host_absorbed_writes: mean(&|t| t.absorption.host_cache_writes.share),
            run: r.name.clone(),
        });
    }
    out
}

/// Document 004's figures 9-10 over a run's tenants: application read
/// operations, and read requests and bytes at the virtual disk (for a QEMU
/// guest, its own block layer: what it asked of its virtual disk) and the
/// physical disk. Reads only: the workloads lay their files out with
/// buffered writes whatever the variant, so only reads tell direct from
/// buffered.
fn request_shape(a: &ontime_io::IoAnalysis) -> RequestShape {
    let mut r = RequestShape::default();
    for t in &a.tenants {
        let virt = t.inside_guest.as_ref().map(|g| &g.block).unwrap_or(&t.virtual_disk);
        r.application_ops += t.application.read.ops;
        r.application_bytes += t.application.read.bytes;
        r.virtual_ops += virt.read.ops;
        r.virtual_bytes += virt.read.bytes;
        r.physical_ops += t.physical_disk.read.ops;
        r.physical_bytes += t.physical_disk.read.bytes;
    }
    r
}

/// The advice over every run of a results directory.
pub fn advice(runs: &[RunResults]) -> AdviceReport {
    advise(&cells(runs))
}

fn pct(v: Option<f64>) -> String {
    v.map(|x| format!("{:.0} %", x * 100.0)).unwrap_or_else(|| "-".into())
}

/// "I/O": a row per run (throughput, latency, what each cache absorbed),
/// the advice table with document 004's findings, and the layer figure of
/// the run with the lowest throughput.
pub fn section(runs: &[RunResults], cells: &[Cell], out: &Path) -> Result<(String, Vec<PathBuf>)> {
    let mut h = String::new();
    let mut pngs = Vec::new();
    if cells.is_empty() {
        return Ok((h, pngs));
    }
    let qemu = |r: &RunResults| r.record.config.tenant.backend == ontime_scenario::scenario::Backend::Qemu;
    let disk = match (runs.iter().any(|r| !qemu(r)), runs.iter().any(qemu)) {
        (_, false) => "an image file on the host through a loop device, ext4, its memory limit = the guest cache",
        (false, true) => {
            "a QEMU guest's virtual disk: an image file on the host that its QEMU reads and writes, ext4 inside the guest, \
its memory = the guest cache, the application layer and the guest cache recorded inside the guest"
        }
        (true, true) => {
            "an image file on the host, through a loop device for sandbox tenants, as a QEMU guest's virtual disk for QEMU tenants \
(application layer and guest cache recorded inside the guest)"
        }
    };
    let repetitions = runs.iter().map(|r| r.record.repetition).max().unwrap_or(1);
    let noise = if repetitions > 1 {
        format!("{repetitions} repetitions per cell, a row each: compare a difference with their spread.")
    } else {
        "One repetition per cell: differences of a few per cent are within this host's run-to-run noise.".to_string()
    };
    let _ = write!(
        h,
        "<h2 id=io>I/O (document 004)</h2><p>Each tenant ran the workload on its own disk ({disk}). Throughput = the tool's bytes over its measured time, mean of the tenants; latency = the tool's per-operation \
completion latency (fio only), worst tenant. Absorbed = share of application bytes the guest cache kept from the virtual disk, \
and of virtual-disk bytes the host cache kept from the physical disk, reads and writes apart, from the run's I/O recording (ontime io); writes still dirty \
at the end count as absorbed. The host's page cache was dropped before every run. {noise}</p><table><tr><th>run</th><th>workload</th><th>data</th><th>setting</th><th>MiB/s</th><th>p99</th>\
<th>guest cache absorbed (reads / writes)</th><th>host cache absorbed (reads / writes)</th></tr>",
    );
    for c in cells {
        let _ = write!(
            h,
            "<tr><td class=l>{}</td><td class=l>{}</td><td>{} MiB</td><td class=l>{}</td><td>{:.1}</td><td>{}</td><td>{} / {}</td><td>{} / {}</td></tr>",
            esc(&c.run),
            esc(&c.class),
            c.data_bytes >> 20,
            esc(&setting_text(&ontime_io::advise::Setting {
                memory_bytes: c.memory_bytes,
                direct: c.direct,
                host_direct: c.host_direct,
                swap_bytes: c.swap_bytes
            })),
            c.throughput_bps / 1048576.0,
            c.p99_ns.map(format_ns).unwrap_or_else(|| "-".into()),
            pct(c.guest_absorbed),
            pct(c.guest_absorbed_writes),
            pct(c.host_absorbed),
            pct(c.host_absorbed_writes)
        );
    }
    h.push_str("</table>");
    let adv = advise(cells);
    h.push_str(
        "<h3>Advice (ontime io advise)</h3><table><tr><th>workload</th><th>data</th><th>best setting</th><th>MiB/s</th><th>next best</th><th>margin</th></tr>",
    );
    for a in &adv.advice {
        let _ = write!(
            h,
            "<tr><td class=l>{}</td><td>{} MiB</td><td class=l>{}</td><td>{:.1}</td><td class=l>{}</td><td>{}</td></tr>",
            esc(&a.class),
            a.data_bytes >> 20,
            esc(&setting_text(&a.best)),
            a.best_bps / 1048576.0,
            a.runner_up
                .as_ref()
                .map(|(s, v)| format!("{} ({:.1})", esc(&setting_text(s)), v / 1048576.0))
                .unwrap_or_else(|| "-".into()),
            a.margin.map(|m| format!("+{:.0} %", m * 100.0)).unwrap_or_else(|| "-".into())
        );
    }
    h.push_str("</table><h3>Document 004's findings on this host</h3><ul>");
    for f in &adv.findings {
        let _ = write!(
            h,
            "<li><b>{}</b>: {}. {}</li>",
            esc(&f.claim),
            f.verdict.text(),
            esc(&f.evidence)
        );
    }
    h.push_str("</ul>");
    // The layers over time of the slowest run's first tenant.
    if let Some(worst) = cells
        .iter()
        .min_by(|a, b| a.throughput_bps.total_cmp(&b.throughput_bps))
    {
        if let Some(r) = runs.iter().find(|r| r.name == worst.run) {
            if let Some(a) = analysis(r) {
                let _ = write!(
                    h,
                    "<h3>Run {} (lowest throughput)</h3><pre>{}</pre>",
                    esc(&r.name),
                    esc(&ontime_io::text(&a))
                );
                let src = r.dir.join("io").join(format!(
                    "io-{}.png",
                    a.tenants.first().map(|t| t.name.as_str()).unwrap_or("t0")
                ));
                if src.exists() {
                    let png = out.join("io-1.png");
                    ontime_core::fsio::copy_input(&src, "figure", crate::MAX_FIGURE_BYTES, &png)?;
                    let _ = write!(h, "<figure><img src=\"io-1.png\" width=900><figcaption>Bytes per second at each layer (io-1.png)</figcaption></figure>");
                    pngs.push(png);
                }
            }
        }
    }
    Ok((h, pngs))
}
