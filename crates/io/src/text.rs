//! The analysis as people read it: [`IoAnalysis`]'s [`TextReport`], one
//! section per tenant (its disk, a table of its layers, request sizes, the
//! caches' absorption, requests split and merged, cache sizes, its busiest
//! files) between the recording's heading and the physical disks' lines;
//! and the byte counts the other outputs print too.
use ontime_core::duration::format_ns;
use ontime_core::export::TextReport;
use ontime_core::stats::Summary;
use ontime_recording::io_layout::AppLayer;

use crate::analysis::GuestView;
use crate::analysis::{IoAnalysis, TenantIo};
use crate::cache::{Absorbed, Span};
use crate::layers::{LayerStats, OpStats};

/// `b` bytes in binary units (B, KiB, ... TiB), one decimal above bytes.
pub fn format_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn pct(a: &Absorbed) -> String {
    match (a.share, a.amplification) {
        (None, Some(_)) => "- (nothing above, traffic below)".into(),
        (None, None) => "-".into(),
        (Some(_), Some(x)) if x.is_finite() && x >= 1.01 => format!("0 % (below moved {x:.2}x as much)"),
        (Some(_), Some(x)) if x.is_finite() => format!("0 % (below moved {:.1} % more)", (x - 1.0) * 100.0),
        (Some(s), _) => format!("{:.1} %", s * 100.0),
    }
}

fn lat(s: &Option<Summary>) -> String {
    let Some(s) = s else { return "-".into() };
    let p = |name: &str| {
        s.percentiles_ns
            .iter()
            .find(|p| p.name == name)
            .and_then(|p| p.value_ns)
            .map(format_ns)
            .unwrap_or_else(|| "-".into())
    };
    format!(
        "{}/{}/{}",
        p("p50"),
        p("p99"),
        s.max_ns.map(format_ns).unwrap_or_default()
    )
}

fn layer_line(name: &str, l: &LayerStats) -> String {
    format!(
        "  {:<15} {:>9} {:>11} {:>22} {:>9} {:>11} {:>22} {:>6}\n",
        name,
        l.read.ops,
        format_bytes(l.read.bytes),
        lat(&l.read.latency),
        l.write.ops,
        format_bytes(l.write.bytes),
        lat(&l.write.latency),
        l.syncs
    )
}

fn span(s: &Option<Span>) -> String {
    match s {
        Some(s) => format!(
            "{} -> {} (max {})",
            format_bytes(s.start),
            format_bytes(s.end),
            format_bytes(s.max)
        ),
        None => "not measured".into(),
    }
}

/// The report as text: the analysis's [`TextReport`].
pub fn text(a: &IoAnalysis) -> String {
    TextReport::text(a)
}

impl TextReport for IoAnalysis {
    fn text(&self) -> String {
        let mut s = String::new();
        heading(&mut s, self);
        for t in &self.tenants {
            s.push('\n');
            tenant(&mut s, t);
        }
        physical_disks(&mut s, self);
        s
    }
}

/// The recording: tenants, length, events and losses, what it could not
/// record, how it saw the application layer.
fn heading(s: &mut String, a: &IoAnalysis) {
    s.push_str(&format!(
        "I/O of {} tenant(s) over {} ({} events, {} lost{})\n",
        a.tenants.len(),
        format_ns(a.duration_ns),
        a.events,
        a.lost,
        if a.truncated { "; recording cut short" } else { "" }
    ));
    if a.lost > 0 {
        s.push_str("WARNING: events were lost; every count below is a lower bound\n");
    }
    for u in &a.unavailable {
        s.push_str(&format!("not recorded: {u}\n"));
    }
    if a.app_layer == AppLayer::Counters {
        s.push_str(
            "application layer: each thread's I/O counters (every read and write, files or not: a read of /dev/zero or a write to /dev/null counts, and shows as absorbed by the guest cache; no sizes, latency or files: record with --calls for those)\n",
        );
    }
}

/// One tenant's section.
fn tenant(s: &mut String, t: &TenantIo) {
    disk_line(s, t);
    layer_table(s, t);
    common_sizes(s, t);
    if t.disk.is_some() {
        absorption_and_requests(s, t);
    }
    caches(s, t);
    busiest_files(s, t);
}

