//! The figures of the report, each drawn only when the records have data
//! for it: latency and ratio to unicast per message size, bandwidth vs block
//! size, small messages per second, CPU per completion mode and the time
//! breakdown.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::style::colors::BLACK;

use super::charts::{
    BarChart, COLORS, Line, LineChart, Stroke, draw_bar_chart, draw_line_chart, line_look,
};
use super::datasets::{
    BREAKDOWN_ROWS, LatencyTable, breakdown_label, breakdown_records, cpu_records, group_title,
    grouped, messages_per_second, small_message_records, sorted_distinct,
};
use super::format::size_label;
use super::records::{Rec, Variant, text, variant_labels};

/// The x axis of the plots against group size.
const GROUP_SIZE_AXIS: &str = "group size (nodes, root included)";

/// Draw every plot the records have data for; the written paths.
pub(super) fn write_plots(
    dir: &Path,
    recs: &[Rec<'_>],
    latency: &[LatencyTable],
) -> anyhow::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for table in latency {
        written.extend(latency_plots(dir, table)?);
    }
    written.extend(block_size_plot(dir, recs)?);
    written.extend(small_messages_plot(dir, recs)?);
    written.extend(cpu_plot(dir, recs)?);
    written.extend(breakdown_plot(dir, recs)?);
    written.extend(super::storage::storage_plots(dir, recs)?);
    written.extend(super::collectives::allreduce_plot(dir, recs)?);
    written.extend(super::topologies::push_plot(dir, recs)?);
    Ok(written)
}

/// The latency plot of one message size and, when the table has ratios to
/// unicast, the plot of those ratios.
fn latency_plots(dir: &Path, table: &LatencyTable) -> anyhow::Result<Vec<PathBuf>> {
    let name = size_label(table.size);
    let mut lines = Vec::new();
    if !table.unicast.is_empty() {
        lines.push(Line {
            label: "unicast".to_owned(),
            color: BLACK,
            stroke: Stroke::Solid,
            points: points(table.unicast.iter().map(|(n, s)| (*n, *s))),
        });
    }
    let mut ratio_lines = Vec::new();
    for (v, (variant, label)) in table.variants.iter().zip(&table.labels).enumerate() {
        let (color, stroke) = line_look(&variant.system, v);
        let line = |points| Line {
            label: label.clone(),
            color,
            stroke,
            points,
        };
        lines.push(line(variant_points(&table.seconds, v)));
        let ratios = variant_points(&table.ratios, v);
        if !ratios.is_empty() {
            ratio_lines.push(line(ratios));
        }
    }
    let latency = group_size_chart(
        format!("{name} multicast latency"),
        "time (s, median)",
        lines,
    );
    let mut written = vec![line_plot(dir, &format!("latency_{name}.svg"), &latency)?];
    if !ratio_lines.is_empty() {
        let ratio = LineChart {
            reference: Some((1.0, "unicast (1×)")),
            ..group_size_chart(
                format!("{name} multicast time ÷ unicast time"),
                "time ÷ unicast time (×)",
                ratio_lines,
            )
        };
        written.push(line_plot(dir, &format!("ratio_{name}.svg"), &ratio)?);
    }
    Ok(written)
}

