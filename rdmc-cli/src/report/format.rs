//! How the report writes numbers and sizes: size labels (`8MiB`),
//! significant digits, axis ticks, ratios and percentages.

/// A short label of a byte count for tables, legends and file names:
/// `8MiB`, `256MiB`, `16KiB`, `1B`; sizes that are not a whole number of a
/// binary unit are given in bytes (`10000019B`).
pub(crate) fn size_label(bytes: u64) -> String {
    const UNITS: &[(u64, &str)] = &[
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    for &(unit, name) in UNITS {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{}{name}", bytes / unit);
        }
    }
    format!("{bytes}B")
}

/// `x` with `digits` significant digits (at most 9 decimals): 1.000,
/// 0.2684, 12.34, 1234.
pub(super) fn sig(x: f64, digits: i32) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let magnitude = x.abs().log10().floor() as i32;
    let decimals = (digits - 1 - magnitude).clamp(0, 9) as usize;
    format!("{x:.decimals$}")
}

/// An axis tick label: three significant digits, trailing zeros dropped
/// (0.05, 1.5, 250).
pub(super) fn tick(x: f64) -> String {
    let text = sig(x, 3);
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// A ratio with two decimals.
pub(super) fn ratio(x: f64) -> String {
    format!("{x:.2}")
}

/// A fraction as a whole percentage.
pub(super) fn percent(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}
