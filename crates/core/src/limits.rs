//! What this tool accepts as input: the ranges every rate, duration, count
//! and size must fall in, checked before anything starts, and the host's
//! CPU count. A value outside its range is a usage error that names the flag
//! or key and the range; it never becomes a silent cut, a hang or an
//! allocation failure.

/// CPUs online on this host (not the ones our own affinity allows: a probe
/// pinned to one CPU must still see the host's count).
pub fn online_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n >= 1 {
        n as usize
    } else {
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    }
}

/// Polls per second one crawler process can plan. The engine keeps 10 000/s
/// at 14 % of a core (bench/results.md); well above that the plan no longer
/// fits in memory or a host's CPUs.
pub const MAX_POLLS_PER_SECOND: f64 = 1_000_000.0;
/// Points one gateway may carry (the plan holds each id).
pub const MAX_POINTS: u64 = 10_000_000;
/// CPUs of a simulated or planned host. The engine's work per event grows
/// with them; 256 is beyond any host the documents consolidate onto.
pub const MAX_SIM_CPUS: u64 = 256;
/// Tenants one plan places (after `count` is expanded), and hosts of one kind.
pub const MAX_TENANTS: u64 = 10_000;
/// Runs one scenario plans (sweep combinations times repetitions): each
/// is held planned in memory, and at a minute each, 10 000 is a week.
pub const MAX_RUNS: u64 = 10_000;
/// Buildings one gateway process serves.
pub const MAX_BUILDINGS: u64 = 10_000;
/// Threads a probe may run as vCPUs or probe threads, or a server as workers.
pub const MAX_THREADS: u64 = 1024;
/// Shortest period of a crawler point or gateway analysis.
pub const MIN_PERIOD_NS: u64 = 1_000_000;
/// Longest injected delay (a gateway's controller delay, its random part,
/// a spike): an hour is already past any crawler's timeout and the
/// summaries' one-hour ceiling, and three of them still add up in a u64.
pub const MAX_INJECTED_DELAY_NS: u64 = 3600 * 1_000_000_000;
/// Shortest wake-up interval of the cyclic probe.
pub const MIN_INTERVAL_NS: u64 = 1_000;
/// Longest run of any verb (a week): longer is a typo, not a plan.
pub const MAX_DURATION_NS: u64 = 7 * 24 * 3600 * 1_000_000_000;
/// Shortest recording or run that measures anything.
pub const MIN_DURATION_NS: u64 = 1_000_000;
/// Bins of a cyclictest-layout histogram (1 us each: one second).
pub const MAX_HISTOGRAM_BINS: u64 = 1_000_000;
/// CPU per packet of a simulated or planned host I/O path (`sim
/// --io-cost`, a plan host's `io_cost`, a calibration's): a packet that
/// costs more than a second of CPU is a typo, and a larger cost only piles
/// up work the run never gets through.
pub const MAX_IO_COST_NS: u64 = 1_000_000_000;
/// How late a simulated host's timers may wake a thread, and how long it
/// may stall as a whole (a calibration's noise and stall durations):
/// longer is a host that is down, not noise.
pub const MAX_HOST_DELAY_NS: u64 = 10_000_000_000;
/// Stalls per second of a simulated host (a calibration's): the engine
/// handles each as an event, and a host stalling more often than every
/// millisecond is not running anything.
pub const MAX_STALLS_PER_SECOND: f64 = 1000.0;
/// Crawler or probe tenants on one simulated host (`ontime sim`, a host of
/// `ontime plan`): each holds its interval-error and send-lag histograms,
/// about 0.53 MB (`ontime_sim::crawl::Footprint`).
pub const MAX_SIM_TENANTS: u64 = 1_000;
/// Threads on one simulated host (vCPUs, the I/O path, CPU hogs): about
/// 1 KB each, and the engine looks at each at every event.
pub const MAX_SIM_THREADS: u64 = 20_000;
/// Poll streams on one simulated host (each tenant's rate x period): each
/// keeps its plan and its answers in flight, about 320 bytes.
pub const MAX_SIM_STREAMS: u64 = 1_000_000;
/// Polls (or probe wake-ups) one simulated run plans (rate x simulated
/// time, summed over the tenants). A host that falls behind queues every
/// poll it has not sent, up to 128 bytes each: 10 M polls bound that to
/// 1.3 GB, and take about 20 s at the engine's speed (bench/results.md).
pub const MAX_SIM_POLLS: u64 = 10_000_000;
/// Polls of one simulated run that also records its scheduler view
/// (`sim --into`): every wake-up and switch is kept as an event for the
/// run's `observe.otrec`, about 512 bytes per poll with a holding I/O
/// path. 2 M holds document 000's longest lab run (1000 s at 1000 polls/s).
pub const MAX_SIM_VIEW_POLLS: u64 = 2_000_000;

