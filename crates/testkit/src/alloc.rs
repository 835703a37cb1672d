//! How much memory a piece of code takes at its peak, for tests that bound
//! it: a test binary installs [`Counting`] as its global allocator and
//! wraps the code in [`peak_of`].
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOCATOR: ontime_testkit::alloc::Counting = ontime_testkit::alloc::Counting;
//! ```
//!
//! The counts are the whole process's: keep one test in such a binary, or
//! other tests' allocations count too.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes allocated now, and the most since the last reset.
static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// Allocation calls (alloc, alloc_zeroed, realloc) since the start.
static CALLS: AtomicUsize = AtomicUsize::new(0);

/// The system allocator, counting.
pub struct Counting;

fn grew(by: usize) {
    CALLS.fetch_add(1, Ordering::Relaxed);
    let now = NOW.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn shrank(by: usize) {
    NOW.fetch_sub(by, Ordering::Relaxed);
}

// SAFETY: every call goes to the system allocator unchanged; the counters
// only watch.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, as GlobalAlloc::alloc requires.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            grew(l.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: as alloc.
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            grew(l.size());
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from this allocator with layout `l`.
        unsafe { System.dealloc(p, l) };
        shrank(l.size());
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `p` came from this allocator with layout `l`.
        let q = unsafe { System.realloc(p, l, new_size) };
        if !q.is_null() {
            if new_size >= l.size() {
                grew(new_size - l.size());
            } else {
                shrank(l.size() - new_size);
            }
        }
        q
    }
}

/// Allocation calls so far, by every thread (0 unless [`Counting`] is the
/// global allocator; a shrinking realloc is not counted).
pub fn calls() -> usize {
    CALLS.load(Ordering::Relaxed)
}

/// Runs `f` and returns what it returned and the most memory allocated
/// at once while it ran, beyond what was allocated before (0 unless
/// [`Counting`] is the global allocator).
pub fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = NOW.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let out = f();
    (out, PEAK.load(Ordering::Relaxed).saturating_sub(base))
}
