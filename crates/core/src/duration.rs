//! Parsing of human durations ("1s", "500us", "2ms", "1h 5m") into integer
//! nanoseconds, shared by command-line flags and config files.

use serde::{Deserialize, Deserializer};

/// Parses a human duration into nanoseconds. A bare number is rejected so a
/// unit is never guessed.
pub fn parse_ns(text: &str) -> Result<u64, String> {
    let d = humantime::parse_duration(text.trim())
        .map_err(|e| format!("'{text}' is not a duration ({e}); write it with a unit, e.g. 1s, 250ms, 100us"))?;
    u64::try_from(d.as_nanos()).map_err(|_| format!("'{text}' is too long"))
}

/// Formats nanoseconds for people: picks ns, us, ms or s with 3 significant
/// decimals where useful.
pub fn format_ns(ns: u64) -> String {
    let f = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} us", f / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.3} ms", f / 1e6)
    } else {
        format!("{:.3} s", f / 1e9)
    }
}

/// Formats a time still to wait, as a person reads an estimate: whole
/// seconds under a minute, minutes under an hour, then hours and minutes
/// ("45 s", "17 min", "1 h 05 min").
pub fn format_eta(ns: u64) -> String {
    let s = ns.div_ceil(1_000_000_000);
    if s < 60 {
        format!("{s} s")
    } else if s < 3600 {
        format!("{} min", s.div_ceil(60))
    } else {
        let m = s.div_ceil(60);
        format!("{} h {:02} min", m / 60, m % 60)
    }
}

/// Writes nanoseconds exactly, in the largest unit that divides them
/// ("10ms", "2s", "1500us", "7ns"), so [`parse_ns`] reads back the same
/// value.
pub fn format_exact(ns: u64) -> String {
    const UNITS: [(u64, &str); 6] = [
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
        (1, "ns"),
    ];
    if ns == 0 {
        return "0s".into();
    }
    let (div, unit) = UNITS
        .iter()
        .find(|(d, _)| ns.checked_rem(*d) == Some(0))
        .copied()
        .unwrap_or((1, "ns"));
    format!("{}{unit}", ns / div)
}

/// Serde for a duration in ns written as text ("10ms") both ways, for
/// config files that are also written back (a lab run's config):
/// `#[serde(with = "ontime_core::duration::text_ns")]`.
pub mod text_ns {
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(ns: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format_exact(*ns))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        super::deserialize_ns(d)
    }
}

/// [`text_ns`] for an optional duration.
pub mod opt_text_ns {
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(ns: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match ns {
            Some(v) => s.serialize_some(&super::format_exact(*v)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        super::deserialize_opt_ns(d)
    }
}

/// Serde helper: a duration field written as "10ms" in TOML.
pub fn deserialize_ns<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let s = String::deserialize(d)?;
    parse_ns(&s).map_err(serde::de::Error::custom)
}

/// Serde helper for an optional duration field.
pub fn deserialize_opt_ns<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let s = Option::<String>::deserialize(d)?;
    s.map(|s| parse_ns(&s).map_err(serde::de::Error::custom)).transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_read_in_the_unit_a_person_waits_in() {
        assert_eq!(format_eta(0), "0 s");
        assert_eq!(format_eta(44_200_000_000), "45 s");
        assert_eq!(format_eta(1_080_000_000_000), "18 min");
        assert_eq!(format_eta(1_081_000_000_000), "19 min");
        assert_eq!(format_eta(3_900_000_000_000), "1 h 05 min");
    }

    #[test]
    fn parses_units() {
        assert_eq!(parse_ns("1s").unwrap(), 1_000_000_000);
        assert_eq!(parse_ns("250ms").unwrap(), 250_000_000);
        assert_eq!(parse_ns("100us").unwrap(), 100_000);
        assert!(parse_ns("100").is_err());
        assert!(parse_ns("soon").is_err());
    }

    #[test]
    fn exact_text_reads_back() {
        for ns in [
            0,
            7,
            1_500,
            10_000_000,
            2_000_000_000,
            90_000_000_000,
            3_600_000_000_001,
        ] {
            assert_eq!(parse_ns(&format_exact(ns)).unwrap(), ns, "{}", format_exact(ns));
        }
        assert_eq!(format_exact(10_000_000), "10ms");
    }

    #[test]
    fn formats() {
        assert_eq!(format_ns(999), "999 ns");
        assert_eq!(format_ns(1_500), "1.5 us");
        assert_eq!(format_ns(2_500_000), "2.500 ms");
    }
}
