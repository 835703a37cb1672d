//! Sizes as people write them in scenarios and flags.

/// Parses "512M", "2G", "1048576".
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a size (use e.g. 512M or 2G)"))?;
    n.checked_mul(mult).ok_or_else(|| format!("'{s}' is too large a size"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_bytes("512M"), Ok(512 << 20));
        assert_eq!(parse_bytes("4k"), Ok(4096));
        assert_eq!(parse_bytes("100"), Ok(100));
        assert!(parse_bytes("lots").is_err());
    }
}
