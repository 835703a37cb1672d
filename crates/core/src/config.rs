//! Reading TOML files with errors a user can act on: one line naming the
//! file, line, column, the key when the line sets one, and the reason.

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
        let message = e.message().trim().replace('\n', "; ");
        let mut place = String::new();
        if let Some(s) = e.span() {
            let before = text.get(..s.start.min(text.len())).unwrap_or(text);
            let line = before.matches('\n').count();
            let col = before.rfind('\n').map(|i| before.len() - i).unwrap_or(before.len() + 1);
            place = format!(":{}:{col}", line + 1);
            // "invalid type: integer `5`, expected a string" says what,
            // not where: name the key unless the message does.
            if let Some(key) = key_on_line(text, line) {
                let last = key.rsplit('.').next().unwrap_or(&key);
                if !message.contains(&format!("`{last}`")) {
                    place.push_str(&format!(": {key}"));
                }
            }
        }
        anyhow!("{origin}{place}: {message}")
    })
}

/// The dotted key that line `line` (from 0) of `text` sets, when it is a
/// `key = value` line: the table header above it gives the prefix.
fn key_on_line(text: &str, line: usize) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let (key, _) = lines.get(line)?.split_once('=')?;
    let key = key.trim();
    let bare = |k: &str| {
        !k.is_empty()
            && k.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
    };
    if !bare(key) {
        return None;
    }
    let table = lines[..line]
        .iter()
        .rev()
        .map(|l| l.trim())
        .find(|l| l.starts_with('['))
        .and_then(|h| h.trim_start_matches('[').split(']').next())
        .map(str::trim)
        .filter(|t| bare(t));
    Some(match table {
        Some(t) => format!("{t}.{key}"),
        None => key.to_string(),
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

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Nested {
        host: String,
        spool: Spool,
    }

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Spool {
        dir: String,
        max_bytes: String,
    }

    #[test]
    fn errors_name_the_key_of_a_table() {
        let text = "host = 'a'\n\n[spool]\ndir = '/x'\nmax_bytes = 300\n";
        let e = super::parse_toml::<Nested>(text, "agent.toml").unwrap_err().to_string();
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.starts_with("agent.toml:5:"), "{e}");
        assert!(e.contains(": spool.max_bytes: invalid type"), "{e}");
        assert_eq!(
            super::key_on_line("[[host]]\nname = 'x'\n", 1).as_deref(),
            Some("host.name")
        );
        assert_eq!(super::key_on_line("a = [\n 'b=c',\n]\n", 1), None);
    }
}
