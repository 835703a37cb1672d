//! ontime fleet (document 002 as a distributed system): `ontime agent`
//! records every host continuously in windows and publishes each to NATS
//! JetStream (the window in an object store, a notice on a work-queue
//! stream, de-duplicated by window id), spooling to a bounded directory
//! while the server is away; `ontime analyse` workers share the windows
//! stream as one durable pull consumer, analyse each window once, flag
//! windows that depart from a tenant's recent history, and publish the
//! results; `ontime fleet report` and `fleet top` show every host.
//! Agents may run wake-up probes whose late wake-ups travel with the
//! windows and are explained on them (a flight recorder: with `[flight]`
//! only the windows around them are published).
//! Each message is isolated: one that cannot be used (malformed, claiming
//! more than a worker takes, failing or crashing its analysis) goes to a
//! dead-letter stream with the reason and the worker goes on.

pub mod agent;
pub mod analysis;
pub mod anomaly;
pub mod conn;
pub mod metrics;
pub mod probes;
pub mod report;
pub mod spool;
pub mod wire;
pub mod worker;
