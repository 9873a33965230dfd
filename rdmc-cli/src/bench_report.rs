//! The report of `rdmc bench`: from the measurements (one JSON object per
//! measurement, as in `results.jsonl`) to `results.csv`, `summary.md` and
//! SVG plots in the same directory.
//!
//! The driver measures and calls [`write_report`]; [`read_records`] reads an
//! earlier run's `results.jsonl` so a report can be rebuilt without
//! measuring again.
//!
//! Records are loosely typed on purpose: a field that is absent, `null` or of
//! the wrong type is treated as missing, and a record lacking what a table or
//! plot needs is left out of that table or plot (it still gets its CSV row).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::prelude::*;
use serde_json::Value;

/// The columns of `results.csv`, in order: every field of the record schema.
/// Fields a record has beyond these are appended after them, sorted by name.
const CSV_COLUMNS: &[&str] = &[
    "experiment",
    "system",
    "algorithm",
    "nodes",
    "size",
    "block_size",
    "seconds",
    "runs",
    "min",
    "max",
    "all",
    "ratio_to_unicast",
    "gbps",
    "cpu_idle",
    "rate",
    "mode",
    "messages_per_second",
    "burst",
    "cpu_seconds_per_message",
    "cpu_seconds_per_gib",
    "rank",
    "remote_setup_us",
    "remote_transfers_us",
    "local_setup_us",
    "copy_us",
    "transferring_us",
    "waiting_us",
    "total_us",
];

/// The rdmc algorithms in the order the tables and legends list them.
const RDMC_ALGORITHMS: &[&str] = &["sequential", "chain", "tree", "binomial-pipeline"];

/// The completion modes in the order the CPU table lists them.
const MODES: &[&str] = &["interrupt", "hybrid", "polling"];

/// The rows of the breakdown table (the paper's Table 1): label and field.
const BREAKDOWN_ROWS: &[(&str, &str)] = &[
    ("Remote setup", "remote_setup_us"),
    ("Remote block transfers", "remote_transfers_us"),
    ("Local setup", "local_setup_us"),
    ("Block transfers", "transferring_us"),
    ("Waiting", "waiting_us"),
    ("Copy", "copy_us"),
    ("Total", "total_us"),
];

/// Machine facts shown first, in this order; any others follow by name.
const MACHINE_KEYS: &[(&str, &str)] = &[
    ("command", "Command"),
    ("date", "Date"),
    ("rdmc_version", "rdmc version"),
    ("cpu_model", "CPU"),
    ("cores", "Cores"),
    ("memory_gib", "Memory (GiB)"),
    ("kernel", "Kernel"),
    ("rate", "Link rate"),
    ("mpi", "MPI"),
];

/// Line colours of the plots (the "Tableau 10" palette); unicast is black.
const COLORS: &[RGBColor] = &[
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0x17, 0xbe, 0xcf),
];

/// Font size of the plots' titles, in plotters' units (the SVG gets about
/// 80% of this in pixels).
const TITLE_FONT: u32 = 28;
/// Font size of the plots' other text.
const LABEL_FONT: u32 = 18;

/// Size of every plot, in pixels.
const PLOT_SIZE: (u32, u32) = (960, 600);

/// The files [`write_report`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReportFiles {
    /// `DIR/results.csv`.
    pub(crate) csv: PathBuf,
    /// `DIR/summary.md`.
    pub(crate) summary: PathBuf,
    /// The text written to `summary.md`, for printing.
    pub(crate) summary_markdown: String,
    /// The SVG plots, in the order they are listed in the summary.
    pub(crate) plots: Vec<PathBuf>,
}

impl ReportFiles {
    /// Every written path: the CSV, the summary, then the plots.
    pub(crate) fn paths(&self) -> Vec<&Path> {
        let mut paths = vec![self.csv.as_path(), self.summary.as_path()];
        paths.extend(self.plots.iter().map(PathBuf::as_path));
        paths
    }
}

/// Write `DIR/results.csv`, `DIR/summary.md` and the SVG plots from the
/// records (creating `DIR` if needed). `machine` is an object of facts about
/// the machine and the run (cores, CPU model, kernel, rate, command, ...),
/// shown at the top of the summary.
pub(crate) fn write_report(
    dir: &Path,
    records: &[Value],
    machine: &Value,
) -> Result<ReportFiles, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let recs: Vec<Rec<'_>> = records.iter().filter_map(Rec::new).collect();
    let latency = latency_tables(&recs);

    let plots = write_plots(dir, &recs, &latency)?;

    let csv = dir.join("results.csv");
    write_file(&csv, &csv_text(records))?;

    let plot_names: Vec<String> = plots
        .iter()
        .filter_map(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
    let summary_markdown = summary_text(&recs, &latency, machine, &plot_names);
    let summary = dir.join("summary.md");
    write_file(&summary, &summary_markdown)?;

    Ok(ReportFiles {
        csv,
        summary,
        summary_markdown,
        plots,
    })
}

/// Read a `results.jsonl`: one JSON object per line, blank lines skipped.
/// A line that is not a JSON object is an error naming its line number.
pub(crate) fn read_records(path: &Path) -> Result<Vec<Value>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
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
            format!(
                "{} line {line_number}, column {}: {message}",
                path.display(),
                e.column()
            )
        })?;
        if !value.is_object() {
            return Err(format!(
                "{} line {line_number}: not a JSON object",
                path.display()
            ));
        }
        records.push(value);
    }
    Ok(records)
}

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
        if bytes >= unit && bytes % unit == 0 {
            return format!("{}{name}", bytes / unit);
        }
    }
    format!("{bytes}B")
}

// ---------------------------------------------------------------------------
// Records

/// The fields of one record that the tables and plots group by.
#[derive(Debug, Clone, Copy)]
struct Rec<'a> {
    /// The whole record, for the section-specific fields.
    raw: &'a Value,
    experiment: &'a str,
    system: &'a str,
    algorithm: &'a str,
    nodes: Option<u64>,
    size: Option<u64>,
    block_size: Option<u64>,
    /// Median seconds, if positive and finite.
    seconds: Option<f64>,
}

impl<'a> Rec<'a> {
    /// View a record; `None` for anything but a JSON object.
    fn new(raw: &'a Value) -> Option<Self> {
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
    fn num(&self, key: &str) -> Option<f64> {
        num(self.raw, key)
    }

    /// What a table column or a plot legend calls this record's system and
    /// algorithm, without the block size.
    fn series(&self) -> String {
        series_label(self.system, self.algorithm)
    }

    /// Bandwidth in Gbit/s: the record's `gbps`, else size × 8 / seconds.
    fn gbps(&self) -> Option<f64> {
        self.num("gbps").or_else(|| {
            let (size, seconds) = (self.size?, self.seconds?);
            Some(size as f64 * 8.0 / seconds / 1e9)
        })
    }
}

/// A string field, if present and a string.
fn text<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key)?.as_str()
}

/// A number field, if present, a number and finite.
fn num(v: &Value, key: &str) -> Option<f64> {
    v.get(key)?.as_f64().filter(|x| x.is_finite())
}

