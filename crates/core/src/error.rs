//! The one error that means "the user's input is at fault": a flag, a
//! file or an address the user gave that does not parse, does not exist
//! or cannot be used. The CLI maps it to exit code 2 with one line on
//! stderr; every other error is a failure of ontime (exit code 1).
//!
//! Construct it where the input is read ([`bad_input`], or `BadInput(..)`
//! where a typed error is wanted); anyhow's `downcast_ref::<BadInput>()`
//! finds it through any context added on the way up.

/// Bad input: the message names the flag or file and what is wrong.
#[derive(Debug)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// A [`BadInput`] as an `anyhow::Error`.
pub fn bad_input(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(BadInput(msg.into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn found_through_context() {
        let e: anyhow::Result<()> = Err(bad_input("--rate 0: use 1 to 10000"));
        let e = e.context("reading the flags").unwrap_err();
        assert_eq!(
            e.downcast_ref::<BadInput>().map(|b| b.0.as_str()),
            Some("--rate 0: use 1 to 10000")
        );
        assert_eq!(format!("{e:#}"), "reading the flags: --rate 0: use 1 to 10000");
    }

    #[test]
    fn other_errors_are_not_bad_input() {
        let e = anyhow::anyhow!("disk full");
        assert!(e.downcast_ref::<BadInput>().is_none());
    }
}
