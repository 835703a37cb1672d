//! Where a verb's result goes: text or JSON on stdout, and optionally a
//! JSON file, written even after an interruption.

use serde::Serialize;
use std::path::Path;

/// `--json` and `--result`, declared once for every verb that has a result.
#[derive(clap::Args, Debug, Default)]
pub struct OutputFlags {
    /// Print the result as JSON instead of text (schemas in docs/)
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON result to this file (whole or not at all; its
    /// directory must exist)
    #[arg(long, value_name = "FILE")]
    pub result: Option<std::path::PathBuf>,
}

impl OutputFlags {
    /// Prints `result` as text or JSON and writes the file.
    pub fn emit<T: Serialize>(&self, result: &T, text: &str) -> anyhow::Result<()> {
        emit(result, text, self.json, self.result.as_deref())
    }
}

/// The flags both probes (crawl and cyclic) take, declared once.
#[derive(clap::Args, Debug)]
pub struct ProbeFlags {
    /// Count samples above this value in every metric
    #[arg(long, value_parser = ontime_core::duration::parse_ns)]
    pub threshold: Option<u64>,
    /// Do not hold /dev/cpu_dma_latency at 0 during the run
    #[arg(long)]
    pub no_dma_latency: bool,
    /// HdrHistogram interval log of the run's metrics (crawl: send_lag,
    /// response_time, interval_error; cyclic: latency of every planned
    /// wake-up), for exact pooling and long runs
    #[arg(long, value_name = "FILE")]
    pub hlog: Option<std::path::PathBuf>,
    /// Interval of the histogram log (and of crawl's progress)
    #[arg(long, default_value = "1s", value_parser = ontime_core::duration::parse_ns)]
    pub hlog_interval: u64,
}

/// Checks every output file a verb will write, before it starts: a long run
/// must not end in "cannot write" for a directory that never existed.
pub fn check_outputs(files: &[(&str, Option<&Path>)]) -> anyhow::Result<()> {
    for (flag, p) in files {
        if let Some(p) = p {
            ontime_core::fsio::check_output_path(flag, p).map_err(ontime_core::bad_input)?;
        }
    }
    Ok(())
}

/// Prints the result (text or JSON) and writes it to `file` whole or not at
/// all (see [`ontime_core::fsio::write_atomic`]).
pub fn emit<T: Serialize>(result: &T, text: &str, json: bool, file: Option<&Path>) -> anyhow::Result<()> {
    use ontime_core::export::{Exporter, Json};
    let doc = Json.export(result)?;
    if let Some(p) = file {
        ontime_core::fsio::write_atomic(p, doc.as_bytes())?;
    }
    if json {
        crate::out!("{doc}");
    } else if text.ends_with('\n') {
        crate::out!("{text}");
    } else {
        // A one-line summary ends its line too (a shell prompt or the
        // next command's output must not follow on it).
        crate::outln!("{text}");
    }
    Ok(())
}

/// A progress bar on stderr when it is a terminal; hidden otherwise.
pub fn progress_bar(len: u64) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(len);
    pb.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len}s (eta {eta}) {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb
}

/// Standard output that a reader may close early (`ontime ... | head -1`):
/// the rest of the output is dropped, and the command still finishes its
/// work (result files, clean-up) instead of panicking half-way.
pub fn stdout(args: std::fmt::Arguments) {
    use std::io::Write;
    use std::sync::atomic::{AtomicBool, Ordering};
    static CLOSED: AtomicBool = AtomicBool::new(false);
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    if out.write_fmt(args).and_then(|_| out.flush()).is_err() {
        CLOSED.store(true, Ordering::Relaxed);
    }
}

/// `println!` through [`stdout`].
#[macro_export]
macro_rules! outln {
    () => { $crate::output::stdout(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::output::stdout(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `print!` through [`stdout`].
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::output::stdout(format_args!($($arg)*)) };
}
