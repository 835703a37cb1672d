//! Reading TOML files with errors a user can act on: one line naming the
//! file, line, column and the reason.

use anyhow::{anyhow, Result};
use serde::de::DeserializeOwned;
use std::path::Path;

/// Reads and parses a TOML file into `T`.
pub fn read_toml<T: DeserializeOwned>(path: &Path, what: &str) -> Result<T> {
    let text = crate::fsio::read_text(path, what)?;
    parse_toml(&text, &path.display().to_string())
}

/// Parses TOML text; `origin` names it in errors.
pub fn parse_toml<T: DeserializeOwned>(text: &str, origin: &str) -> Result<T> {
    toml::from_str(text).map_err(|e| {
        let place = e
            .span()
            .map(|s| {
                let before = &text[..s.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let col = before.rfind('\n').map(|i| before.len() - i).unwrap_or(before.len() + 1);
                format!(":{line}:{col}")
            })
            .unwrap_or_default();
        anyhow!("{origin}{place}: {}", e.message().trim().replace('\n', "; "))
    })
}

#[cfg(test)]
mod tests {
    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct T {
        period: String,
    }

    #[test]
    fn errors_are_one_line_with_position() {
        let e = super::parse_toml::<T>("period = 5\n", "x.toml")
            .unwrap_err()
            .to_string();
        assert_eq!(e.lines().count(), 1);
        assert!(e.starts_with("x.toml:1:10: "), "{e}");
        let e = super::parse_toml::<T>("period = '1s'\nperiode = 2\n", "x.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("x.toml:2:1") && e.contains("periode"), "{e}");
    }
}
