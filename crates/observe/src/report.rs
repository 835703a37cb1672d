//! `observe report`: an [`Analysis`] as text (tables per tenant, vCPU and
//! window) and as JSON.
use std::fmt::Write as _;

use ontime_core::duration::format_ns;
use ontime_sched::analysis::{Analysis, WakeDetail};
use ontime_sched::analyze::WindowUsage;

/// 1ms, 250us, 1s: window lengths in a table column.
pub fn short_ns(ns: u64) -> String {
    match ns {
        n if n % 1_000_000_000 == 0 => format!("{}s", n / 1_000_000_000),
        n if n % 1_000_000 == 0 => format!("{}ms", n / 1_000_000),
        n if n % 1_000 == 0 => format!("{}us", n / 1_000),
        n => format!("{n}ns"),
    }
}

fn f2(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.2}")).unwrap_or_else(|| "n/a".into())
}

fn ns(v: Option<u64>) -> String {
    v.map(format_ns).unwrap_or_else(|| "n/a".into())
}

fn usage_rows(out: &mut String, label: &str, usage: &[WindowUsage]) {
    for u in usage {
        let above: Vec<String> = u
            .above
            .iter()
            .filter(|a| a.fraction > 0.0)
            .map(|a| format!(">{}: {:.2}%", a.cpus, a.fraction * 100.0))
            .collect();
        let _ = writeln!(
            out,
            "  {label:<22} {:>7} {:>8} {:>6} {:>6} {:>6} {:>6}  {}",
            short_ns(u.window_ns),
            u.windows,
            f2(u.mean),
            f2(u.p99),
            f2(u.max),
            f2(u.min),
            if above.is_empty() {
                "-".to_string()
            } else {
                above.join(" ")
            }
        );
    }
}

/// The analysis as people read it: usage per window, run delay,
/// contention, who ran instead, the host I/O path; `vcpus` adds a row per
/// vCPU thread.
pub struct AnalysisText<'a> {
    pub analysis: &'a Analysis,
    pub vcpus: bool,
}

impl ontime_core::export::TextReport for AnalysisText<'_> {
    fn text(&self) -> String {
        text(self.analysis, self.vcpus)
    }
}

