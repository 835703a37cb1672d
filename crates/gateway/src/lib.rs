//! `ontime gateway`: building gateways for the crawler to poll.
//!
//! Owns the wire format of a batch point read ([`wire`], documented in
//! `docs/wire.md`), the point value model ([`points`]), the gateway
//! configuration with its controller delay and fault injection ([`config`]),
//! the server ([`server`], HTTP; its Modbus/TCP side in [`modbus`]; what
//! both share per request in `state`) and the
//! per-point receive-time log with its interval-error analysis
//! ([`recvlog`]).
//!
//! Does not own the crawler or any timing judgement beyond stamping the
//! receive time of each request.

pub mod bacnet;
pub mod config;
pub mod kstamp;
pub mod modbus;
pub mod points;
pub mod recvlog;
pub mod server;
mod state;
pub use ontime_core::wire;

pub use config::{Building, Faults, GatewayConfig};