/// The largest recording (`.otrec`) a reader takes. It is held whole in
/// memory (an event takes in memory the 24 bytes it takes on disk), so
/// this is about the most reading one costs, before its analysis.
pub const MAX_RECORDING_BYTES: u64 = 4 << 30;
/// CPUs a recording may claim. Every analysis keeps state per CPU and
/// looks at every CPU per wake-up, so a claim of a billion CPUs is
/// corruption, not a host; Linux builds for at most 8192, and 4096 is
/// five times the largest two-socket host.
pub const MAX_RECORDED_CPUS: u64 = 4096;
/// Groups a recording's META may name: the targets a user or an agent
/// names (a lab run has at most 200 tenants) and the host I/O path. Each
/// is a tenant's worth of state in every analysis.
pub const MAX_RECORDED_GROUPS: u64 = 1024;
/// Thread ids a recording names lie below Linux's PID_MAX_LIMIT, so the
/// threads one recording knows are at most that many.
pub const TID_LIMIT: u64 = 4 << 20;
/// Longest stretch of a recording without an event: a host's scheduler
/// switches every few milliseconds, so an hour of silence is a corrupt
/// stamp (or END), and walking to it tick by tick would take hours.
pub const MAX_EVENT_GAP_NS: u64 = 3_600_000_000_000;
/// Stack sampling period a recording may claim: `profile record --rate`
/// takes 1 to 10 000 samples per second; below 10 us is not sampling.
pub const MIN_SAMPLE_PERIOD_NS: u64 = 10_000;
/// See [`MIN_SAMPLE_PERIOD_NS`]: one sample a second.
pub const MAX_SAMPLE_PERIOD_NS: u64 = 1_000_000_000;
/// The largest file symbolisation reads symbols from (a binary named by a
/// recording's mappings): far above any program or library with its debug
/// information, far below what a hostile path could make it read.
pub const MAX_SYMBOL_FILE_BYTES: u64 = 2 << 30;

/// Checks `min <= value <= max`; the error names `what` and the range in
/// the value's own words (`show` formats a bound).
pub fn check<T: PartialOrd + Copy>(
    what: &str,
    value: T,
    min: T,
    max: T,
    show: impl Fn(T) -> String,
) -> Result<T, String> {
    if value < min || value > max {
        return Err(format!(
            "{what} = {} is out of range: give {} .. {}",
            show(value),
            show(min),
            show(max)
        ));
    }
    Ok(value)
}

/// [`check`] for a count.
pub fn count(what: &str, value: u64, min: u64, max: u64) -> Result<u64, String> {
    check(what, value, min, max, |v| v.to_string())
}

/// [`check`] for a duration in ns.
pub fn duration(what: &str, value: u64, min: u64, max: u64) -> Result<u64, String> {
    check(what, value, min, max, crate::duration::format_ns)
}

/// [`check`] for a rate per second (finite and positive first).
pub fn rate(what: &str, value: f64, max: f64) -> Result<f64, String> {
    if !value.is_finite() || value <= 0.0 {
        return Err(format!("{what} = {value} must be a positive number per second"));
    }
    if value > max {
        return Err(format!(
            "{what} = {value} is out of range: give at most {max} per second"
        ));
    }
    Ok(value)
}

/// Late events a probe keeps per thread for explanation (0: none): at most
/// 100 000 a thread and 10 million in all (32 bytes each, allocated before
/// the run).
pub fn kept_events(flag: &str, per_thread: usize, threads: usize) -> Result<(), String> {
    count(flag, per_thread as u64, 0, 100_000)?;
    if per_thread.saturating_mul(threads) > 10_000_000 {
        return Err(format!(
            "{flag} {per_thread} x {threads} threads keeps more than 10 000 000 events: give a smaller {flag}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_names_the_value_and_range() {
        let e = count("-h", 100_000_000_000, 0, MAX_HISTOGRAM_BINS).unwrap_err();
        assert!(e.contains("-h = 100000000000") && e.contains("1000000"), "{e}");
        assert!(duration("--period", 0, MIN_PERIOD_NS, MAX_DURATION_NS).is_err());
        assert!(rate("--rate", 1e12, MAX_POLLS_PER_SECOND).is_err());
        assert!(rate("--rate", f64::NAN, MAX_POLLS_PER_SECOND).is_err());
        assert_eq!(rate("--rate", 100.0, MAX_POLLS_PER_SECOND), Ok(100.0));
        assert!(online_cpus() >= 1);
    }
}
