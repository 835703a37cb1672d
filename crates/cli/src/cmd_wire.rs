//! `ontime wire record`: a poller ontime did not write, measured from its
//! packets on an interface (docs/protocols.md, "Measuring a poller from
//! its packets").

use crate::flags::DurationFlag;
use clap::{Args, Subcommand};
use ontime_core::duration::{format_ns, parse_ns};
use ontime_core::stats::Summary;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

#[derive(Args)]
pub struct WireArgs {
    #[command(subcommand)]
    action: WireAction,
}

#[derive(Subcommand)]
enum WireAction {
    /// Capture a poller's requests on an interface and judge every point
    /// it polls: period, interval error, missed slots, response times
    Record(RecordArgs),
}

#[derive(Args)]
#[command(mut_arg("duration", DurationFlag::help("How long to capture (none: until Ctrl-C)", None)))]
struct RecordArgs {
    /// The interface to capture on: a tenant's tap or veth, or any host
    /// interface (lo for pollers and devices on this host)
    #[arg(short, long, default_value = "lo")]
    interface: String,
    #[command(flatten)]
    duration: DurationFlag,
    /// The poller's period for every point [default: each point's own,
    /// inferred from its first gaps]
    #[arg(long, value_parser = parse_ns)]
    period: Option<u64>,
    /// Ports HTTP servers listen on (repeatable) [default: 80, 8080]
    #[arg(long)]
    http_port: Vec<u16>,
    /// Ports Modbus/TCP servers listen on (repeatable) [default: 502]
    #[arg(long)]
    modbus_port: Vec<u16>,
    /// Ports BACnet/IP devices listen on (repeatable) [default: 47808]
    #[arg(long)]
    bacnet_port: Vec<u16>,
    /// Count samples above this interval error
    #[arg(long, value_parser = parse_ns)]
    threshold: Option<u64>,
    #[command(flatten)]
    out: crate::output::OutputFlags,
}

pub fn run(a: WireArgs) -> anyhow::Result<()> {
    match a.action {
        WireAction::Record(r) => record(r),
    }
}

fn record(a: RecordArgs) -> anyhow::Result<()> {
    crate::output::check_outputs(&[("--result", a.out.result.as_deref())])?;
    let mut ports = ontime_wire::Ports::default();
    for (given, into) in [
        (&a.http_port, &mut ports.http),
        (&a.modbus_port, &mut ports.modbus),
        (&a.bacnet_port, &mut ports.bacnet),
    ] {
        if !given.is_empty() {
            *into = given.clone();
        }
    }
    let options = ontime_wire::WireOptions {
        interface: a.interface.clone(),
        ports,
        period_ns: a.period,
        duration_ns: a.duration.until_stopped(),
        threshold_ns: a.threshold,
    };
    options
        .validate()
        .map_err(|e| ontime_core::bad_input(format!("--{e}")))?;
    let stop = Arc::new(AtomicBool::new(false));
    crate::signals::install_flag(stop.clone())?;
    let limit = options.duration_ns;
    let pb = crate::output::progress_bar(limit.map_or(0, |d| d.div_ceil(1_000_000_000)));
    let json = a.out.json;
    let recorded = ontime_wire::record(
        &options,
        &stop,
        || {
            if !json {
                ontime_core::errln!(
                    "ontime wire: capturing on {} {}",
                    a.interface,
                    limit.map_or("until Ctrl-C".into(), |d| format!("for {}", format_ns(d)))
                );
            }
        },
        |s| pb.set_position(s),
    );
    // Cleared whether or not the capture could open.
    pb.finish_and_clear();
    let (result, _) = recorded?;
    // A stop is how a capture without -D ends: the result says so.
    a.out.emit(&result, &text(&result))
}

/// A lab tenant's capture (`tenant.command`): until its duration or a
/// stop, its result and pooled histogram log written whole.
pub fn execute(p: ontime_scenario::probe::WireProbe) -> anyhow::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    crate::signals::install_flag(stop.clone())?;
    ontime_core::rt::set_thread_name("ontime-wire");
    let wall = std::time::SystemTime::now();
    let (result, pooled) = ontime_wire::record(
        &p.options,
        &stop,
        || println!("ontime wire: capturing on {}", p.options.interface),
        |_| {},
    )?;
    if let Some(path) = &p.hlog {
        let mut log = ontime_core::hlog::HlogFile::create(path, "ontime wire: every point's interval error", wall)?;
        log.write(
            "interval_error",
            &pooled,
            std::time::Duration::ZERO,
            std::time::Duration::from_nanos(result.duration_ns),
        )?;
        log.flush()?;
    }
    ontime_core::fsio::write_atomic(&p.result, &serde_json::to_vec_pretty(&result)?)?;
    Ok(())
}

fn text(r: &ontime_wire::WireResult) -> String {
    let f = |v: Option<u64>| v.map_or("n/a".into(), format_ns);
    let p = |s: &Summary, q: f64| f(s.percentile(q));
    let mut t = format!(
        "ontime wire: {} frames on {} over {}; requests http {} modbus {} bacnet {}, answers seen {}, unanswered {}\n",
        r.frames,
        r.interface,
        format_ns(r.duration_ns),
        r.requests.http,
        r.requests.modbus,
        r.requests.bacnet,
        r.answers.http + r.answers.modbus + r.answers.bacnet,
        r.unanswered
    );
    t += &format!(
        "{} points: interval error p50 {} p99 {} p99.999 {} max {}, missed {}; response time p50 {} p99 {} max {}\n",
        r.points_seen,
        p(&r.interval_error, 50.0),
        p(&r.interval_error, 99.0),
        p(&r.interval_error, 99.999),
        f(r.interval_error.max_ns),
        r.missed,
        p(&r.response_time, 50.0),
        p(&r.response_time, 99.0),
        f(r.response_time.max_ns)
    );
    let mut rows: Vec<&ontime_wire::PointRow> = r.points.iter().collect();
    rows.sort_by_key(|p| std::cmp::Reverse(p.interval_error.max_ns));
    if !rows.is_empty() {
        t += "worst points (by interval error max):\n";
    }
    for row in rows.iter().take(20) {
        t += &format!(
            "  {}: {} requests, period {} ({}), interval error p99 {} max {}, missed {}\n",
            row.point,
            row.requests,
            f(row.period_ns),
            row.period_from,
            p(&row.interval_error, 99.0),
            f(row.interval_error.max_ns),
            row.missed
        );
    }
    for w in &r.warnings {
        t += &format!("warning: {w}\n");
    }
    t
}
