//! ontime-io: the layered view of document 004 from an I/O recording. Per
//! tenant and layer (application, virtual disk, physical disk): operations,
//! bytes, request sizes and latency, reads and writes apart; how much of
//! each layer's traffic the cache below it absorbed (guest cache between the
//! application and the virtual disk, host cache between the virtual disk
//! and the physical disk); requests split or merged on the way down; time
//! series and the cache sizes beside them. The recording and its I/O
//! events are ontime-recording's ([`ontime_recording::io_abi`],
//! [`ontime_recording::io_layout`]); ontime-trace makes them.
//!
//! [`analyze`] makes the [`IoAnalysis`]; [`merge_guest`] folds in what a
//! guest recorded inside itself. Its text is its
//! [`TextReport`](ontime_core::export::TextReport) ([`text()`]), its JSON
//! serde's, its figures [`figures()`].

mod analysis;
mod cache;
mod figures;
mod guest;
mod layers;
mod series;
mod text;

pub mod advise;
pub mod workload;

pub use analysis::{analyze, FileIo, IoAnalysis, TenantIo};
pub use analysis::{ClockOffset, GuestView};
pub use cache::{Absorbed, Absorption, CacheState, Span};
pub use figures::figures;
pub use guest::{clock_offset, merge_guest, GuestRecording};
pub use layers::{BlockCounters, LayerStats, OpStats};
pub use series::SeriesPoint;
pub use text::{format_bytes, text};