/// The tenant's disk (or none) and memory limit.
fn disk_line(s: &mut String, t: &TenantIo) {
    match &t.disk {
        Some(d) => s.push_str(&format!(
            "{}: disk {} ({} {}; image {}{})",
            t.name,
            d.virtual_name(),
            if d.direct { "direct-I/O" } else { "buffered" },
            if d.loop_device.is_some() { "loop" } else { "VMM" },
            d.image.display(),
            d.physical
                .as_ref()
                .map(|p| format!(" on {}", p.name))
                .unwrap_or_default()
        )),
        None => s.push_str(&format!("{}: no virtual disk (application layer only)", t.name)),
    }
    if let Some(l) = t.cache.memory_limit {
        s.push_str(&format!(", memory limit {}", format_bytes(l)));
    }
    s.push('\n');
}

/// A row per layer, then where the layers were seen from and the traffic
/// on files outside the disk.
fn layer_table(s: &mut String, t: &TenantIo) {
    s.push_str(&format!(
        "  {:<15} {:>9} {:>11} {:>22} {:>9} {:>11} {:>22} {:>6}\n",
        "layer", "reads", "read bytes", "read p50/p99/max", "writes", "written", "write p50/p99/max", "syncs"
    ));
    s.push_str(&layer_line("application", &t.application));
    if let Some(g) = &t.inside_guest {
        s.push_str(&layer_line("guest's disk", &g.block));
    }
    if t.disk.is_some() {
        s.push_str(&layer_line("virtual disk", &t.virtual_disk));
        let u = &t.virtual_unfinished;
        if !u.is_empty() {
            s.push_str(&format!(
                "  and never seen to complete (in flight at the end, or completed where the host hides events): \
                 {} reads {}, {} writes {}\n",
                u.reads,
                format_bytes(u.read_bytes),
                u.writes,
                format_bytes(u.write_bytes)
            ));
        }
        s.push_str(&layer_line("physical disk", &t.physical_disk));
    }
    if let Some(g) = &t.inside_guest {
        inside_guest(s, g);
    }
    let other = &t.application_elsewhere;
    if other.read.ops + other.write.ops > 0 {
        s.push_str(&format!(
            "  (also {} read and {} written on files outside its disk, not counted above)\n",
            format_bytes(other.read.bytes),
            format_bytes(other.write.bytes)
        ));
    }
}

/// What was recorded inside a guest, and whether its clock was placed.
fn inside_guest(s: &mut String, g: &GuestView) {
    s.push_str(&format!(
        "  (application layer and guest cache recorded inside the guest ({}){}; the virtual disk is its VMM's calls on the image; {})\n",
        match g.app_layer {
            AppLayer::Calls => "every call",
            AppLayer::Counters => "its threads' counters",
        },
        if g.lost > 0 {
            format!(", {} events lost there", g.lost)
        } else {
            String::new()
        },
        match &g.clock {
            Some(c) => format!(
                "its clock placed from {} requests seen on both sides, spread {}",
                c.pairs,
                format_ns(c.spread_ns)
            ),
            None => "its clock not placed: its series stay out of the host's".into(),
        }
    ));
}

/// The most common request size at each layer, reads and writes apart.
fn common_sizes(s: &mut String, t: &TenantIo) {
    let common = |o: &OpStats| -> Option<String> {
        let (size, n) = o.sizes.iter().max_by_key(|(_, n)| *n)?;
        Some(format!(
            "{} ({:.0} %)",
            format_bytes(*size),
            *n as f64 * 100.0 / o.ops.max(1) as f64
        ))
    };
    let mut sizes = Vec::new();
    for (name, l) in [
        ("application", &t.application),
        ("virtual disk", &t.virtual_disk),
        ("physical disk", &t.physical_disk),
    ] {
        for (dir, o) in [("reads", &l.read), ("writes", &l.write)] {
            if let Some(c) = common(o) {
                sizes.push(format!("{name} {dir} {c}"));
            }
        }
    }
    if !sizes.is_empty() {
        s.push_str(&format!("  most common size (up to): {}\n", sizes.join(", ")));
    }
}

