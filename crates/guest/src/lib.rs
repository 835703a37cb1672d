//! ontime-guest: what a lab QEMU guest is, apart from the lab's sandboxes:
//! the guest kit and the accelerator choice ([`kit`]), the job a guest
//! runs ([`job`]) and the host's control channel into it ([`control`]).
//! The lab (crates/lab/src/qemu.rs) bridges, images and starts guests
//! with them.

pub mod control;
pub mod job;
pub mod kit;
