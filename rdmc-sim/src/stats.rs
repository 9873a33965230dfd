//! The two order statistics the workspace reports: the median and the
//! nearest-rank percentile of a handful of samples (one implementation for
//! the simulator's outcomes, `rdmc`'s report and the benchmark harness).
//!
//! No crate: the ones for quantiles either estimate (`average`'s P² and the
//! `quantiles` crate's CKMS and Greenwald–Khanna summaries are approximate,
//! and advised against for small samples), bucket integers (`hdrhistogram`),
//! or interpolate with another definition and a heavy default tree
//! (`statrs`: the R-8 quantile, not the nearest rank the report documents;
//! nalgebra and rand by default; its current release needs a newer Rust
//! than this workspace's `rust-version`). Both statistics here are exact,
//! a sort and an index.

/// `samples` sorted (NaNs last, by [`f64::total_cmp`]).
fn sorted(samples: &[f64]) -> Vec<f64> {
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    s
}

/// The median of `samples`: the middle one for an odd count, the mean of
/// the middle two for an even count; NaN for none.
pub fn median(samples: &[f64]) -> f64 {
    let s = sorted(samples);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// The `p`-quantile of `samples` by nearest rank (`p` in 0..=1): the
/// smallest sample with at least a fraction `p` of the samples at or below
/// it (the least sample for `p` = 0); NaN for none.
pub fn percentile(samples: &[f64], p: f64) -> f64 {
    let s = sorted(samples);
    if s.is_empty() {
        return f64::NAN;
    }
    let rank = (p * s.len() as f64).ceil() as usize;
    s[rank.clamp(1, s.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[7.0]), 7.0);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let s: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&s, 0.0), 1.0);
        assert_eq!(percentile(&s, 0.5), 50.0);
        assert_eq!(percentile(&s, 0.99), 99.0);
        assert_eq!(percentile(&s, 1.0), 100.0);
        assert_eq!(percentile(&s[..3], 0.5), 2.0);
        assert_eq!(percentile(&[4.0, 1.0, 3.0, 2.0], 0.5), 2.0);
        assert!(percentile(&[], 0.5).is_nan());
    }
}
