//! The records of a run: reading `results.jsonl` (errors name the line and
//! column), the fields the tables and plots group by, and the labels and
//! order of the systems and algorithms measured.

use std::path::Path;

use anyhow::{Context as _, anyhow, bail};
use serde_json::Value;

use super::format::size_label;

/// The rdmc algorithms in the order the tables and legends list them.
const RDMC_ALGORITHMS: &[&str] = &["sequential", "chain", "tree", "binomial-pipeline", "hybrid"];

/// Read a `results.jsonl`: one JSON object per line, blank lines skipped.
/// A line that is not a JSON object is an error naming its line number.
pub fn read_records(path: &Path) -> anyhow::Result<Vec<Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut records = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let line_number = index + 1;
        let value: Value = serde_json::from_str(line).map_err(|e| {
            // serde_json places the error at "line 1" of the one line it saw.
            let message = e.to_string();
            let message = message
                .rsplit_once(" at line ")
                .map_or(message.as_str(), |(m, _)| m);
            anyhow!(
                "{} line {line_number}, column {}: {message}",
                path.display(),
                e.column()
            )
        })?;
        if !value.is_object() {
            bail!("{} line {line_number}: not a JSON object", path.display());
        }
        records.push(value);
    }
    Ok(records)
}

/// The fields of one record that the tables and plots group by.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rec<'a> {
    /// The whole record, for the section-specific fields.
    pub(super) raw: &'a Value,
    pub(super) experiment: &'a str,
    pub(super) system: &'a str,
    pub(super) algorithm: &'a str,
    pub(super) nodes: Option<u64>,
    pub(super) size: Option<u64>,
    pub(super) block_size: Option<u64>,
    /// Median seconds, if positive and finite.
    pub(super) seconds: Option<f64>,
}

impl<'a> Rec<'a> {
    /// View a record; `None` for anything but a JSON object.
    pub(super) fn new(raw: &'a Value) -> Option<Self> {
        raw.as_object()?;
        Some(Rec {
            raw,
            experiment: text(raw, "experiment").unwrap_or(""),
            system: text(raw, "system").unwrap_or(""),
            algorithm: text(raw, "algorithm").unwrap_or(""),
            nodes: int(raw, "nodes"),
            size: int(raw, "size"),
            block_size: int(raw, "block_size"),
            seconds: num(raw, "seconds").filter(|s| *s > 0.0),
        })
    }

    /// A number field of the record (finite only).
    pub(super) fn num(&self, key: &str) -> Option<f64> {
        num(self.raw, key)
    }

    /// What a table column or a plot legend calls this record's system and
    /// algorithm, without the block size.
    pub(super) fn series(&self) -> String {
        series_label(self.system, self.algorithm)
    }

    /// Bandwidth in Gbit/s: the record's `gbps`, else size × 8 / seconds.
    pub(super) fn gbps(&self) -> Option<f64> {
        self.num("gbps").or_else(|| {
            let (size, seconds) = (self.size?, self.seconds?);
            Some(size as f64 * 8.0 / seconds / 1e9)
        })
    }
}

/// A string field, if present and a string.
pub(super) fn text<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key)?.as_str()
}

/// A number field, if present, a number and finite.
pub(super) fn num(v: &Value, key: &str) -> Option<f64> {
    v.get(key)?.as_f64().filter(|x| x.is_finite())
}

/// A non-negative whole-number field (`4` or `4.0`).
pub(super) fn int(v: &Value, key: &str) -> Option<u64> {
    let field = v.get(key)?;
    field.as_u64().or_else(|| {
        field
            .as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < u64::MAX as f64)
            .map(|f| f as u64)
    })
}

/// The label of a system and algorithm: rdmc algorithms by name,
/// `unicast`, and `MPI <algorithm>`.
pub(super) fn series_label(system: &str, algorithm: &str) -> String {
    match (system, algorithm) {
        ("rdmc", "") => "rdmc".to_owned(),
        ("rdmc", algorithm) => algorithm.to_owned(),
        ("unicast", _) => "unicast".to_owned(),
        ("mpi", "") => "MPI".to_owned(),
        ("mpi", algorithm) => format!("MPI {algorithm}"),
        (system, "") => system.to_owned(),
        (system, algorithm) => format!("{system} {algorithm}"),
    }
}

/// Sort key of a system and algorithm: rdmc (in [`RDMC_ALGORITHMS`] order),
/// then MPI (`default` first), then anything else, each by name.
pub(super) fn series_order(system: &str, algorithm: &str) -> (u8, usize, String) {
    match system {
        "unicast" => (0, 0, algorithm.to_owned()),
        "rdmc" => {
            let index = RDMC_ALGORITHMS
                .iter()
                .position(|a| *a == algorithm)
                .unwrap_or(RDMC_ALGORITHMS.len());
            (1, index, algorithm.to_owned())
        }
        "mpi" => (2, usize::from(algorithm != "default"), algorithm.to_owned()),
        other => (3, 0, format!("{other} {algorithm}")),
    }
}

/// One line of a table or plot: a system, an algorithm and a block size,
/// labelled with the block size only where the same system and algorithm
/// were measured with more than one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Variant {
    pub(super) order: (u8, usize, String),
    pub(super) system: String,
    pub(super) algorithm: String,
    pub(super) block_size: Option<u64>,
}

impl Variant {
    /// The variant a record belongs to.
    pub(super) fn of(rec: &Rec<'_>) -> Self {
        Variant {
            order: series_order(rec.system, rec.algorithm),
            system: rec.system.to_owned(),
            algorithm: rec.algorithm.to_owned(),
            block_size: rec.block_size,
        }
    }
}

/// Labels for a sorted set of variants (see [`Variant`]).
pub(super) fn variant_labels(variants: &[Variant]) -> Vec<String> {
    variants
        .iter()
        .map(|v| {
            let base = series_label(&v.system, &v.algorithm);
            let ambiguous = variants
                .iter()
                .filter(|w| w.system == v.system && w.algorithm == v.algorithm)
                .count()
                > 1;
            match (ambiguous, v.block_size) {
                (true, Some(bs)) if v.system == "mpi" => format!("{base} (seg {})", size_label(bs)),
                (true, Some(bs)) => format!("{base} ({} blocks)", size_label(bs)),
                _ => base,
            }
        })
        .collect()
}
