//! ontime-sim-lab: lab scenarios in the simulator. It runs a scenario's
//! runs on ontime-sim's engine and writes them in the lab's results layout,
//! marked simulated ([`simulate`]), and fits this host's noise and costs
//! from measured runs ([`calibrate`]), and checks itself against the
//! committed lab runs ([`validate`]). `ontime sim` and `ontime plan` use
//! it without linking the lab's sandbox.

pub mod calibrate;
pub mod simulate;
pub mod validate;
