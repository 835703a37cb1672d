//! ontime-sched: scheduling time lines, with no BPF or kernel dependency.
//! Events (recorded by ontime-trace, or made by a simulator) become per-
//! thread intervals (running on CPU c, waiting behind whom, sleeping),
//! those become window accumulators from 1 ms to 1 s, and those become the
//! [`analysis::Analysis`] that observe, the lab, profile, sim and plan all
//! read: a simulated run and a recorded run are scored by the same code.
//!
//! [`analyze`] holds the streaming per-thread state machine
//! ([`analyze::Analyzer`]), [`window`] its window accumulators,
//! [`wakeups`] what it counts of the host's work conservation and wake-up
//! placement, [`report`] the per-group figures it reports, and
//! [`analysis`] a whole recording analysed. [`wake_detail`] breaks the
//! wake-ups down by who woke whom onto whom, and the run-queue waits by
//! where they came from, in a pass of its own (`observe report --wakeups`).

pub mod analysis;
pub mod analyze;
mod durations;
pub mod report;
pub mod wake_detail;
pub mod wakeups;
pub mod window;

pub use analysis::{analyze, analyze_with, Analysis};
