//! Ctrl-C and SIGTERM: the first asks the run to stop and write what it
//! has, the second abandons what is still in flight, the third exits.
//! A verb whose work a signal cut short says what it kept and returns
//! [`Interrupted`]; `main` then exits 128 + the signal's number, as a
//! shell reports a process the signal ended.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

/// The first stop signal received (0: none yet).
static FIRST: AtomicI32 = AtomicI32::new(0);

/// The work was cut short by a stop signal; the verb has already said
/// what it kept. Not a failure of ontime and not bad input: its own exit
/// code, 130 after Ctrl-C, 143 after SIGTERM.
#[derive(Debug)]
pub struct Interrupted {
    pub signal: i32,
}

impl Interrupted {
    /// By the first stop signal received (SIGINT if none was recorded).
    pub fn by_first_signal() -> Interrupted {
        Interrupted {
            signal: match FIRST.load(Ordering::Relaxed) {
                0 => signal_hook::consts::SIGINT,
                s => s,
            },
        }
    }

    pub fn exit_code(&self) -> i32 {
        128 + self.signal
    }
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "interrupted by signal {}", self.signal)
    }
}

impl std::error::Error for Interrupted {}

/// Installs the handler; `stop` and `abort` are set on the first and second
/// signal.
pub fn install(on_first: impl Fn() + Send + 'static, on_second: impl Fn() + Send + 'static) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    std::thread::Builder::new().name("signals".into()).spawn(move || {
        let mut n = 0;
        for signal in signals.forever() {
            n += 1;
            if n == 1 {
                FIRST.store(signal, Ordering::Relaxed);
            }
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

/// For verbs with a single stop flag.
pub fn install_flag(flag: Arc<std::sync::atomic::AtomicBool>) -> anyhow::Result<()> {
    let f2 = flag.clone();
    install(
        move || flag.store(true, Ordering::Relaxed),
        move || f2.store(true, Ordering::Relaxed),
    )
}
