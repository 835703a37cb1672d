//! One way to turn a result into bytes for a person or a program: an
//! [`Exporter`] per format. Text and JSON cover every verb's result;
//! observe's Prometheus exposition is another exporter; profile's pprof
//! will be one more. Writing the bytes somewhere (stdout, a file written
//! whole or not at all) is the caller's.

use anyhow::{Context, Result};
use serde::Serialize;

/// A format for values of type `T`.
pub trait Exporter<T: ?Sized> {
    /// The format's name, for messages ("text", "json", "prometheus").
    fn format(&self) -> &'static str;
    fn export(&self, value: &T) -> Result<String>;
}

/// A result's own text form: fixed-width tables for people.
pub trait TextReport {
    fn text(&self) -> String;
}

/// Pretty JSON of anything serialisable (the schemas are in docs/).
#[derive(Clone, Copy, Debug, Default)]
pub struct Json;

impl<T: Serialize + ?Sized> Exporter<T> for Json {
    fn format(&self) -> &'static str {
        "json"
    }
    fn export(&self, value: &T) -> Result<String> {
        let mut s = serde_json::to_string_pretty(value).context("cannot encode the result as JSON")?;
        s.push('\n');
        Ok(s)
    }
}

/// A result's [`TextReport`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Text;

impl<T: TextReport + ?Sized> Exporter<T> for Text {
    fn format(&self) -> &'static str {
        "text"
    }
    fn export(&self, value: &T) -> Result<String> {
        Ok(value.text())
    }
}

/// One CSV field as RFC 4180 writes it: a field holding a comma, a double
/// quote, CR or LF is enclosed in double quotes, its quotes doubled; any
/// other is written as it is. Names from input files (a task set's) may
/// hold any of these, and unquoted they break the row.
pub fn csv_field(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains([',', '"', '\r', '\n']) {
        std::borrow::Cow::Owned(format!("\"{}\"", s.replace('"', "\"\"")))
    } else {
        std::borrow::Cow::Borrowed(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_are_quoted_as_rfc_4180_says() {
        assert_eq!(csv_field("t0"), "t0");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("two\nlines"), "\"two\nlines\"");
        assert_eq!(csv_field("cr\r"), "\"cr\r\"");
        assert_eq!(csv_field(""), "");
    }

    #[derive(Serialize)]
    struct R {
        n: u32,
    }

    impl TextReport for R {
        fn text(&self) -> String {
            format!("n = {}\n", self.n)
        }
    }

    #[test]
    fn json_and_text_of_one_result() {
        let r = R { n: 3 };
        assert_eq!(Exporter::<R>::export(&Json, &r).unwrap(), "{\n  \"n\": 3\n}\n");
        assert_eq!(Exporter::<R>::export(&Text, &r).unwrap(), "n = 3\n");
    }
}
