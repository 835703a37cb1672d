//! `ontime explain RESULT RECORDING`: why the late events a probe kept
//! (`ontime crawl|cyclic --keep-late`) were late, on a scheduler recording
//! made beside the run (`ontime observe record --all`), on the same clock.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use ontime_core::bad_input;
use ontime_trace::recording::Recording;

use crate::output;

#[derive(Args)]
pub struct ExplainArgs {
    /// A probe's JSON result holding `late_events` (crawl or cyclic with
    /// --keep-late or --explain)
    #[arg(value_name = "RESULT")]
    probe_result: PathBuf,
    /// A recording of every CPU made during the run (`ontime observe
    /// record --all`)
    recording: PathBuf,
    /// Also write the scheduling around the worst late events as a
    /// Perfetto trace (ui.perfetto.dev)
    #[arg(long, value_name = "FILE")]
    perfetto: Option<PathBuf>,
    #[command(flatten)]
    out: output::OutputFlags,
}

pub fn run(a: ExplainArgs) -> Result<()> {
    output::check_outputs(&[
        ("--result", a.out.result.as_deref()),
        ("--perfetto", a.perfetto.as_deref()),
    ])?;
    let Some((late, what)) = ontime_explain::kept::read(&a.probe_result)? else {
        return Err(bad_input(format!(
            "{}: no late_events: run the probe with --keep-late (or --explain)",
            a.probe_result.display()
        )));
    };
    let rec = Recording::read(&a.recording).map_err(|e| bad_input(format!("{e:#}")))?;
    let x = crate::explain::explain(
        &crate::explain::Recorded::Whole(Box::new(rec)),
        &late,
        a.perfetto.as_deref(),
    )?;
    let text = x.text(what);
    a.out.emit(&x, &text)
}