/// A non-negative whole-number field (`4` or `4.0`).
fn int(v: &Value, key: &str) -> Option<u64> {
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
fn series_label(system: &str, algorithm: &str) -> String {
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
fn series_order(system: &str, algorithm: &str) -> (u8, usize, String) {
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
struct Variant {
    order: (u8, usize, String),
    system: String,
    algorithm: String,
    block_size: Option<u64>,
}

impl Variant {
    fn of(rec: &Rec<'_>) -> Self {
        Variant {
            order: series_order(rec.system, rec.algorithm),
            system: rec.system.to_owned(),
            algorithm: rec.algorithm.to_owned(),
            block_size: rec.block_size,
        }
    }
}

/// Labels for a sorted set of variants (see [`Variant`]).
fn variant_labels(variants: &[Variant]) -> Vec<String> {
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

// ---------------------------------------------------------------------------
// CSV

/// The whole `results.csv`.
fn csv_text(records: &[Value]) -> String {
    let fixed: BTreeSet<&str> = CSV_COLUMNS.iter().copied().collect();
    let extra: BTreeSet<&str> = records
        .iter()
        .filter_map(Value::as_object)
        .flat_map(|o| o.keys().map(String::as_str))
        .filter(|k| !fixed.contains(k))
        .collect();
    let columns: Vec<&str> = CSV_COLUMNS.iter().copied().chain(extra).collect();
    let mut out = String::new();
    push_csv_row(&mut out, columns.iter().map(|c| (*c).to_owned()));
    for record in records.iter().filter(|r| r.is_object()) {
        push_csv_row(&mut out, columns.iter().map(|c| csv_value(record.get(*c))));
    }
    out
}

/// One CSV line. The quoting is RFC 4180's, written out here rather than
/// taken from the `csv` crate: the cells are plain numbers and short names,
/// and the rule (quote a cell containing a comma, quote or line break, and
/// double its quotes) is all there is to it.
fn push_csv_row(out: &mut String, cells: impl Iterator<Item = String>) {
    for (i, cell) in cells.enumerate() {
        if i > 0 {
            out.push(',');
        }
        if cell.contains([',', '"', '\n', '\r']) {
            out.push('"');
            out.push_str(&cell.replace('"', "\"\""));
            out.push('"');
        } else {
            out.push_str(&cell);
        }
    }
    out.push('\n');
}

/// The text of one cell: empty when missing or null, strings as they are,
/// arrays joined with `;`, objects as JSON.
fn csv_value(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| csv_value(Some(item)))
            .collect::<Vec<_>>()
            .join(";"),
        Some(other) => other.to_string(),
    }
}

// ---------------------------------------------------------------------------
// Number formatting

/// `x` with `digits` significant digits (at most 9 decimals): 1.000,
/// 0.2684, 12.34, 1234.
fn sig(x: f64, digits: i32) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let magnitude = x.abs().log10().floor() as i32;
    let decimals = (digits - 1 - magnitude).clamp(0, 9) as usize;
    format!("{x:.decimals$}")
}

/// An axis tick label: three significant digits, trailing zeros dropped
/// (0.05, 1.5, 250).
fn tick(x: f64) -> String {
    let text = sig(x, 3);
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// A ratio with two decimals.
fn ratio(x: f64) -> String {
    format!("{x:.2}")
}

/// A fraction as a whole percentage.
fn percent(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// A markdown table cell: `|` escaped, line breaks flattened.
fn md_cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// Append a markdown table.
fn push_table(out: &mut String, header: &[String], rows: &[Vec<String>]) {
    let line = |cells: &[String]| {
        let cells: Vec<String> = cells.iter().map(|c| md_cell(c)).collect();
        format!("| {} |\n", cells.join(" | "))
    };
    out.push_str(&line(header));
    let rule: Vec<String> = header.iter().map(|_| "---".to_owned()).collect();
    out.push_str(&line(&rule));
    for row in rows {
        out.push_str(&line(row));
    }
    out.push('\n');
}

// ---------------------------------------------------------------------------
// Latency

/// Latency against group size for one message size: every number of the
/// latency table and plots.
#[derive(Debug)]
struct LatencyTable {
    size: u64,
    /// Group sizes measured, ascending.
    nodes: Vec<u64>,
    /// Unicast seconds by group size.
    unicast: BTreeMap<u64, f64>,
    /// The multicast variants (rdmc then MPI), sorted, and their labels.
    variants: Vec<Variant>,
    labels: Vec<String>,
    /// Seconds by (variant index, nodes).
    seconds: BTreeMap<(usize, u64), f64>,
    /// Time ÷ unicast time by (variant index, nodes).
    ratios: BTreeMap<(usize, u64), f64>,
    /// The fastest rdmc binomial pipeline's seconds by group size.
    pipeline: BTreeMap<u64, f64>,
    /// The lowest CPU idle fraction among the size's records, by group size.
    cpu_idle_min: BTreeMap<u64, f64>,
    /// The run counts of the medians.
    runs: BTreeSet<u64>,
}

impl LatencyTable {
    /// MPI's time ÷ the rdmc binomial pipeline's, for an MPI variant.
    fn mpi_over_pipeline(&self, variant: usize, nodes: u64) -> Option<f64> {
        if self.variants[variant].system != "mpi" {
            return None;
        }
        Some(self.seconds.get(&(variant, nodes))? / self.pipeline.get(&nodes)?)
    }
}

/// One [`LatencyTable`] per message size, ascending. A record needs `size`,
/// `nodes` and `seconds`; when several records fill the same cell, the last
/// one counts. The ratio to unicast is computed from the unicast time in the
/// same table row when there is one (so the table is consistent with
/// itself), else the record's `ratio_to_unicast` is used.
fn latency_tables(recs: &[Rec<'_>]) -> Vec<LatencyTable> {
    let mut by_size: BTreeMap<u64, Vec<&Rec<'_>>> = BTreeMap::new();
    for rec in recs.iter().filter(|r| r.experiment == "latency") {
        if let (Some(size), Some(_), Some(_)) = (rec.size, rec.nodes, rec.seconds) {
            by_size.entry(size).or_default().push(rec);
        }
    }
    by_size
        .into_iter()
        .map(|(size, recs)| {
            let nodes: Vec<u64> = recs
                .iter()
                .filter_map(|r| r.nodes)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let variants: Vec<Variant> = recs
                .iter()
                .filter(|r| r.system != "unicast")
                .map(|r| Variant::of(r))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let labels = variant_labels(&variants);
            let mut table = LatencyTable {
                size,
                nodes,
                unicast: BTreeMap::new(),
                variants,
                labels,
                seconds: BTreeMap::new(),
                ratios: BTreeMap::new(),
                pipeline: BTreeMap::new(),
                cpu_idle_min: BTreeMap::new(),
                runs: BTreeSet::new(),
            };
            let mut recorded_ratios = BTreeMap::new();
            for rec in &recs {
                let (Some(n), Some(seconds)) = (rec.nodes, rec.seconds) else {
                    continue;
                };
                // MPI ranks busy-wait: their idle time says nothing about
                // whether the CPU limited rdmc, so it is not counted here.
                if let Some(idle) = rec.num("cpu_idle").filter(|_| rec.system != "mpi") {
                    let min = table.cpu_idle_min.entry(n).or_insert(idle);
                    *min = min.min(idle);
                }
                if let Some(runs) = int(rec.raw, "runs") {
                    table.runs.insert(runs);
                }
                if rec.system == "unicast" {
                    table.unicast.insert(n, seconds);
                    continue;
                }
                let Some(v) = table.variants.iter().position(|v| *v == Variant::of(rec)) else {
                    continue;
                };
                table.seconds.insert((v, n), seconds);
                if let Some(r) = rec.num("ratio_to_unicast") {
                    recorded_ratios.insert((v, n), r);
                }
                if rec.system == "rdmc" && rec.algorithm == "binomial-pipeline" {
                    let best = table.pipeline.entry(n).or_insert(seconds);
                    *best = best.min(seconds);
                }
            }
            for (&(v, n), &seconds) in &table.seconds {
                let computed = table
                    .unicast
                    .get(&n)
                    .filter(|u| **u > 0.0)
                    .map(|u| seconds / u);
                if let Some(r) = computed.or_else(|| recorded_ratios.get(&(v, n)).copied()) {
                    table.ratios.insert((v, n), r);
                }
            }
            table
        })
        .collect()
}

/// The markdown of one latency table.
fn push_latency_table(out: &mut String, table: &LatencyTable) {
    let _ = writeln!(out, "### {} messages\n", size_label(table.size));
    let runs: Vec<String> = table.runs.iter().map(u64::to_string).collect();
    let _ = writeln!(
        out,
        "Seconds are medians{}. \"× unicast\" is the time ÷ the unicast time at the same \
         size and group size; \"÷ binomial-pipeline\" is MPI's time ÷ rdmc's binomial \
         pipeline's (above 1: rdmc is faster).\n",
        if runs.is_empty() {
            String::new()
        } else {
            format!(" of {} runs", runs.join("/"))
        }
    );
    let has_unicast = !table.unicast.is_empty();
    let has_pipeline = !table.pipeline.is_empty();
    let has_idle = !table.cpu_idle_min.is_empty();
    let mut header = vec!["nodes".to_owned()];
    if has_unicast {
        header.push("unicast s".to_owned());
    }
    for (v, label) in table.variants.iter().zip(&table.labels) {
        header.push(format!("{label} s"));
        header.push(format!("{label} × unicast"));
        if v.system == "mpi" && has_pipeline {
            header.push(format!("{label} ÷ binomial-pipeline"));
        }
    }
    if has_idle {
        header.push("CPU idle (min, rdmc and unicast)".to_owned());
    }
    let rows: Vec<Vec<String>> = table
        .nodes
        .iter()
        .map(|&n| {
            let mut row = vec![n.to_string()];
            if has_unicast {
                row.push(table.unicast.get(&n).map_or(String::new(), |s| sig(*s, 4)));
            }
            for (v, variant) in table.variants.iter().enumerate() {
                let cell = |m: &BTreeMap<(usize, u64), f64>, f: fn(f64) -> String| {
                    m.get(&(v, n)).map_or(String::new(), |x| f(*x))
                };
                row.push(cell(&table.seconds, |s| sig(s, 4)));
                row.push(cell(&table.ratios, ratio));
                if variant.system == "mpi" && has_pipeline {
                    row.push(table.mpi_over_pipeline(v, n).map_or(String::new(), ratio));
                }
            }
            if has_idle {
                row.push(
                    table
                        .cpu_idle_min
                        .get(&n)
                        .map_or(String::new(), |x| percent(*x)),
                );
            }
            row
        })
        .collect();
    push_table(out, &header, &rows);
}

// ---------------------------------------------------------------------------
// The other experiments

/// A group of records of one experiment that share a table: system,
/// algorithm and group size.
type GroupKey = ((u8, usize, String), String, String, Option<u64>);

/// Records of `experiment` grouped by system, algorithm and group size.
fn grouped<'r, 'a>(
    recs: &'r [Rec<'a>],
    experiment: &str,
    keep: impl Fn(&Rec<'a>) -> bool,
) -> BTreeMap<GroupKey, Vec<&'r Rec<'a>>> {
    let mut groups: BTreeMap<GroupKey, Vec<&Rec<'_>>> = BTreeMap::new();
    for rec in recs
        .iter()
        .filter(|r| r.experiment == experiment && keep(r))
    {
        let key = (
            series_order(rec.system, rec.algorithm),
            rec.system.to_owned(),
            rec.algorithm.to_owned(),
            rec.nodes,
        );
        groups.entry(key).or_default().push(rec);
    }
    groups
}

/// The title of a [`GroupKey`]: "binomial-pipeline, 4 nodes".
fn group_title(key: &GroupKey) -> String {
    let series = match key.1.as_str() {
        "rdmc" => format!("rdmc {}", key.2),
        _ => series_label(&key.1, &key.2),
    };
    match key.3 {
        Some(n) => format!("{series}, {n} nodes"),
        None => series,
    }
}

/// Bandwidth against block size: rows block size, columns message size.
fn push_block_size(out: &mut String, recs: &[Rec<'_>]) -> bool {
    let groups = grouped(recs, "block_size", |r| {
        r.block_size.is_some() && r.size.is_some() && r.gbps().is_some()
    });
    if groups.is_empty() {
        return false;
    }
    out.push_str("## Bandwidth vs block size (Gbit/s)\n\n");
    for (key, recs) in &groups {
        let _ = writeln!(out, "### {}\n", group_title(key));
        let sizes: BTreeSet<u64> = recs.iter().filter_map(|r| r.size).collect();
        let blocks: BTreeSet<u64> = recs.iter().filter_map(|r| r.block_size).collect();
        let cells: BTreeMap<(u64, u64), f64> = recs
            .iter()
            .filter_map(|r| Some(((r.block_size?, r.size?), r.gbps()?)))
            .collect();
        let mut header = vec!["block size".to_owned()];
        header.extend(sizes.iter().map(|s| size_label(*s)));
        let rows: Vec<Vec<String>> = blocks
            .iter()
            .map(|&b| {
                let mut row = vec![size_label(b)];
                row.extend(
                    sizes
                        .iter()
                        .map(|&s| cells.get(&(b, s)).map_or(String::new(), |g| sig(*g, 3))),
                );
                row
            })
            .collect();
        push_table(out, &header, &rows);
    }
    true
}

/// Messages per second of a small-message record: its
/// `messages_per_second`, else `burst` ÷ `seconds`.
fn messages_per_second(rec: &Rec<'_>) -> Option<f64> {
    rec.num("messages_per_second")
        .or_else(|| Some(rec.num("burst")? / rec.seconds?))
}

/// Small messages per second: rows group size, columns algorithm; one table
/// per message size.
fn push_small_messages(out: &mut String, recs: &[Rec<'_>]) -> bool {
    let mut by_size: BTreeMap<u64, Vec<&Rec<'_>>> = BTreeMap::new();
    for rec in recs.iter().filter(|r| r.experiment == "small_messages") {
        if rec.nodes.is_some() && messages_per_second(rec).is_some() {
            by_size.entry(rec.size.unwrap_or(1)).or_default().push(rec);
        }
    }
    if by_size.is_empty() {
        return false;
    }
    out.push_str("## Small messages (messages per second)\n\n");
    for (size, recs) in &by_size {
        let _ = writeln!(out, "### {} messages\n", size_label(*size));
        let variants: Vec<Variant> = recs
            .iter()
            .map(|r| Variant::of(r))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let labels = variant_labels(&variants);
        let nodes: BTreeSet<u64> = recs.iter().filter_map(|r| r.nodes).collect();
        let mut cells = BTreeMap::new();
        for rec in recs {
            if let (Some(v), Some(n), Some(rate)) = (
                variants.iter().position(|v| *v == Variant::of(rec)),
                rec.nodes,
                messages_per_second(rec),
            ) {
                cells.insert((v, n), rate);
            }
        }
        let mut header = vec!["nodes".to_owned()];
        header.extend(labels.iter().cloned());
        let rows: Vec<Vec<String>> = nodes
            .iter()
            .map(|&n| {
                let mut row = vec![n.to_string()];
                row.extend((0..variants.len()).map(|v| {
                    cells
                        .get(&(v, n))
                        .map_or(String::new(), |r| format!("{r:.0}"))
                }));
                row
            })
            .collect();
        push_table(out, &header, &rows);
    }
    true
}

/// The label of a breakdown record: "binomial-pipeline 256MiB/1MiB, 16
/// nodes" (algorithm, message size / block size, group size).
fn breakdown_label(rec: &Rec<'_>) -> String {
    let mut label = rec.series();
    if let Some(size) = rec.size {
        let _ = write!(label, " {}", size_label(size));
    }
    if let Some(bs) = rec.block_size {
        let _ = write!(label, "/{}", size_label(bs));
    }
    if let Some(n) = rec.nodes {
        let _ = write!(label, ", {n} nodes");
    }
    label
}

/// The breakdown records that have at least one part, sorted.
fn breakdown_records<'r, 'a>(recs: &'r [Rec<'a>]) -> Vec<&'r Rec<'a>> {
    let mut chosen: Vec<&Rec<'_>> = recs
        .iter()
        .filter(|r| {
            r.experiment == "breakdown" && BREAKDOWN_ROWS.iter().any(|(_, f)| r.num(f).is_some())
        })
        .collect();
    chosen.sort_by_key(|r| {
        (
            series_order(r.system, r.algorithm),
            r.size,
            r.nodes,
            r.block_size,
        )
    });
    chosen
}

/// The time breakdown in the layout of the paper's Table 1: rows the parts,
/// one column per measured algorithm and size.
fn push_breakdown(out: &mut String, recs: &[Rec<'_>]) -> bool {
    let chosen = breakdown_records(recs);
    if chosen.is_empty() {
        return false;
    }
    out.push_str("## Time breakdown on the member farthest from the root (µs)\n\n");
    let mut header = vec!["".to_owned()];
    header.extend(chosen.iter().map(|r| {
        let mut label = breakdown_label(r);
        if let Some(rank) = int(r.raw, "rank") {
            let _ = write!(label, " (rank {rank})");
        }
        label
    }));
    let rows: Vec<Vec<String>> = BREAKDOWN_ROWS
        .iter()
        .map(|(label, field)| {
            let mut row = vec![(*label).to_owned()];
            row.extend(
                chosen
                    .iter()
                    .map(|r| r.num(field).map_or(String::new(), |x| format!("{x:.2}"))),
            );
            row
        })
        .collect();
    push_table(out, &header, &rows);
    true
}

/// Sort key of a completion mode: [`MODES`] order, then by name.
fn mode_order(mode: &str) -> (usize, String) {
    let index = MODES.iter().position(|m| *m == mode).unwrap_or(MODES.len());
    (index, mode.to_owned())
}

/// The CPU records that have a mode, sorted by mode, size, group size.
fn cpu_records<'r, 'a>(recs: &'r [Rec<'a>]) -> Vec<&'r Rec<'a>> {
    let mut chosen: Vec<&Rec<'_>> = recs
        .iter()
        .filter(|r| r.experiment == "cpu" && text(r.raw, "mode").is_some())
        .collect();
    chosen.sort_by_key(|r| {
        (
            mode_order(text(r.raw, "mode").unwrap_or("")),
            r.size,
            r.nodes,
            series_order(r.system, r.algorithm),
        )
    });
    chosen
}

/// CPU cost per completion mode: rows mode × size.
fn push_cpu(out: &mut String, recs: &[Rec<'_>]) -> bool {
    let chosen = cpu_records(recs);
    if chosen.is_empty() {
        return false;
    }
    out.push_str("## CPU use per completion mode\n\n");
    let header: Vec<String> = [
        "mode",
        "size",
        "nodes",
        "algorithm",
        "seconds",
        "CPU s / message / member",
        "CPU s / GiB / member",
        "CPU idle",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let opt = |x: Option<f64>, f: &dyn Fn(f64) -> String| x.map_or(String::new(), f);
    let rows: Vec<Vec<String>> = chosen
        .iter()
        .map(|r| {
            vec![
                text(r.raw, "mode").unwrap_or("").to_owned(),
                r.size.map_or(String::new(), size_label),
                r.nodes.map_or(String::new(), |n| n.to_string()),
                r.series(),
                opt(r.seconds, &|s| sig(s, 4)),
                opt(r.num("cpu_seconds_per_message"), &|s| sig(s, 3)),
                opt(r.num("cpu_seconds_per_gib"), &|s| sig(s, 3)),
                opt(r.num("cpu_idle"), &percent),
            ]
        })
        .collect();
    push_table(out, &header, &rows);
    true
}

/// The machine facts as a two-column table (nothing if `machine` is not a
/// non-empty object).
fn push_machine(out: &mut String, machine: &Value) {
    let Some(facts) = machine.as_object().filter(|m| !m.is_empty()) else {
        return;
    };
    let value_text = |key: &str, v: &Value| match (key, v) {
        ("command", Value::String(s)) => format!("`{s}`"),
        (_, Value::String(s)) => s.clone(),
        (_, other) => other.to_string(),
    };
    let mut rows = Vec::new();
    for (key, label) in MACHINE_KEYS {
        if let Some(v) = facts.get(*key).filter(|v| !v.is_null()) {
            rows.push(vec![(*label).to_owned(), value_text(key, v)]);
        }
    }
    for (key, v) in facts {
        if !v.is_null() && !MACHINE_KEYS.iter().any(|(k, _)| k == key) {
            rows.push(vec![key.clone(), value_text(key, v)]);
        }
    }
    out.push_str("## Machine\n\n");
    push_table(out, &["fact".to_owned(), "value".to_owned()], &rows);
}

/// The whole `summary.md`.
fn summary_text(
    recs: &[Rec<'_>],
    latency: &[LatencyTable],
    machine: &Value,
    plots: &[String],
) -> String {
    let mut out = String::from("# rdmc bench\n\n");
    push_machine(&mut out, machine);
    let mut any = false;
    if !latency.is_empty() {
        out.push_str("## Latency vs group size\n\n");
        for table in latency {
            push_latency_table(&mut out, table);
        }
        any = true;
    }
    any |= push_block_size(&mut out, recs);
    any |= push_small_messages(&mut out, recs);
    any |= push_breakdown(&mut out, recs);
    any |= push_cpu(&mut out, recs);
    if !any {
        out.push_str("No measurements.\n\n");
    }
    if !plots.is_empty() {
        out.push_str("## Plots\n\n");
        for name in plots {
            let _ = writeln!(out, "- [{name}]({name})");
        }
        out.push('\n');
    }
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    out.push('\n');
    out
}

// ---------------------------------------------------------------------------
// Plots

/// How a plotted line is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stroke {
    Solid,
    Dashed,
}

/// One line of a line chart.
#[derive(Debug, Clone)]
struct Line {
    label: String,
    color: RGBColor,
    stroke: Stroke,
    /// Points, sorted by x.
    points: Vec<(f64, f64)>,
}

/// A linear f64 axis with tick marks exactly at the given values (the
/// measured group sizes, block sizes, bar groups) and no light grid lines.
/// (plotters' `with_key_points` wrapper cannot take a label formatter for
/// f64 axes.)
#[derive(Debug, Clone)]
struct TickedAxis {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
}

impl TickedAxis {
    fn new(lo: f64, hi: f64, ticks: Vec<f64>) -> Self {
        TickedAxis { lo, hi, ticks }
    }
}

impl Ranged for TickedAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let span = self.hi - self.lo;
        if span <= 0.0 || !span.is_finite() {
            return (limit.0 + limit.1) / 2;
        }
        let fraction = ((value - self.lo) / span).clamp(-1.0, 2.0);
        limit.0 + (f64::from(limit.1 - limit.0) * fraction).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

/// A line chart: x values are drawn at tick marks of their own (the measured
/// group sizes, block sizes...), y from 0.
struct LineChart<'a> {
    title: String,
    x_desc: &'a str,
    y_desc: &'a str,
    /// Plot x on a log2 scale.
    x_log: bool,
    x_label: &'a dyn Fn(f64) -> String,
    lines: Vec<Line>,
    /// A dashed grey reference line at this y, with its legend label.
    reference: Option<(f64, &'a str)>,
}

/// The colour and stroke of a system's `index`-th line.
fn line_look(system: &str, index: usize) -> (RGBColor, Stroke) {
    match system {
        "unicast" => (BLACK, Stroke::Solid),
        "mpi" => (COLORS[index % COLORS.len()], Stroke::Dashed),
        _ => (COLORS[index % COLORS.len()], Stroke::Solid),
    }
}

/// The top of the y axis: the data's maximum plus room for the legend
/// (`entries` lines of about 22 px at the top of a ~480 px plot area).
fn y_top(max: f64, entries: usize) -> f64 {
    let max = if max > 0.0 && max.is_finite() {
        max
    } else {
        1.0
    };
    let legend = ((entries as f64 * 22.0 + 20.0) / 480.0).min(0.6);
    max * 1.05 / (1.0 - legend)
}

/// Map a plotters error to our error text.
fn plot_error(path: &Path) -> impl Fn(DrawingAreaErrorKind<std::io::Error>) -> String + '_ {
    move |e| format!("drawing {}: {e}", path.display())
}

/// Draw a [`LineChart`] into an SVG file.
fn draw_line_chart(path: &Path, chart: &LineChart<'_>) -> Result<(), String> {
    let err = plot_error(path);
    let to_x = |x: f64| if chart.x_log { x.log2() } else { x };
    let from_x = |x: f64| if chart.x_log { x.exp2() } else { x };
    let xs: Vec<f64> = chart
        .lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| to_x(p.0)))
        .filter(|x| x.is_finite())
        .collect::<Vec<_>>();
    let mut ticks: Vec<f64> = xs.clone();
    ticks.sort_by(f64::total_cmp);
    ticks.dedup();
    let (lo, hi) = match (ticks.first(), ticks.last()) {
        (Some(lo), Some(hi)) if hi > lo => (*lo, *hi),
        (Some(x), _) => (x - 1.0, x + 1.0),
        _ => (0.0, 1.0),
    };
    let pad = (hi - lo) * 0.04;
    let max_y = chart
        .lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .chain(chart.reference.map(|r| r.0))
        .fold(0.0_f64, f64::max);
    let entries = chart.lines.len() + usize::from(chart.reference.is_some());
    let top = y_top(max_y, entries);

    let root = SVGBackend::new(path, PLOT_SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(&err)?;
    let mut ctx = ChartBuilder::on(&root)
        .caption(&chart.title, ("sans-serif", TITLE_FONT))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(80)
        .build_cartesian_2d(TickedAxis::new(lo - pad, hi + pad, ticks), 0.0..top)
        .map_err(&err)?;
    ctx.configure_mesh()
        .x_desc(chart.x_desc)
        .y_desc(chart.y_desc)
        .label_style(("sans-serif", LABEL_FONT))
        .axis_desc_style(("sans-serif", LABEL_FONT))
        .x_label_formatter(&|x| (chart.x_label)(from_x(*x)))
        .y_label_formatter(&|y| tick(*y))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(&err)?;
    if let Some((y, label)) = chart.reference {
        let grey = RGBColor(0x60, 0x60, 0x60);
        ctx.draw_series(DashedLineSeries::new(
            [(lo - pad, y), (hi + pad, y)],
            8,
            6,
            grey.stroke_width(1),
        ))
        .map_err(&err)?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], grey));
    }
    for line in &chart.lines {
        let color = line.color;
        let points: Vec<(f64, f64)> = line
            .points
            .iter()
            .map(|&(x, y)| (to_x(x), y))
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect();
        let style = color.stroke_width(2);
        let series = match line.stroke {
            Stroke::Solid => ctx.draw_series(LineSeries::new(points.clone(), style)),
            Stroke::Dashed => ctx.draw_series(DashedLineSeries::new(points.clone(), 10, 5, style)),
        }
        .map_err(&err)?;
        // The legend's sample: one stroke, or two with a gap for dashed lines.
        let gap = if line.stroke == Stroke::Dashed { 3 } else { 0 };
        series.label(line.label.as_str()).legend(move |(x, y)| {
            EmptyElement::at((x, y))
                + PathElement::new(vec![(0, 0), (12 - gap, 0)], style)
                + PathElement::new(vec![(12 + gap, 0), (24, 0)], style)
        });
        ctx.draw_series(points.iter().map(|p| Circle::new(*p, 3, color.filled())))
            .map_err(&err)?;
    }
    ctx.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", LABEL_FONT))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(&err)?;
    root.present().map_err(&err)?;
    Ok(())
}

/// A bar chart: groups of bars side by side, one colour per series.
struct BarChart<'a> {
    title: String,
    x_desc: &'a str,
    y_desc: &'a str,
    /// The groups along x.
    categories: Vec<String>,
    /// Each series' label and its value in each category.
    series: Vec<(String, Vec<Option<f64>>)>,
}

/// Draw a [`BarChart`] into an SVG file.
fn draw_bar_chart(path: &Path, chart: &BarChart<'_>) -> Result<(), String> {
    let err = plot_error(path);
    let n = chart.categories.len().max(1);
    let max_y = chart
        .series
        .iter()
        .flat_map(|(_, values)| values.iter().flatten().copied())
        .filter(|v| v.is_finite())
        .fold(0.0_f64, f64::max);
    let top = y_top(max_y, chart.series.len());
    let ticks: Vec<f64> = (0..n).map(|i| i as f64).collect();
    // Wide enough that the category labels (about 9 px a character at
    // LABEL_FONT) do not overlap.
    let longest = chart
        .categories
        .iter()
        .map(|c| c.chars().count())
        .max()
        .unwrap_or(0);
    let per_category = (longest * 9 + 30).max(140);
    let width = u32::try_from(180 + n * per_category)
        .unwrap_or(u32::MAX)
        .clamp(PLOT_SIZE.0, 8000);

    let root = SVGBackend::new(path, (width, PLOT_SIZE.1)).into_drawing_area();
    root.fill(&WHITE).map_err(&err)?;
    let mut ctx = ChartBuilder::on(&root)
        .caption(&chart.title, ("sans-serif", TITLE_FONT))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(80)
        .build_cartesian_2d(TickedAxis::new(-0.5, n as f64 - 0.5, ticks), 0.0..top)
        .map_err(&err)?;
    let categories = &chart.categories;
    ctx.configure_mesh()
        .x_desc(chart.x_desc)
        .y_desc(chart.y_desc)
        .label_style(("sans-serif", LABEL_FONT))
        .axis_desc_style(("sans-serif", LABEL_FONT))
        .x_label_formatter(&|x| {
            let i = x.round();
            if i >= 0.0 {
                categories.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| tick(*y))
        .disable_x_mesh()
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(&err)?;
    let bars = chart.series.len().max(1) as f64;
    let bar_width = 0.8 / bars;
    for (s, (label, values)) in chart.series.iter().enumerate() {
        let color = COLORS[s % COLORS.len()];
        let left = -0.4 + s as f64 * bar_width;
        let rects = values.iter().enumerate().filter_map(|(c, v)| {
            let v = v.filter(|v| v.is_finite() && *v >= 0.0)?;
            let x0 = c as f64 + left;
            Some(Rectangle::new(
                [(x0, 0.0), (x0 + bar_width * 0.9, v)],
                color.filled(),
            ))
        });
        ctx.draw_series(rects)
            .map_err(&err)?
            .label(label.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], color.filled()));
    }
    ctx.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", LABEL_FONT))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(&err)?;
    root.present().map_err(&err)?;
    Ok(())
}

/// Draw every plot the records have data for; the written paths.
fn write_plots(
    dir: &Path,
    recs: &[Rec<'_>],
    latency: &[LatencyTable],
) -> Result<Vec<PathBuf>, String> {
    let mut written = Vec::new();
    let nodes_label = |x: f64| format!("{x:.0}");
    let bytes_label = |x: f64| size_label(x.round() as u64);

    for table in latency {
        let name = size_label(table.size);
        let mut lines = Vec::new();
        if !table.unicast.is_empty() {
            lines.push(Line {
                label: "unicast".to_owned(),
                color: BLACK,
                stroke: Stroke::Solid,
                points: table.unicast.iter().map(|(n, s)| (*n as f64, *s)).collect(),
            });
        }
        let mut ratio_lines = Vec::new();
        for (v, (variant, label)) in table.variants.iter().zip(&table.labels).enumerate() {
            let (color, stroke) = line_look(&variant.system, v);
            let pick = |m: &BTreeMap<(usize, u64), f64>| -> Vec<(f64, f64)> {
                m.iter()
                    .filter(|((w, _), _)| *w == v)
                    .map(|((_, n), y)| (*n as f64, *y))
                    .collect()
            };
            lines.push(Line {
                label: label.clone(),
                color,
                stroke,
                points: pick(&table.seconds),
            });
            let ratios = pick(&table.ratios);
            if !ratios.is_empty() {
                ratio_lines.push(Line {
                    label: label.clone(),
                    color,
                    stroke,
                    points: ratios,
                });
            }
        }
        let path = dir.join(format!("latency_{name}.svg"));
        draw_line_chart(
            &path,
            &LineChart {
                title: format!("{name} multicast latency"),
                x_desc: "group size (nodes, root included)",
                y_desc: "time (s, median)",
                x_log: false,
                x_label: &nodes_label,
                lines,
                reference: None,
            },
        )?;
        written.push(path);
        if !ratio_lines.is_empty() {
            let path = dir.join(format!("ratio_{name}.svg"));
            draw_line_chart(
                &path,
                &LineChart {
                    title: format!("{name} multicast time ÷ unicast time"),
                    x_desc: "group size (nodes, root included)",
                    y_desc: "time ÷ unicast time (×)",
                    x_log: false,
                    x_label: &nodes_label,
                    lines: ratio_lines,
                    reference: Some((1.0, "unicast (1×)")),
                },
            )?;
            written.push(path);
        }
    }

    let groups = grouped(recs, "block_size", |r| {
        r.block_size.is_some_and(|b| b > 0) && r.size.is_some() && r.gbps().is_some()
    });
    if !groups.is_empty() {
        let mut lines = Vec::new();
        for (key, recs) in &groups {
            let mut by_size: BTreeMap<u64, BTreeMap<u64, f64>> = BTreeMap::new();
            for rec in recs {
                if let (Some(size), Some(bs), Some(g)) = (rec.size, rec.block_size, rec.gbps()) {
                    by_size.entry(size).or_default().insert(bs, g);
                }
            }
            for (size, points) in by_size {
                let label = if groups.len() > 1 {
                    format!("{} ({})", size_label(size), group_title(key))
                } else {
                    size_label(size)
                };
                lines.push(Line {
                    label,
                    color: COLORS[lines.len() % COLORS.len()],
                    stroke: Stroke::Solid,
                    points: points.into_iter().map(|(b, g)| (b as f64, g)).collect(),
                });
            }
        }
        let title = match groups.keys().next() {
            Some(key) if groups.len() == 1 => {
                format!("Bandwidth vs block size: {}", group_title(key))
            }
            _ => "Bandwidth vs block size".to_owned(),
        };
        let path = dir.join("block_size.svg");
        draw_line_chart(
            &path,
            &LineChart {
                title,
                x_desc: "block size (log scale)",
                y_desc: "bandwidth (Gbit/s)",
                x_log: true,
                x_label: &bytes_label,
                lines,
                reference: None,
            },
        )?;
        written.push(path);
    }

    let small: Vec<&Rec<'_>> = recs
        .iter()
        .filter(|r| {
            r.experiment == "small_messages"
                && r.nodes.is_some()
                && messages_per_second(r).is_some()
        })
        .collect();
    if !small.is_empty() {
        let sizes: BTreeSet<u64> = small.iter().map(|r| r.size.unwrap_or(1)).collect();
        let mut series: BTreeMap<(Variant, u64), BTreeMap<u64, f64>> = BTreeMap::new();
        for rec in &small {
            if let (Some(n), Some(rate)) = (rec.nodes, messages_per_second(rec)) {
                series
                    .entry((Variant::of(rec), rec.size.unwrap_or(1)))
                    .or_default()
                    .insert(n, rate);
            }
        }
        let unique: Vec<Variant> = series
            .keys()
            .map(|(v, _)| v.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let labels = variant_labels(&unique);
        let lines = series
            .into_iter()
            .enumerate()
            .map(|(i, ((variant, size), points))| {
                let index = unique.iter().position(|u| *u == variant).unwrap_or(0);
                let mut label = labels.get(index).cloned().unwrap_or_default();
                if sizes.len() > 1 {
                    let _ = write!(label, " ({})", size_label(size));
                }
                let (color, stroke) = line_look(&variant.system, i);
                Line {
                    label,
                    color,
                    stroke,
                    points: points.into_iter().map(|(n, r)| (n as f64, r)).collect(),
                }
            })
            .collect();
        let title = match sizes.iter().next() {
            Some(size) if sizes.len() == 1 => format!("{} messages per second", size_label(*size)),
            _ => "Small messages per second".to_owned(),
        };
        let path = dir.join("small_messages.svg");
        draw_line_chart(
            &path,
            &LineChart {
                title,
                x_desc: "group size (nodes, root included)",
                y_desc: "messages per second",
                x_log: false,
                x_label: &nodes_label,
                lines,
                reference: None,
            },
        )?;
        written.push(path);
    }

    let cpu: Vec<&Rec<'_>> = cpu_records(recs)
        .into_iter()
        .filter(|r| r.num("cpu_seconds_per_gib").is_some())
        .collect();
    if !cpu.is_empty() {
        let several_nodes = cpu.iter().map(|r| r.nodes).collect::<BTreeSet<_>>().len() > 1;
        let categories: Vec<(Option<u64>, Option<u64>)> = cpu
            .iter()
            .map(|r| (r.size, r.nodes))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        // `cpu_records` sorts by mode first, so this is in mode order.
        let mut modes: Vec<&str> = cpu.iter().filter_map(|r| text(r.raw, "mode")).collect();
        modes.dedup();
        let series = modes
            .iter()
            .map(|mode| {
                let values = categories
                    .iter()
                    .map(|cat| {
                        cpu.iter()
                            .filter(|r| {
                                text(r.raw, "mode") == Some(mode) && (r.size, r.nodes) == *cat
                            })
                            .filter_map(|r| r.num("cpu_seconds_per_gib"))
                            .next_back()
                    })
                    .collect();
                ((*mode).to_owned(), values)
            })
            .collect();
        let categories = categories
            .iter()
            .map(|(size, nodes)| {
                let mut label = size.map_or("?".to_owned(), size_label);
                if let (true, Some(n)) = (several_nodes, nodes) {
                    let _ = write!(label, ", {n} nodes");
                }
                label
            })
            .collect();
        let path = dir.join("cpu.svg");
        draw_bar_chart(
            &path,
            &BarChart {
                title: "CPU time per GiB moved, per member, by completion mode".to_owned(),
                x_desc: "message size",
                y_desc: "CPU s per GiB per member",
                categories,
                series,
            },
        )?;
        written.push(path);
    }

    let breakdown = breakdown_records(recs);
    if !breakdown.is_empty() {
        let series = BREAKDOWN_ROWS
            .iter()
            .map(|(label, field)| {
                let values: Vec<Option<f64>> = breakdown.iter().map(|r| r.num(field)).collect();
                ((*label).to_owned(), values)
            })
            .filter(|(_, values)| values.iter().any(Option::is_some))
            .collect();
        let path = dir.join("breakdown.svg");
        draw_bar_chart(
            &path,
            &BarChart {
                title: "Time breakdown on the member farthest from the root".to_owned(),
                x_desc: "algorithm, message size / block size",
                y_desc: "time (µs)",
                categories: breakdown.iter().map(|r| breakdown_label(r)).collect(),
                series,
            },
        )?;
        written.push(path);
    }
    Ok(written)
}

/// Write a whole file.
fn write_file(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A directory under the system temp dir, removed when dropped (also
    /// when the test fails) unless `RDMC_KEEP_TEST_REPORT` is set, to look
    /// at the report a test wrote.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> Self {
            let path = std::env::temp_dir().join(format!(
                "rdmc-bench-report-{}-{name}-{:?}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0)
            ));
            std::fs::create_dir_all(&path).unwrap();
            TempDir(path)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            if std::env::var_os("RDMC_KEEP_TEST_REPORT").is_none() {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    /// A latency record.
    fn latency(system: &str, algorithm: &str, nodes: u64, seconds: f64) -> Value {
        json!({"experiment": "latency", "system": system, "algorithm": algorithm,
               "nodes": nodes, "size": 8 << 20,
               "block_size": if system == "rdmc" { json!(1 << 20) } else { Value::Null },
               "seconds": seconds, "runs": 3, "all": [seconds, seconds, seconds],
               "min": seconds, "max": seconds, "cpu_idle": 0.9})
    }

    /// A record set touching every section, with known latency numbers:
    /// at 4 nodes unicast 1.0 s, sequential 3.0 s, binomial pipeline 1.2 s,
    /// MPI default 1.8 s, so the ratios are 3.00, 1.20, 1.80 and MPI ÷
    /// binomial-pipeline is 1.50.
    fn records() -> Vec<Value> {
        let mut records = vec![
            latency("unicast", "tcp-copy", 2, 1.0),
            latency("unicast", "tcp-copy", 4, 1.0),
            latency("rdmc", "sequential", 2, 1.0),
            latency("rdmc", "sequential", 4, 3.0),
            latency("rdmc", "binomial-pipeline", 2, 1.1),
            latency("rdmc", "binomial-pipeline", 4, 1.2),
            latency("mpi", "default", 2, 1.5),
            latency("mpi", "default", 4, 1.8),
        ];
        // The lowest CPU idle of the 4-node row.
        records[3]["cpu_idle"] = json!(0.8);
        // MPI busy-waits: its idle time is not the rdmc row's.
        records[7]["cpu_idle"] = json!(0.0);
        for (block, gbps) in [(16u64 << 10, 0.1), (1 << 20, 0.24), (16 << 20, 0.2)] {
            for size in [1u64 << 20, 128 << 20] {
                records.push(json!({"experiment": "block_size", "system": "rdmc",
                    "algorithm": "binomial-pipeline", "nodes": 4, "size": size,
                    "block_size": block, "seconds": 1.0, "runs": 3, "gbps": gbps}));
            }
        }
        for (nodes, rate) in [(2u64, 5000.0), (4, 4000.0)] {
            for algorithm in ["chain", "binomial-pipeline"] {
                records.push(json!({"experiment": "small_messages", "system": "rdmc",
                    "algorithm": algorithm, "nodes": nodes, "size": 1, "burst": 1000,
                    "messages_per_second": rate, "seconds": 0.25, "runs": 3}));
            }
        }
        records.push(json!({"experiment": "breakdown", "system": "rdmc",
            "algorithm": "binomial-pipeline", "nodes": 4, "size": 256 << 20,
            "block_size": 1 << 20, "rank": 3, "remote_setup_us": 11.5,
            "remote_transfers_us": 3.25, "local_setup_us": 1.0, "copy_us": 0.0,
            "transferring_us": 7.5, "waiting_us": 0.05, "total_us": 23.3}));
        for (mode, per_gib) in [("polling", 0.9), ("interrupt", 0.3), ("hybrid", 0.4)] {
            records.push(json!({"experiment": "cpu", "system": "rdmc",
                "algorithm": "binomial-pipeline", "nodes": 4, "size": 100 << 20,
                "seconds": 3.5, "mode": mode, "cpu_seconds_per_message": per_gib / 10.0,
                "cpu_seconds_per_gib": per_gib, "cpu_idle": 0.5, "rate": "250mbit"}));
        }
        records
    }

    fn machine() -> Value {
        json!({"cores": 2, "cpu_model": "Test CPU", "kernel": "6.1", "memory_gib": 23,
               "rate": "250mbit", "command": "rdmc bench --out x", "rdmc_version": "0.1.0"})
    }

    /// The contents of the `<text>` elements of an SVG, trimmed.
    fn svg_texts(svg: &str) -> Vec<&str> {
        svg.split("<text")
            .skip(1)
            .filter_map(|rest| {
                let start = rest.find('>')? + 1;
                let end = rest.find("</text>")?;
                Some(rest.get(start..end)?.trim())
            })
            .collect()
    }

    /// The lines of `text` from the one equal to `heading` to the next
    /// heading.
    fn section<'t>(text: &'t str, heading: &str) -> Vec<&'t str> {
        let mut lines = text.lines().skip_while(|l| *l != heading);
        assert_eq!(lines.next(), Some(heading), "no {heading:?} in:\n{text}");
        lines.take_while(|l| !l.starts_with('#')).collect()
    }

    #[test]
    fn report_files_tables_and_plots() {
        let dir = TempDir::new("full");
        let records = records();
        let files = write_report(&dir.0, &records, &machine()).unwrap();

        // CSV: the fixed header, one row per record.
        let csv = std::fs::read_to_string(&files.csv).unwrap();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], CSV_COLUMNS.join(","));
        assert!(lines[0].starts_with("experiment,system,algorithm,nodes,size,block_size,seconds"));
        assert_eq!(lines.len(), records.len() + 1);
        assert_eq!(
            lines[1].split(',').take(11).collect::<Vec<_>>(),
            [
                "latency",
                "unicast",
                "tcp-copy",
                "2",
                "8388608",
                "",
                "1.0",
                "3",
                "1.0",
                "1.0",
                "1.0;1.0;1.0"
            ]
        );
        assert!(
            lines
                .iter()
                .all(|l| l.split(',').count() == CSV_COLUMNS.len())
        );

        // The summary: machine facts, then the latency table with computed
        // ratios.
        let summary = std::fs::read_to_string(&files.summary).unwrap();
        assert_eq!(summary, files.summary_markdown);
        assert!(
            summary.contains("| Command | `rdmc bench --out x` |"),
            "{summary}"
        );
        assert!(summary.contains("| CPU | Test CPU |"));
        let latency = section(&summary, "### 8MiB messages");
        let header = "| nodes | unicast s | sequential s | sequential × unicast \
            | binomial-pipeline s | binomial-pipeline × unicast | MPI default s \
            | MPI default × unicast | MPI default ÷ binomial-pipeline | CPU idle (min, rdmc and unicast) |";
        assert!(latency.contains(&header), "{latency:#?}");
        assert!(
            latency.contains(
                &"| 4 | 1.000 | 3.000 | 3.00 | 1.200 | 1.20 | 1.800 | 1.80 | 1.50 | 80% |"
            ),
            "{latency:#?}"
        );
        assert!(
            latency.contains(
                &"| 2 | 1.000 | 1.000 | 1.00 | 1.100 | 1.10 | 1.500 | 1.50 | 1.36 | 90% |"
            ),
            "{latency:#?}"
        );

        let blocks = section(&summary, "### rdmc binomial-pipeline, 4 nodes");
        assert!(
            blocks.contains(&"| block size | 1MiB | 128MiB |"),
            "{blocks:#?}"
        );
        assert!(blocks.contains(&"| 1MiB | 0.240 | 0.240 |"), "{blocks:#?}");
        let small = section(&summary, "### 1B messages");
        assert!(
            small.contains(&"| nodes | chain | binomial-pipeline |"),
            "{small:#?}"
        );
        assert!(small.contains(&"| 4 | 4000 | 4000 |"), "{small:#?}");
        let breakdown = section(
            &summary,
            "## Time breakdown on the member farthest from the root (µs)",
        );
        assert!(
            breakdown.contains(&"| Remote setup | 11.50 |"),
            "{breakdown:#?}"
        );
        assert!(breakdown.contains(&"| Total | 23.30 |"), "{breakdown:#?}");
        let cpu = section(&summary, "## CPU use per completion mode");
        let modes: Vec<&str> = cpu
            .iter()
            .filter_map(|l| l.strip_prefix("| "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        assert_eq!(modes, ["mode", "---", "interrupt", "hybrid", "polling"]);
        assert!(
            cpu.contains(
                &"| polling | 100MiB | 4 | binomial-pipeline | 3.500 | 0.0900 | 0.900 | 50% |"
            ),
            "{cpu:#?}"
        );

        // The plots.
        let names: Vec<String> = files
            .plots
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "latency_8MiB.svg",
                "ratio_8MiB.svg",
                "block_size.svg",
                "small_messages.svg",
                "cpu.svg",
                "breakdown.svg"
            ]
        );
        let legends = [
            vec!["unicast", "binomial-pipeline", "MPI default", "group size"],
            vec!["unicast (1×)", "sequential", "MPI default"],
            vec!["128MiB", "16KiB", "Gbit/s"],
            vec!["chain", "binomial-pipeline", "messages per second"],
            vec!["interrupt", "polling", "100MiB"],
            vec!["Remote setup", "Waiting"],
        ];
        for (path, labels) in files.plots.iter().zip(legends) {
            let svg = std::fs::read_to_string(path).unwrap();
            assert!(svg.contains("<svg"), "{}", path.display());
            let texts = svg_texts(&svg);
            for label in labels {
                assert!(
                    texts.iter().any(|t| t.contains(label)),
                    "{} has no text {label:?}: {texts:?}",
                    path.display()
                );
            }
        }
        assert!(summary.contains("- [latency_8MiB.svg](latency_8MiB.svg)"));
        assert_eq!(files.paths().len(), 2 + files.plots.len());
    }

    #[test]
    fn recorded_ratio_used_without_unicast_and_missing_fields_skipped() {
        let dir = TempDir::new("sparse");
        let records = vec![
            json!({"experiment": "latency", "system": "rdmc", "algorithm": "chain",
                   "nodes": 4, "size": 1 << 20, "seconds": 2.0, "ratio_to_unicast": 1.25}),
            json!({"experiment": "latency", "system": "rdmc", "algorithm": "chain",
                   "size": 1 << 20, "seconds": 2.0}),
            json!({"experiment": "latency", "system": "mpi", "nodes": 4, "seconds": null}),
            json!({"experiment": "cpu", "size": 1 << 20}),
            json!({"experiment": "breakdown", "system": "rdmc"}),
            json!({"experiment": "block_size", "size": 1, "block_size": 0, "seconds": 0.0}),
            json!({}),
            json!({"note": "a, \"quoted\"\nvalue"}),
        ];
        let files = write_report(&dir.0, &records, &Value::Null).unwrap();
        let summary = &files.summary_markdown;
        assert!(summary.contains("| 4 | 2.000 | 1.25 |"), "{summary}");
        assert!(!summary.contains("## Machine"));
        assert!(!summary.contains("CPU use"));
        assert!(!summary.contains("breakdown"));
        assert!(!summary.contains("block size"));
        let csv = std::fs::read_to_string(&files.csv).unwrap();
        assert!(csv.lines().next().unwrap().ends_with(",total_us,note"));
        assert!(csv.ends_with(",\"a, \"\"quoted\"\"\nvalue\"\n"), "{csv}");
        assert_eq!(csv.matches("\nlatency,").count(), 3);
        let names: Vec<_> = files.plots.iter().map(|p| p.file_name().unwrap()).collect();
        assert_eq!(names, ["latency_1MiB.svg", "ratio_1MiB.svg"]);
    }

    #[test]
    fn no_records_give_a_summary_without_tables() {
        let dir = TempDir::new("empty");
        let files = write_report(&dir.0.join("sub"), &[], &machine()).unwrap();
        assert!(files.summary_markdown.contains("No measurements."));
        assert!(files.plots.is_empty());
        let csv = std::fs::read_to_string(&files.csv).unwrap();
        assert_eq!(csv.lines().count(), 1);
    }

    #[test]
    fn jsonl_is_read_and_bad_lines_are_named() {
        let dir = TempDir::new("jsonl");
        let good = dir.0.join("good.jsonl");
        std::fs::write(&good, "{\"a\": 1}\n\n  \n{\"b\": [2]}\n").unwrap();
        let records = read_records(&good).unwrap();
        assert_eq!(records, [json!({"a": 1}), json!({"b": [2]})]);

        let bad = dir.0.join("bad.jsonl");
        std::fs::write(&bad, "{\"a\": 1}\n\n{\"b\": oops}\n{}\n").unwrap();
        let error = read_records(&bad).unwrap_err();
        assert!(error.contains("bad.jsonl line 3, column 7: "), "{error}");
        assert!(!error.contains("line 1"), "{error}");

        std::fs::write(&bad, "{}\n[1, 2]\n").unwrap();
        let error = read_records(&bad).unwrap_err();
        assert!(
            error.contains("line 2") && error.contains("not a JSON object"),
            "{error}"
        );

        assert!(read_records(&dir.0.join("missing.jsonl")).is_err());
    }

    #[test]
    fn labels_and_numbers() {
        assert_eq!(size_label(8 << 20), "8MiB");
        assert_eq!(size_label(256 << 20), "256MiB");
        assert_eq!(size_label(16 << 10), "16KiB");
        assert_eq!(size_label(1), "1B");
        assert_eq!(size_label(10_000_019), "10000019B");
        assert_eq!(size_label(0), "0B");
        assert_eq!(sig(1.0, 4), "1.000");
        assert_eq!(sig(0.268_44, 4), "0.2684");
        assert_eq!(sig(1234.5, 4), "1234");
        assert_eq!(sig(12_345.6, 3), "12346");
        assert_eq!(tick(0.05), "0.05");
        assert_eq!(tick(1.0), "1");
        assert_eq!(tick(250.0), "250");
        assert_eq!(tick(0.0), "0");
        assert_eq!(percent(0.876), "88%");
        assert_eq!(md_cell("a|b"), "a\\|b");
        assert_eq!(csv_value(Some(&json!([1, 2.5]))), "1;2.5");
        assert_eq!(csv_value(Some(&Value::Null)), "");
        assert_eq!(csv_value(None), "");
    }
}
