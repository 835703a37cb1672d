//! `ontime bench report`: the tables of bench/results.md, computed from
//! the raw results the bench/*.py scripts write (ontime_report::bench).

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand};

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    cmd: BenchCmd,
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Tables, ratios and target verdicts from raw benchmark results
    /// (bench/*.py --out FILE): medians and ranges over the rounds,
    /// percentiles of the pooled histograms, ours over the peer per round
    Report(ReportArgs),
}

#[derive(Args)]
struct ReportArgs {
    /// Result files, or directories of them (their *.json, sorted)
    #[arg(required = true, value_name = "FILE|DIR")]
    results: Vec<PathBuf>,
    /// One summary table: a row per target of every result
    #[arg(long, conflicts_with = "json")]
    summary: bool,
    /// Each result's cells, ratios and verdicts as JSON (Markdown otherwise)
    #[arg(long)]
    json: bool,
}

pub fn run(a: BenchArgs) -> Result<()> {
    let BenchCmd::Report(a) = a.cmd;
    let results = ontime_report::bench::read_all(&a.results)?;
    if a.json {
        let v: Vec<_> = results
            .iter()
            .map(|(f, r)| ontime_report::bench::computed(f, r))
            .collect();
        crate::outln!("{}", serde_json::to_string_pretty(&v)?);
    } else if a.summary {
        crate::outln!("{}", ontime_report::bench::summary(&results).trim_end());
    } else {
        let texts: Vec<String> = results.iter().map(|(_, r)| ontime_report::bench::markdown(r)).collect();
        crate::outln!("{}", texts.join("\n").trim_end());
    }
    Ok(())
}
