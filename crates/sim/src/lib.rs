//! `ontime sim` (document 000, section 4; issue 12), first part: a
//! discrete-event simulator of CPU scheduling on one host.
//!
//! Owns periodic task sets and their textbook analysis ([`task`]), the
//! scheduler models behind one trait ([`sched`]: FIFO, RR, EDF, CFS, Xen
//! credit, credit2, RTDS) and the event engine that runs any workload's
//! items on m CPUs ([`engine`]). Integer nanoseconds throughout; the
//! only randomness is a seeded release jitter, so a run is a function of
//! its inputs.
//!
//! Also the crawler as a workload ([`crawl`]).
//!
//! Does not own yet: the wake-up workload, the host I/O path as a thread,
//! the lab-shaped output and the `ontime sim` / `ontime plan` verbs (see
//! docs/architecture.md).

pub mod crawl;
pub mod engine;
pub mod noise;
pub mod sched;
pub mod task;
