//! ontime-report: the lab's HTML report over a results directory
//! ([`report`]: the verdict against `[targets]` first, then figures and
//! tables, simulated runs beside measured ones), its document-004 I/O
//! section ([`iocells`]) and document-003 channel section ([`netreport`]),
//! and the small HTML helpers they share ([`html`]).
//!
//! It reads results only (through ontime-scenario); it runs nothing.

pub mod html;
pub mod iocells;
pub mod netreport;
pub mod report;

pub use report::{write, Written};
