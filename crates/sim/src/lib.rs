//! `ontime sim` (document 000, section 4; issue 12), first part: a
//! discrete-event simulator of CPU scheduling on one host.
//!
//! Owns periodic task sets and their textbook analysis ([`task`]), the
//! scheduler models behind one trait ([`sched`]) and the event engine that
//! runs jobs on m CPUs ([`engine`]). Integer nanoseconds throughout; the
//! only randomness is a seeded release jitter, so a run is a function of
//! its inputs.
//!
//! Does not own yet: the crawler and wake-up workloads, the host I/O path,
//! the Xen credit/credit2/RTDS and CFS models, the lab-shaped output and the
//! `ontime sim` / `ontime plan` verbs (see docs/architecture.md).

pub mod engine;
pub mod sched;
pub mod task;