/// Bandwidth against block size (log scale), one line per message size.
fn block_size_plot(dir: &Path, recs: &[Rec<'_>]) -> anyhow::Result<Option<PathBuf>> {
    let groups = grouped(recs, "block_size", |r| {
        r.block_size.is_some_and(|b| b > 0) && r.size.is_some() && r.gbps().is_some()
    });
    if groups.is_empty() {
        return Ok(None);
    }
    let mut lines = Vec::new();
    for (key, recs) in &groups {
        let mut by_size: BTreeMap<u64, BTreeMap<u64, f64>> = BTreeMap::new();
        for rec in recs {
            if let (Some(size), Some(bs), Some(g)) = (rec.size, rec.block_size, rec.gbps()) {
                by_size.entry(size).or_default().insert(bs, g);
            }
        }
        for (size, by_block) in by_size {
            let label = if groups.len() > 1 {
                format!("{} ({})", size_label(size), group_title(key))
            } else {
                size_label(size)
            };
            lines.push(Line {
                label,
                color: COLORS[lines.len() % COLORS.len()],
                stroke: Stroke::Solid,
                points: points(by_block),
            });
        }
    }
    let title = match groups.keys().next() {
        Some(key) if groups.len() == 1 => {
            format!("Bandwidth vs block size: {}", group_title(key))
        }
        _ => "Bandwidth vs block size".to_owned(),
    };
    let chart = LineChart {
        title,
        x_desc: "block size (log scale)",
        y_desc: "bandwidth (Gbit/s)",
        x_log: true,
        x_label: &bytes_label,
        lines,
        reference: None,
    };
    line_plot(dir, "block_size.svg", &chart).map(Some)
}

/// Small messages per second against group size, one line per variant and
/// message size.
fn small_messages_plot(dir: &Path, recs: &[Rec<'_>]) -> anyhow::Result<Option<PathBuf>> {
    let small = small_message_records(recs);
    if small.is_empty() {
        return Ok(None);
    }
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
    let unique: Vec<Variant> = sorted_distinct(series.keys().map(|(v, _)| v.clone()));
    let labels = variant_labels(&unique);
    let lines = series
        .into_iter()
        .enumerate()
        .map(|(i, ((variant, size), by_nodes))| {
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
                points: points(by_nodes),
            }
        })
        .collect();
    let title = match sizes.iter().next() {
        Some(size) if sizes.len() == 1 => format!("{} messages per second", size_label(*size)),
        _ => "Small messages per second".to_owned(),
    };
    let chart = group_size_chart(title, "messages per second", lines);
    line_plot(dir, "small_messages.svg", &chart).map(Some)
}

/// CPU seconds per GiB per member: bars per completion mode, grouped by
/// message size (and group size, when there are several).
fn cpu_plot(dir: &Path, recs: &[Rec<'_>]) -> anyhow::Result<Option<PathBuf>> {
    let cpu: Vec<&Rec<'_>> = cpu_records(recs)
        .into_iter()
        .filter(|r| r.num("cpu_seconds_per_gib").is_some())
        .collect();
    if cpu.is_empty() {
        return Ok(None);
    }
    let several_nodes = cpu.iter().map(|r| r.nodes).collect::<BTreeSet<_>>().len() > 1;
    let categories: Vec<(Option<u64>, Option<u64>)> =
        sorted_distinct(cpu.iter().map(|r| (r.size, r.nodes)));
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
                        .filter(|r| text(r.raw, "mode") == Some(mode) && (r.size, r.nodes) == *cat)
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
    let chart = BarChart {
        title: "CPU time per GiB moved, per member, by completion mode".to_owned(),
        x_desc: "message size",
        y_desc: "CPU s per GiB per member",
        categories,
        series,
    };
    bar_plot(dir, "cpu.svg", &chart).map(Some)
}

/// The time breakdown: bars per part, grouped by breakdown record.
fn breakdown_plot(dir: &Path, recs: &[Rec<'_>]) -> anyhow::Result<Option<PathBuf>> {
    let breakdown = breakdown_records(recs);
    if breakdown.is_empty() {
        return Ok(None);
    }
    let series = BREAKDOWN_ROWS
        .iter()
        .map(|(label, field)| {
            let values: Vec<Option<f64>> = breakdown.iter().map(|r| r.num(field)).collect();
            ((*label).to_owned(), values)
        })
        .filter(|(_, values)| values.iter().any(Option::is_some))
        .collect();
    let chart = BarChart {
        title: "Time breakdown on the member farthest from the root".to_owned(),
        x_desc: "algorithm, message size / block size",
        y_desc: "time (µs)",
        categories: breakdown.iter().map(|r| breakdown_label(r)).collect(),
        series,
    };
    bar_plot(dir, "breakdown.svg", &chart).map(Some)
}

/// A line chart against group size, y from 0, no reference line. Group
/// sizes spread over more than a factor of 64 (simulations up to
/// thousands of members) are drawn on a log2 axis.
fn group_size_chart(title: String, y_desc: &str, lines: Vec<Line>) -> LineChart<'_> {
    let xs = || lines.iter().flat_map(|l| l.points.iter().map(|p| p.0));
    let (lo, hi) = (xs().fold(f64::INFINITY, f64::min), xs().fold(0.0, f64::max));
    LineChart {
        title,
        x_desc: GROUP_SIZE_AXIS,
        y_desc,
        x_log: lo > 0.0 && hi / lo > 64.0,
        x_label: &nodes_label,
        lines,
        reference: None,
    }
}

/// Draw a line chart into `dir/name`; its path.
fn line_plot(dir: &Path, name: &str, chart: &LineChart<'_>) -> anyhow::Result<PathBuf> {
    let path = dir.join(name);
    draw_line_chart(&path, chart)?;
    Ok(path)
}

/// Draw a bar chart into `dir/name`; its path.
fn bar_plot(dir: &Path, name: &str, chart: &BarChart<'_>) -> anyhow::Result<PathBuf> {
    let path = dir.join(name);
    draw_bar_chart(&path, chart)?;
    Ok(path)
}

/// The points of one variant of a latency table's map, by group size.
fn variant_points(by_cell: &BTreeMap<(usize, u64), f64>, variant: usize) -> Vec<(f64, f64)> {
    points(
        by_cell
            .iter()
            .filter(|((v, _), _)| *v == variant)
            .map(|((_, n), y)| (*n, *y)),
    )
}

/// Points with whole-number x values (group sizes, block sizes).
fn points(xy: impl IntoIterator<Item = (u64, f64)>) -> Vec<(f64, f64)> {
    xy.into_iter().map(|(x, y)| (x as f64, y)).collect()
}

/// An x label of a group size.
fn nodes_label(x: f64) -> String {
    format!("{x:.0}")
}

/// An x label of a byte count.
fn bytes_label(x: f64) -> String {
    size_label(x.round() as u64)
}
