//! The caches between the layers: how much of a layer's traffic the cache
//! below it absorbed (guest cache between the application and the virtual
//! disk, host cache between the virtual disk and the physical disk), and
//! the caches' sizes, dirty pages and swap over the recording.
use ontime_recording::recording::Recording;
use serde::{Deserialize, Serialize};

/// Page size cachestat counts in.
const PAGE: u64 = 4096;

/// Share of a layer's bytes that never reached the layer below.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Absorbed {
    /// 1 - below/above, clamped at 0; None when nothing moved above.
    pub share: Option<f64>,
    /// below/above when the layer below moved more (read-ahead, metadata,
    /// whole blocks for partial writes).
    pub amplification: Option<f64>,
}

impl Absorbed {
    pub(crate) fn of(above: u64, below: u64) -> Absorbed {
        if above == 0 {
            return Absorbed {
                share: None,
                amplification: (below > 0).then_some(f64::INFINITY),
            };
        }
        let ratio = below as f64 / above as f64;
        Absorbed {
            share: Some((1.0 - ratio).max(0.0)),
            amplification: (ratio > 1.0).then_some(ratio),
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Absorption {
    /// Application -> virtual disk.
    pub guest_cache_reads: Absorbed,
    pub guest_cache_writes: Absorbed,
    /// Virtual disk -> physical disk.
    pub host_cache_reads: Absorbed,
    pub host_cache_writes: Absorbed,
}

/// Cache and memory at the start, the end and the largest seen, bytes.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Span {
    pub start: u64,
    pub end: u64,
    pub max: u64,
}

impl Span {
    fn push(&mut self, first: bool, v: u64) {
        if first {
            *self = Span {
                start: v,
                end: v,
                max: v,
            };
        } else {
            self.end = v;
            self.max = self.max.max(v);
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CacheState {
    /// The tenant's page cache (memory cgroup `file`/`cache`).
    pub guest_cache: Option<Span>,
    /// The image file's pages in the host page cache (cachestat).
    pub host_cache: Option<Span>,
    /// Image pages dirty in the host cache at the end (written by the
    /// tenant, not yet on the physical disk).
    pub host_dirty_end: Option<u64>,
    pub guest_dirty_end: Option<u64>,
    pub swap: Option<Span>,
    pub memory_limit: Option<u64>,
}

pub(crate) fn cache_state(rec: &Recording, group: u32) -> CacheState {
    let mut c = CacheState::default();
    for s in &rec.io_states {
        if let Some(m) = s.memory.iter().find(|m| m.group == group) {
            let first = c.guest_cache.is_none();
            c.guest_cache.get_or_insert_with(Span::default).push(first, m.file);
            let first = c.swap.is_none();
            c.swap.get_or_insert_with(Span::default).push(first, m.swap);
            c.guest_dirty_end = Some(m.dirty + m.writeback);
            c.memory_limit = m.limit;
        }
        if let Some(i) = s.images.iter().find(|i| i.group == group) {
            let first = c.host_cache.is_none();
            c.host_cache
                .get_or_insert_with(Span::default)
                .push(first, i.cache * PAGE);
            c.host_dirty_end = Some((i.dirty + i.writeback) * PAGE);
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absorption_is_the_share_that_stayed_above() {
        let a = Absorbed::of(1000, 250);
        assert_eq!(a.share, Some(0.75));
        assert_eq!(a.amplification, None);
        let b = Absorbed::of(1000, 4000);
        assert_eq!(b.share, Some(0.0));
        assert_eq!(b.amplification, Some(4.0));
        assert_eq!(Absorbed::of(0, 0).share, None);
    }
}