/// A tenant with a disk: what each cache absorbed, requests per layer and
/// the virtual disk's merges and splits.
fn absorption_and_requests(s: &mut String, t: &TenantIo) {
    let ab = &t.absorption;
    s.push_str(&format!(
        "  absorbed by the guest cache: reads {}, writes {}\n  absorbed by the host cache:  reads {}, writes {}\n",
        pct(&ab.guest_cache_reads),
        pct(&ab.guest_cache_writes),
        pct(&ab.host_cache_reads),
        pct(&ab.host_cache_writes)
    ));
    let per = |a: u64, b: u64| {
        if b == 0 {
            "-".to_string()
        } else {
            format!("{:.2}", a as f64 / b as f64)
        }
    };
    s.push_str(&format!(
        "  requests: {} calls -> {} virtual-disk requests -> {} physical requests (calls per virtual request {}, virtual per physical {})\n",
        t.application.read.ops + t.application.write.ops,
        t.virtual_disk.read.ops + t.virtual_disk.write.ops,
        t.physical_disk.read.ops + t.physical_disk.write.ops,
        per(
            t.application.read.ops + t.application.write.ops,
            t.virtual_disk.read.ops + t.virtual_disk.write.ops
        ),
        per(
            t.virtual_disk.read.ops + t.virtual_disk.write.ops,
            t.physical_disk.read.ops + t.physical_disk.write.ops
        ),
    ));
    if let Some(c) = &t.virtual_counters {
        s.push_str(&format!(
            "  {}: {} bios merged into {} requests ({} merges, {} splits)\n",
            c.device, c.bios, c.requests, c.merges, c.splits
        ));
    }
}

/// The share moved past the guest cache, the caches' and swap's sizes, and
/// what was still dirty at the end.
fn caches(s: &mut String, t: &TenantIo) {
    if let Some(d) = t.direct_share {
        if d > 0.0 {
            s.push_str(&format!("  O_DIRECT: {:.1} % of its bytes\n", d * 100.0));
        }
    }
    s.push_str(&format!(
        "  guest cache {}; host cache {}; swap {}\n",
        span(&t.cache.guest_cache),
        span(&t.cache.host_cache),
        span(&t.cache.swap)
    ));
    if let Some(dirty) = t.cache.host_dirty_end.filter(|&d| d > 0) {
        s.push_str(&format!(
            "  {} of the image still dirty in the host cache at the end (written later; counted as absorbed)\n",
            format_bytes(dirty)
        ));
    }
    if let Some(dirty) = t.cache.guest_dirty_end.filter(|&d| d > 0) {
        s.push_str(&format!(
            "  {} dirty in the guest cache at the end (written later; counted as absorbed)\n",
            format_bytes(dirty)
        ));
    }
}

/// The five files the tenant moved most bytes of.
fn busiest_files(s: &mut String, t: &TenantIo) {
    for f in t.files.iter().take(5) {
        s.push_str(&format!(
            "  file {}: read {}, written {}{}\n",
            f.path,
            format_bytes(f.read_bytes),
            format_bytes(f.write_bytes),
            if f.direct { " (O_DIRECT)" } else { "" }
        ));
    }
}

/// The physical disks: traffic outside every image, then each device's
/// bios and requests beside the kernel's own count.
fn physical_disks(s: &mut String, a: &IoAnalysis) {
    let o = &a.physical_other;
    if o.read.ops + o.write.ops > 0 {
        s.push_str(&format!(
            "\nphysical disk outside the images (host I/O, its file system's journal and metadata): {} reads {}, {} writes {}\n",
            o.read.ops,
            format_bytes(o.read.bytes),
            o.write.ops,
            format_bytes(o.write.bytes)
        ));
    }
    for c in &a.physical_counters {
        s.push_str(&format!(
            "{}: {} bios, {} requests ({} merges, {} splits){}\n",
            c.device,
            c.bios,
            c.requests,
            c.merges,
            c.splits,
            if c.failed > 0 {
                format!("; {} failed", c.failed)
            } else {
                String::new()
            }
        ));
        if let Some(k) = &c.kernel {
            s.push_str(&format!(
                "  the kernel's own count: {} requests, read {}, written {} (the events: read {}, written {})\n",
                k.reads + k.writes,
                format_bytes(k.read_bytes),
                format_bytes(k.write_bytes),
                format_bytes(c.read_bytes),
                format_bytes(c.write_bytes)
            ));
        }
    }
}
