//! `ontime sim` (document 000, section 4): a discrete-event
//! simulator of CPU scheduling on one host.
//!
//! Owns periodic task sets and their textbook analysis ([`task`]), the
//! scheduler models behind one trait ([`sched`]: the lab's own Linux
//! classes, FIFO, RR, EDF, CFS, Xen credit, credit2, RTDS), the event
//! engine that runs any workload's items on m CPUs, with whole-host stalls
//! ([`engine`]), the host's own noise ([`noise`]) and the crawler as a
//! workload ([`crawl`]). Integer nanoseconds throughout; every draw is
//! seeded, so a run is a function of its inputs.
//!
//! The verbs live elsewhere: scenarios in the simulator, its calibration
//! and the lab-shaped output in `ontime-lab` (`simulate`, `calibrate`),
//! placement in `ontime-plan`.

pub mod affine;
pub mod crawl;
pub mod cyclic;
pub mod eevdf;
pub mod engine;
pub mod noise;
pub mod sched;
pub mod shares;
pub mod task;

#[cfg(test)]
pub(crate) mod testutil;