fn text(a: &Analysis, vcpus: bool) -> String {
    let mut out = String::new();
    let r = &a.recording;
    let _ = writeln!(
        out,
        "recording: {} on {} ({} CPUs, kernel {}), {}, {} events, {} lost{}",
        r.mechanism,
        r.hostname,
        r.cpus,
        r.kernel,
        format_ns(r.duration_ns),
        r.events,
        r.lost,
        if r.complete { "" } else { ", cut short" }
    );
    let _ = writeln!(out, "\nCPU use per window (CPUs; 1.00 = one CPU all window):");
    let _ = writeln!(
        out,
        "  {:<22} {:>7} {:>8} {:>6} {:>6} {:>6} {:>6}  windows above k CPUs",
        "group", "window", "windows", "mean", "p99", "max", "min"
    );
    for g in &a.groups {
        usage_rows(&mut out, &g.name, &g.usage);
        if vcpus {
            for t in g.threads.iter().filter(|t| !t.usage.is_empty()) {
                usage_rows(&mut out, &format!("  {}[{}]", t.name, t.tid), &t.usage);
            }
        }
    }
    let _ = writeln!(out, "\nRun delay (runnable, not running) and contention:");
    let _ = writeln!(
        out,
        "  {:<22} {:>5} {:>10} {:>10} {:>6} {:>6} {:>6} {:>6}  {:>7} {:>9} {:>9}  {:>7} {:>9}  {:>7} {:>9}",
        "group",
        "vCPUs",
        "on-CPU",
        "run delay",
        "run",
        "idle",
        "steal",
        "wait/d",
        "any",
        "any p99",
        "any max",
        "partial",
        "p99",
        "full",
        "p99"
    );
    for g in &a.groups {
        let c = &g.contention;
        let _ = writeln!(
            out,
            "  {:<22} {:>5} {:>10} {:>10} {:>5.1}% {:>5.1}% {:>5.1}% {:>5.1}%  {:>7} {:>9} {:>9}  {:>7} {:>9}  {:>7} {:>9}",
            g.name,
            g.vcpus,
            format_ns(g.on_cpu_ns),
            format_ns(g.run_delay_ns),
            g.time_shares.run_pct,
            g.time_shares.idle_pct,
            g.time_shares.steal_pct,
            g.wait_share_pct,
            c.any.count,
            ns(c.any.p99_ns),
            ns(c.any.max_ns),
            c.partial.count,
            ns(c.partial.p99_ns),
            c.full.count,
            ns(c.full.p99_ns)
        );
        if vcpus {
            for t in &g.threads {
                let _ = writeln!(
                    out,
                    "    {:<20} {:>5} {:>10} {:>10}  waits {} p99 {} max {}, moved {}",
                    format!("{}[{}]", t.name, t.tid),
                    if t.vcpu { "vCPU" } else { "" },
                    format_ns(t.on_cpu_ns),
                    format_ns(t.run_delay_ns),
                    t.waits,
                    ns(t.wait_p99_ns),
                    ns(t.wait_max_ns),
                    t.migrations
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "  run + idle + steal = 100 % of the vCPUs' observed time (steal as document 002 and mpstat count it);\n  wait/d = run delay / (on-CPU + run delay), the share of its demand a group waited for"
    );
    let _ = writeln!(out, "\nWho ran while a group's vCPUs waited:");
    for g in a.groups.iter().filter(|g| !g.preemptors.is_empty()) {
        let top: Vec<String> = g
            .preemptors
            .iter()
            .take(5)
            .map(|p| format!("{} {:.0}% ({})", p.name, p.share * 100.0, format_ns(p.ns)))
            .collect();
        let _ = writeln!(out, "  {:<22} {}", g.name, top.join(", "));
    }
    if let Some(w) = a.work_conservation.as_ref().filter(|w| w.queued_ns > 0) {
        let _ = writeln!(
            out,
            "  of {} vCPU time queued behind a busy CPU, {} ({:.0}%) passed while another CPU idled (per-CPU run queues balanced late)",
            format_ns(w.queued_ns),
            format_ns(w.queued_while_idle_ns),
            w.while_idle_pct()
        );
    }
    if let Some(p) = a
        .work_conservation
        .as_ref()
        .and_then(|w| w.wakeups)
        .filter(|p| p.wakeups > 0)
    {
        let _ = writeln!(
            out,
            "  of {} wake-ups, {} ({:.0}%) were queued behind a busy CPU while another idled: {} ({:.0}%) preempted it within {}, {} got it as it went to sleep (their waker), {} moved to another CPU, {} waited longer; wake-up preemption {:.0}% (preempted of preempted + waited)",
            p.wakeups,
            p.onto_busy_while_idle,
            p.onto_busy_pct(),
            p.preempted_at_once,
            p.preempted_pct(),
            format_ns(ontime_sched::analysis::WAKE_AT_ONCE_NS),
            p.occupant_slept_at_once,
            p.moved,
            p.waited,
            p.wake_preempt_pct()
        );
        // Each only when such wake-ups happened: "of N <which>, M (x%) <where>".
        for (whole, which, part, pct, place) in [
            (
                p.prev_busy_while_idle,
                "whose last CPU was busy while another idled",
                p.stayed_on_busy_prev,
                p.stayed_pct(),
                "on that busy CPU all the same",
            ),
            (
                p.waker_elsewhere_both_busy,
                "by a busy CPU other than the woken thread's busy last one",
                p.pulled_to_waker,
                p.pulled_pct(),
                "on the waker's CPU",
            ),
        ] {
            if whole > 0 {
                let _ = writeln!(
                    out,
                    "  of {whole} wake-ups {which}, {part} ({pct:.0}%) were queued {place}"
                );
            }
        }
        let pairs: Vec<String> = p
            .by_kind
            .named()
            .iter()
            .filter(|(_, w)| w.wakeups > 0)
            .map(|(who, w)| format!("{who} {:.0}% of {}", w.preempt_pct(), w.wakeups))
            .collect();
        if !pairs.is_empty() {
            let _ = writeln!(
                out,
                "  wake-up preemption by who wakes onto whom (any CPU busy; preempted of preempted + waited): {}",
                pairs.join(", ")
            );
        }
    }
    if let Some(h) = a.host_io() {
        let _ = writeln!(
            out,
            "\nHost I/O path ({} threads): CPU per window, minimum and 1st percentile:",
            h.thread_count
        );
        for u in &h.usage {
            let _ = writeln!(
                out,
                "  {:>7}: min {} p1 {} mean {}",
                short_ns(u.window_ns),
                f2(u.min),
                f2(u.p1),
                f2(u.mean)
            );
        }
    }
    if let Some(d) = &a.wake_detail {
        wake_detail_text(&mut out, d);
    }
    for n in &a.notes {
        let _ = writeln!(out, "\nnote: {n}");
    }
    out
}

/// Rows each wake-up table prints; the JSON has them all.
const WAKE_ROWS: usize = 20;

fn us(v: Option<u64>) -> String {
    v.map(|n| format!("{:.0}", n as f64 / 1e3))
        .unwrap_or_else(|| "n/a".into())
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn more_rows(out: &mut String, rows: usize) {
    if rows > WAKE_ROWS {
        let _ = writeln!(out, "  ... {} more in the JSON", rows - WAKE_ROWS);
    }
}

/// `observe report --wakeups`: placement by situation, preemption pairs,
/// preempted waits and where the run-queue waits came from.
fn wake_detail_text(out: &mut String, d: &WakeDetail) {
    let _ = writeln!(
        out,
        "\nWake-up placement by situation (tracked threads that ran before; stayed = queued on the CPU it last ran on):"
    );
    if !d.wakers_recorded {
        let _ = writeln!(out, "  (this recording does not name the thread current at a wake-up)");
    }
    let _ = writeln!(
        out,
        "  {:<9} {:<16} {:<10} {:<10} {:<10} {:>8} {:>8} {:>6}",
        "woken", "woken by", "from", "last CPU", "others", "stayed", "moved", "moved%"
    );
    for r in d.placement.iter().take(WAKE_ROWS) {
        let _ = writeln!(
            out,
            "  {:<9} {:<16} {:<10} {:<10} {:<10} {:>8} {:>8} {:>5.0}%",
            r.woken,
            r.by,
            if r.from_last_cpu { "last CPU" } else { "another" },
            r.last_cpu_runs,
            r.other_cpus_run,
            r.stayed,
            r.moved,
            r.moved_pct()
        );
    }
    more_rows(out, d.placement.len());
    let _ = writeln!(
        out,
        "\nWoken behind a busy CPU while another idled, by woken <- occupant: got the CPU by preempting it \
         (preempt), as it slept (slept), within {} or later (late), by moving (moved), after another thread (other):",
        format_ns(ontime_sched::analysis::WAKE_AT_ONCE_NS)
    );
    let _ = writeln!(
        out,
        "  {:<36} {:>8} {:>6} {:>8} {:>6} {:>6} {:>6}  {:>8} {:>8}",
        "woken <- occupant", "preempt", "late", "slept", "late", "moved", "other", "p50 us", "p99 us"
    );
    for p in d.preemption.iter().take(WAKE_ROWS) {
        let _ = writeln!(
            out,
            "  {:<36} {:>8} {:>6} {:>8} {:>6} {:>6} {:>6}  {:>8} {:>8}",
            format!("{} <- {}", p.woken, p.occupant),
            p.preempted_at_once,
            p.preempted_late,
            p.occupant_slept_at_once,
            p.occupant_slept_late,
            p.moved,
            p.other,
            us(p.wait_p50_ns),
            us(p.wait_p99_ns)
        );
    }
    more_rows(out, d.preemption.len());
    let _ = writeln!(
        out,
        "\nPreempted (switched out still runnable), by preempted <- preemptor: how long until it ran again:"
    );
    let _ = writeln!(
        out,
        "  {:<36} {:<8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "preempted <- by", "ran next", "count", "p50 us", "p90 us", "p99 us", "max us"
    );
    for w in d.preempted_waits.iter().take(WAKE_ROWS) {
        let _ = writeln!(
            out,
            "  {:<36} {:<8} {:>8} {:>8} {:>8} {:>8} {:>8}",
            format!("{} <- {}", w.preempted, w.by),
            if w.moved { "moved" } else { "same" },
            w.count,
            us(w.p50_ns),
            us(w.p90_ns),
            us(w.p99_ns),
            us(Some(w.max_ns))
        );
    }
    more_rows(out, d.preempted_waits.len());
    let _ = writeln!(
        out,
        "\nWhere the tracked threads' run-queue wait came from (ms/s = ms waited per second per thread of the name):"
    );
    let _ = writeln!(
        out,
        "  {:<16} {:<9} {:<16} {:>10} {:>10} {:>8} {:>8} {:>8}",
        "waiting", "began", "CPU held by", "other idle", "ran moved", "ms/s", "count", "mean us"
    );
    for q in d.queue_waits.iter().take(WAKE_ROWS) {
        let _ = writeln!(
            out,
            "  {:<16} {:<9} {:<16} {:>10} {:>10} {:>8.2} {:>8} {:>8}",
            q.waiting,
            q.began,
            q.held_by,
            yes(q.idle_elsewhere),
            yes(q.ran_elsewhere),
            q.ms_per_s,
            q.count,
            us(Some(q.mean_ns()))
        );
    }
    more_rows(out, d.queue_waits.len());
}
