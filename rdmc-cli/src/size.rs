//! Byte sizes on the command line: `4096`, `4KiB`, `1MiB`, `256MiB`, `2GiB`,
//! and the decimal `1KB`/`1MB`/`1GB`.

/// Parse a size with an optional binary (KiB, MiB, GiB, TiB) or decimal
/// (KB, MB, GB, TB) suffix; `K`/`M`/`G`/`T` alone are binary.
pub fn parse_size(text: &str) -> Result<u64, String> {
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

/// A byte count for people: `512 B`, `1.5 KiB`, `2.00 GiB` (binary units,
/// three significant digits from KiB on).
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    // Three significant digits; a value that rounds up to 1024 shows as
    // 1024 of the unit rather than 1.00 of the next (both are exact enough).
    let decimals = if value < 10.0 {
        2
    } else if value < 100.0 {
        1
    } else {
        0
    };
    format!("{value:.decimals$} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::{human, parse_size};

    #[test]
    fn sizes_print_for_people() {
        assert_eq!(human(0), "0 B");
        assert_eq!(human(1023), "1023 B");
        assert_eq!(human(1024), "1.00 KiB");
        assert_eq!(human(1536), "1.50 KiB");
        assert_eq!(human(10_000_019), "9.54 MiB");
        assert_eq!(human(100 << 20), "100 MiB");
        assert_eq!(human(2 << 30), "2.00 GiB");
        assert_eq!(human(u64::MAX), "16.0 EiB");
        // Every size round-trips within its printed precision.
        for bytes in [1u64 << 10, 123_456, 7 << 30, 999 << 40] {
            let text = human(bytes);
            let (number, unit) = text.split_once(' ').unwrap();
            let back =
                number.parse::<f64>().unwrap() * parse_size(&format!("1{unit}")).unwrap() as f64;
            assert!(
                (back - bytes as f64).abs() / (bytes as f64) < 0.01,
                "{text}"
            );
        }
    }

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
