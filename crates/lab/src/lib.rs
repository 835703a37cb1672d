//! The lab: ontime's main job. It turns the probes into experiments on one
//! machine: sandboxed tenants (network namespace + cgroup + k vCPU threads,
//! [`sandbox`], [`cgroup`]), a host relay that carries every packet with WAN
//! delay and stands for Dom0 / vhost (ontime-net's relay), loads, scenario files with
//! sweeps ([`scenario`]), the runner that streams results to a directory
//! ([`runner`]), the scheduler recording of each run ([`observe`]), tenant disks and the I/O recording of a run ([`disk`], [`iorec`]), the clean-up of anything that escaped ([`clean`]), kernel settings changed for a run and put back even after a kill ([`sysctl`]) and the
//! report ([`report`]).
//!
//! Sandboxes model host scheduling and the host I/O path, not instruction
//! emulation. Does not own the probes themselves (ontime-crawl,
//! ontime-cyclic): tenants run the `ontime` binary's probe verbs.

pub mod calibrate;
pub mod cgroup;
pub mod clean;
pub mod disk;
pub mod iocells;
pub mod iorec;
pub mod lock;
pub mod netlab;
pub mod netreport;
pub use ontime_core::names;
pub mod observe;
pub mod report;
pub mod results;
pub mod runner;
pub mod sandbox;
pub mod scenario;
pub mod simulate;
pub mod sys;
pub mod sysctl;
