//! ontime-scenario: the lab's vocabulary, shared by the runner that makes
//! runs, `ontime sim` that simulates them and the report that reads them
//! back. It owns scenario files and sweeps ([`scenario`]: typed enums,
//! QEMU tenants' devices in [`vm`],
//! ranges, `[targets]`, the plan of runs), the run record (`run.json`,
//! [`record`]), the typed read-back of a run directory ([`results`]) and
//! results directories packed into one committed file ([`pack`]).
//!
//! It makes nothing and links no sandbox: a scenario can be planned,
//! simulated and reported on a machine where no lab could run.

pub mod pack;
pub mod probe;
pub mod record;
pub mod results;
pub mod scenario;
pub mod vm;
