//! The lab: ontime's main job. It turns the probes into experiments on one
//! machine: sandboxed tenants (network namespace + cgroup + k vCPU threads,
//! [`sandbox`], [`cgroup`], disks in [`disk`]), a host relay that carries
//! every packet with WAN delay and stands for Dom0 / vhost (ontime-net's
//! relay), loads, the runner that streams results to a directory
//! ([`runner`]), the scheduler and I/O recordings of each run
//! ([`observe`], [`iorec`]), document 003's channels in a run
//! ([`netlab`]), QEMU guests as tenants ([`qemu`]) and the clean-up of
//! anything that escaped ([`clean`]); kernel settings a run changes are
//! put back, even after a kill, by ontime-core's `sysctl`.
//!
//! Scenarios and the run record are ontime-scenario's, the report is
//! ontime-report's, the simulator's front is ontime-sim-lab's: none of
//! them needs a sandbox. Sandboxes model host scheduling and the host I/O
//! path, not instruction emulation. Does not own the probes themselves
//! (ontime-crawl, ontime-cyclic): tenants run the `ontime` binary's probe
//! verbs.

pub mod cgroup;
pub mod clean;
pub mod disk;
pub mod iorec;
pub mod lock;
pub mod netlab;
pub use ontime_core::names;
pub mod observe;
pub mod qemu;
pub mod runner;
pub mod sandbox;
pub mod stages;
pub mod sys;
pub mod undo;
