//! `ontime plan` (document 000, section 4): places timing-critical
//! crawler tenants onto hosts so that every tenant keeps its target, and
//! predicts an existing placement (`plan check`).
//!
//! Owns the planning input (hosts and tenants), the screening rules that
//! document 000 drew from its measurements, the simulator verification of
//! every chosen host, and the comparison with packing by 1 s mean CPU (what
//! Nova's CPU filter, Kubernetes requests and DRS do).
//!
//! The rules, per host: (1) the tenants' vCPUs plus the host I/O path's
//! fit the physical cores (the error jumped at 8 VMs of 1 vCPU on 8 cores
//! with Dom0); (2) the sum of the tenants' 100 ms peak CPU stays below the
//! cores (1 s means hide the bursts that broke 2-vCPU VMs at 1000 rps);
//! (3) the I/O path's CPU for every packet stays within what it may use
//! (at 19 VMs x 200 rps the starved I/O domain broke everything). A host
//! that passes the rules is then simulated ([`ontime_sim`]) for long enough
//! to support each tenant's target percentile, and kept only if every
//! tenant meets its target.

pub mod input;
pub mod peak;
pub mod placement;
pub mod predict;

mod text;
pub use input::PlanOptions;
pub use input::{HostSpec, PlanInput, TenantSpec};
pub use ontime_sim::sched::Model;
pub use placement::{check, plan, CheckReport, PlanReport};
pub use predict::{peak_cpu, HostPrediction, TenantPrediction};
