//! ontime-report: the lab's HTML report over a results directory
//! ([`report`]: the verdict against `[targets]` first, then figures and
//! tables, simulated runs beside measured ones), its document-004 I/O
//! section ([`iocells`]) and document-003 channel section ([`netreport`]),
//! and the HTML style and escaping they share with the fleet report
//! ([`html`], from ontime-plot); the headline table as Markdown
//! ([`markdown`]).
//!
//! It reads results only (through ontime-scenario); it runs nothing.

pub use ontime_plot::html;
pub mod bench;
pub mod iocells;
pub mod markdown;
pub mod netreport;
pub mod report;

pub use report::{write, Written};

/// The largest figure of a run directory copied into the report (a flame
/// graph of a long recording is a few MiB); a larger file, a FIFO or a
/// device there is bad input naming the file.
pub const MAX_FIGURE_BYTES: u64 = 64 << 20;
