//! Ctrl-C and SIGTERM: the first asks the run to stop and write what it
//! has, the second abandons what is still in flight, the third exits.

use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Installs the handler; `stop` and `abort` are set on the first and second
/// signal.
pub fn install(on_first: impl Fn() + Send + 'static, on_second: impl Fn() + Send + 'static) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    std::thread::Builder::new().name("signals".into()).spawn(move || {
        let mut n = 0;
        for _ in signals.forever() {
            n += 1;
            match n {
                1 => {
                    ontime_core::errln!("\nontime: stopping; finishing what is in flight (Ctrl-C again to abandon it)");
                    on_first()
                }
                2 => {
                    ontime_core::errln!("\nontime: abandoning what is in flight; writing results");
                    on_second()
                }
                _ => std::process::exit(130),
            }
        }
    })?;
    Ok(())
}

/// A run stopped by Ctrl-C or SIGTERM after it kept and wrote what it had
/// done: `main` says so on stderr and exits 130, as a shell reports a
/// command ended by SIGINT, so a script does not take the partial result
/// for a whole one.
#[derive(Debug)]
pub struct Interrupted(pub String);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Interrupted {}

/// For verbs with a single stop flag.
pub fn install_flag(flag: Arc<std::sync::atomic::AtomicBool>) -> anyhow::Result<()> {
    let f2 = flag.clone();
    install(
        move || flag.store(true, Ordering::Relaxed),
        move || f2.store(true, Ordering::Relaxed),
    )
}
