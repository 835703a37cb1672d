//! The foundation every ontime verb stands on.
//!
//! Owns: integer-nanosecond time on CLOCK_MONOTONIC and absolute-time sleeps
//! ([`time`]), the real-time settings a probe thread may ask for ([`rt`]),
//! HdrHistogram statistics with honest percentile support ([`stats`]), the
//! one capability probe of the host ([`caps`]) and the manifest that every
//! result carries ([`manifest`]), kernel settings changed for a run and
//! put back even after ontime was killed ([`sysctl`]), and the one
//! bad-input error ([`BadInput`], made by [`bad_input`]): every verb
//! returns it for input the user must fix, and the CLI maps it to exit
//! code 2.
//!
//! Does not own any workload, network protocol or output format of a verb.

pub mod caps;
pub mod cgroup;
pub mod config;
pub mod cputime;
pub mod duration;
pub mod error;
pub mod export;
pub mod fsio;
pub mod hlog;
pub mod interval;
pub mod kstamp;
pub mod late;
pub mod limits;
pub mod manifest;
pub mod names;
pub mod packet;
pub mod proc;
pub mod rt;
pub mod size;
pub mod stats;
pub mod sysctl;
pub mod time;
pub mod wire;
pub mod work;

pub use error::{bad_input, BadInput};
pub use time::MonoNs;

/// Standard error that may be closed (`ontime ... 2>&1 | head -1`): a
/// message that cannot be written is dropped. `eprintln!` panics there, and
/// a panic in the signal thread or half-way through a sweep would leave the
/// work unstopped or unfinished.
pub fn stderr(args: std::fmt::Arguments) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(args);
}

/// `eprintln!` through [`stderr`]: never panics.
#[macro_export]
macro_rules! errln {
    () => { $crate::stderr(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::stderr(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `eprint!` through [`stderr`]: never panics.
#[macro_export]
macro_rules! err {
    ($($arg:tt)*) => { $crate::stderr(format_args!($($arg)*)) };
}
