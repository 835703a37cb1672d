//! The foundation every ontime verb stands on.
//!
//! Owns: integer-nanosecond time on CLOCK_MONOTONIC and absolute-time sleeps
//! ([`time`]), the real-time settings a probe thread may ask for ([`rt`]),
//! HdrHistogram statistics with honest percentile support ([`stats`]), the
//! one capability probe of the host ([`caps`]) and the manifest that every
//! result carries ([`manifest`]).
//!
//! Does not own any workload, network protocol or output format of a verb.

pub mod caps;
pub mod cgroup;
pub mod config;
pub mod cputime;
pub mod duration;
pub mod export;
pub mod fsio;
pub mod hlog;
pub mod interval;
pub mod limits;
pub mod manifest;
pub mod names;
pub mod proc;
pub mod rt;
pub mod size;
pub mod stats;
pub mod time;
pub mod work;

pub use time::MonoNs;
