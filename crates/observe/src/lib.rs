//! `ontime observe`: records scheduler events (ontime-trace) and shows the
//! analysis (ontime-sched) as text, JSON and figures: per-window CPU use, run
//! delay (steal), contention and host I/O path CPU per tenant and vCPU.

pub mod plots;
pub mod report;
pub mod top;
