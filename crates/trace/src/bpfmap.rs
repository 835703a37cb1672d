//! Reading BPF maps: the per-CPU counters every program of ours keeps.

use libbpf_rs::{MapCore, MapFlags};

/// A u64 counter of a per-CPU array at `index`, summed over the CPUs (0
/// when it cannot be read).
pub(crate) fn percpu_sum(map: &impl MapCore, index: u32) -> u64 {
    map.lookup_percpu(&index.to_ne_bytes(), MapFlags::ANY)
        .ok()
        .flatten()
        .map(|per_cpu| {
            per_cpu
                .iter()
                .filter_map(|v| v.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_ne_bytes))
                .sum()
        })
        .unwrap_or(0)
}
