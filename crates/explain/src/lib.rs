//! ontime-explain: why one late poll, wake-up or packet was late. It owns
//! the attribution: a late event's lateness, [planned, actual) of a probe
//! thread, split into causes (waited for a CPU, interrupts, throttled, own
//! work, blocked, late timer, emulation, unexplained) that add up to it
//! exactly, each naming its culprit (thread, process, tenant, CPU,
//! interrupt). docs/explain.md states the rules and the JSON.
//!
//! [`timeline`] builds, once per recording (or flight recorder ring), the
//! scheduling time line the attribution reads: who ran on each CPU when,
//! interrupt time, and the probe threads' states. [`cause`] is the
//! vocabulary, [`attribute`] the rules ([`explain`]), [`report`] the JSON
//! of one late event with its culprits named.
//!
//! [`summary`] explains a run's late events together and words them;
//! [`perfetto`] writes the scheduling around them as a Perfetto trace.
//!
//! It does not capture (ontime-trace records; the recording format is
//! ontime-recording's) or decide which events are late (the probe's
//! result and its threshold do, `ontime_core::late`): crawl, cyclic and
//! the CLI wire it. No BPF.

pub mod attribute;
pub mod cause;
pub mod kept;
pub mod perfetto;
pub mod report;
pub mod summary;
pub mod timeline;
pub mod truth;

pub use attribute::{explain, explain_arrival, explain_into, RT_PREEMPT_GRACE_NS};
pub use cause::{BlockedOn, Cause, CauseKind, Detail, Explanation, Gap, Irq, Late, Segment, Side, Who};
pub use report::{CauseShare, Culprit, LateEvent};
pub use summary::{explain_run, RunExplanation};
pub use timeline::{Coverage, Probe, Timeline, TimelineBuilder};
