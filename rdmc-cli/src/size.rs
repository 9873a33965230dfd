//! Byte sizes on the command line: `4096`, `4KiB`, `1MiB`, `256MiB`, `2GiB`,
//! `1.5GiB`, and the decimal `1KB`/`1MB`/`1GB`; read and printed with the
//! `bytesize` crate.

use bytesize::ByteSize;

// A clap value parser (`value_parser = ...`): its error is one message,
// which clap prints after naming the option and the value given; nothing
// chains below it, so it stays a `String` (as in clap's own examples)
// rather than an `anyhow::Error`.
/// Parse a size with an optional binary (KiB, MiB, GiB, TiB, PiB, EiB, or
/// Ki, Mi, ...) or decimal (KB, MB, GB, TB, PB, EB) suffix, in any case,
/// spaces allowed around it; `K`/`M`/`G`/`T`/`P`/`E` alone are binary.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    // bytesize reads a lone `K` as decimal (1000); here it has always been
    // 1024, as for `ls -h` and `dd`: a lone prefix letter is read as `Ki`.
    let binary;
    let given = match text.chars().next_back() {
        Some('k' | 'K' | 'm' | 'M' | 'g' | 'G' | 't' | 'T' | 'p' | 'P' | 'e' | 'E') => {
            binary = format!("{text}i");
            binary.as_str()
        }
        _ => text,
    };
    let size = given
        .parse::<ByteSize>()
        .map_err(|_| format!("{text:?} is not a size (try 4096, 64KiB, 1.5GiB, 1MB)"))?
        .as_u64();
    // bytesize saturates a size past u64::MAX bytes to u64::MAX.
    if size == u64::MAX && text.parse::<u64>().is_err() {
        return Err(format!("{text:?} is too large"));
    }
    Ok(size)
}

/// A byte count for people, in binary units with one decimal from KiB on:
/// `512 B`, `1.5 KiB`, `2.0 GiB` (the `bytesize` crate's IEC display).
pub fn human(bytes: u64) -> String {
    ByteSize(bytes).display().iec().to_string()
}

#[cfg(test)]
mod tests {
    use super::{human, parse_size};

    #[test]
    fn sizes_print_for_people() {
        assert_eq!(human(0), "0 B");
        assert_eq!(human(1023), "1023 B");
        assert_eq!(human(1024), "1.0 KiB");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(10_000_019), "9.5 MiB");
        assert_eq!(human(100 << 20), "100.0 MiB");
        assert_eq!(human(2 << 30), "2.0 GiB");
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
        assert_eq!(parse_size("3K"), Ok(3 << 10));
        assert_eq!(parse_size("5m"), Ok(5 << 20));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert_eq!(parse_size("2kb"), Ok(2_000));
        assert_eq!(parse_size("7GB"), Ok(7_000_000_000));
        assert_eq!(parse_size("1TB"), Ok(1_000_000_000_000));
        assert_eq!(parse_size(" 4 kib "), Ok(4096));
        assert_eq!(parse_size("12b"), Ok(12));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("99999999999TiB").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("-1").is_err());
        for bad in ["12 parsecs", "MiB", "16EiB"] {
            let error = parse_size(bad).unwrap_err();
            assert!(error.contains(&format!("{bad:?}")), "{error}");
            assert!(!error.contains('\n'), "{error}");
        }
    }
}
