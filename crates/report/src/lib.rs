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
pub mod iocells;
pub mod markdown;
pub mod netreport;
pub mod report;

pub use report::{write, Written};
