//! The report of a run of measurements (the benchmark harness's, or `rdmc
//! simulate --plot`'s): from the records (one JSON object per measurement,
//! as in `results.jsonl`) to `results.csv`, `summary.md` and SVG plots in
//! the same directory.
//!
//! The driver measures and calls [`write_report`]; [`read_records`] reads an
//! earlier run's `results.jsonl` so a report can be rebuilt without
//! measuring again.
//!
//! Records are loosely typed on purpose: a field that is absent, `null` or of
//! the wrong type is treated as missing, and a record lacking what a table or
//! plot needs is left out of that table or plot (it still gets its CSV row).
//!
//! The rooms: `records` (the records, their fields and series labels),
//! `datasets` (the records each table and plot is drawn from), `csv`,
//! `tables` (`summary.md`) with `markdown` (its cells and tables), `charts`
//! (line and bar charts as SVG) and `plots` (the figures), `storage` (the
//! storage workloads' tables and figures), `topologies` (slow hosts, racks,
//! the simulator's predictions), `collectives` (allreduce), with `format`
//! for numbers and sizes; [`model_plots`] draws `rdmc model`'s curves.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde_json::Value;

mod charts;
mod collectives;
mod csv;
mod datasets;
mod format;
mod markdown;
pub mod model_plots;
mod plots;
mod records;
mod storage;
mod tables;
#[cfg(test)]
mod tests;
mod topologies;

/// The order statistics of the report's measurements (the harness
/// summarises its runs with the same).
pub use rdmc_sim::stats::{median, percentile};
pub use records::read_records;

use self::csv::csv_text;
use datasets::latency_tables;
use plots::write_plots;
use records::Rec;
use tables::summary_text;

/// The files [`write_report`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportFiles {
    /// `DIR/results.csv`.
    pub csv: PathBuf,
    /// `DIR/summary.md`.
    pub summary: PathBuf,
    /// The text written to `summary.md`, for printing.
    pub summary_markdown: String,
    /// The SVG plots, in the order they are listed in the summary.
    pub plots: Vec<PathBuf>,
}

impl ReportFiles {
    /// Every written path: the CSV, the summary, then the plots.
    pub fn paths(&self) -> Vec<&Path> {
        let mut paths = vec![self.csv.as_path(), self.summary.as_path()];
        paths.extend(self.plots.iter().map(PathBuf::as_path));
        paths
    }
}

/// Write `DIR/results.csv`, `DIR/summary.md` and the SVG plots from the
/// records (creating `DIR` if needed). `machine` is an object of facts about
/// the machine and the run (cores, CPU model, kernel, rate, command, ...),
/// shown at the top of the summary.
pub fn write_report(dir: &Path, records: &[Value], machine: &Value) -> anyhow::Result<ReportFiles> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let recs: Vec<Rec<'_>> = records.iter().filter_map(Rec::new).collect();
    let latency = latency_tables(&recs);

    let mut plots = write_plots(dir, &recs, &latency)?;
    plots.extend(topologies::validation_plots(dir, &recs)?);

    let csv = dir.join("results.csv");
    write_file(&csv, &csv_text(records)?)?;

    let summary_markdown = summary_text(&recs, &latency, machine, &file_names(&plots));
    let summary = dir.join("summary.md");
    write_file(&summary, &summary_markdown)?;

    Ok(ReportFiles {
        csv,
        summary,
        summary_markdown,
        plots,
    })
}

/// The file names of `paths` (the plots, as the summary lists them).
fn file_names(paths: &[PathBuf]) -> Vec<String> {
    paths
        .iter()
        .filter_map(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .collect()
}

/// Write a whole file.
fn write_file(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}
