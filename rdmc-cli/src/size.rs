//! Byte sizes on the command line: `4096`, `4KiB`, `1MiB`, `256MiB`, `2GiB`,
//! and the decimal `1KB`/`1MB`/`1GB`.

/// Parse a size with an optional binary (KiB, MiB, GiB, TiB) or decimal
/// (KB, MB, GB, TB) suffix; `K`/`M`/`G`/`T` alone are binary.
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, suffix) = text.split_at(split);
    let value: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a size (try 4096, 64KiB, 256MiB)"))?;
    let unit: u64 = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        other => return Err(format!("unknown size suffix {other:?} in {text:?}")),
    };
    value
        .checked_mul(unit)
        .ok_or_else(|| format!("{text:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_with_and_without_suffixes() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("10000019"), Ok(10_000_019));
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size("1MB"), Ok(1_000_000));
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("99999999999TiB").is_err());
    }
}
