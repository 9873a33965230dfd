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
    grouped, messages_per_second,
};
use super::format::size_label;
use super::records::{Rec, Variant, text, variant_labels};

/// Draw every plot the records have data for; the written paths.
pub(super) fn write_plots(
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
