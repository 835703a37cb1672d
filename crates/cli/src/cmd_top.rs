//! `ontime observe top`: arguments only; the live view and its Prometheus
//! exposition are `ontime_observe::top`.

use crate::flags::{DurationFlag, MechanismFlag, TargetArgs};
use clap::Args;
use ontime_core::bad_input;
use ontime_core::duration::parse_ns;
use ontime_observe::top::TopOptions;
use std::io::IsTerminal;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args)]
#[command(mut_arg(
    "duration",
    DurationFlag::help_and_d("Stop after this long [default: until Ctrl-C]", None)
))]
pub struct TopArgs {
    #[command(flatten)]
    targets: TargetArgs,
    /// Also a row per vCPU thread
    #[arg(long)]
    vcpus: bool,
    /// Refresh period
    #[arg(long, default_value = "1s", value_parser = parse_ns)]
    interval: u64,
    #[command(flatten)]
    duration: DurationFlag,
    /// Serve the same figures as Prometheus metrics on ADDR (e.g. 127.0.0.1:9464), path /metrics
    #[arg(long, value_name = "ADDR")]
    prometheus: Option<String>,
    /// Plain text, one table per refresh, no screen clearing
    #[arg(long)]
    plain: bool,
    #[command(flatten)]
    mechanism: MechanismFlag,
}

pub fn run(a: TopArgs) -> anyhow::Result<()> {
    let targets = a.targets.resolve()?;
    if a.interval < 100_000_000 {
        return Err(bad_input("--interval must be at least 100ms"));
    }
    let stop = Arc::new(AtomicBool::new(false));
    crate::signals::install_flag(stop.clone())?;
    let clear = !a.plain && std::io::stdout().is_terminal();
    let opts = TopOptions {
        interval_ns: a.interval,
        vcpus: a.vcpus,
        prometheus: a.prometheus,
        mechanism: a.mechanism.mechanism,
        duration: a.duration.until_stopped().map(Duration::from_nanos),
    };
    // Bad input from the view (`--prometheus ADDR` that cannot be listened
    // on) is said as its own one line, without the context.
    ontime_observe::top::run(targets, opts, &stop, &mut |table| {
        if clear {
            crate::out!("\x1b[H\x1b[2J");
        }
        crate::out!("{table}");
    })
    .map_err(|e| match e.downcast_ref::<ontime_core::BadInput>() {
        Some(l) => bad_input(l.to_string()),
        None => e,
    })
}
