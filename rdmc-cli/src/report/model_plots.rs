//! Line charts of `rdmc model`: modelled times against message size.

use std::path::Path;

use super::charts::{Line, LineChart, draw_line_chart, line_look};

/// One modelled curve: its label and its (bytes, µs) points.
pub type Curve = (String, Vec<(f64, f64)>);

/// Draw `curves` against message size (log2 x axis) into an SVG at `path`.
pub fn draw_model_chart(path: &Path, title: &str, curves: &[Curve]) -> anyhow::Result<()> {
    let lines = curves
        .iter()
        .enumerate()
        .map(|(i, (label, points))| {
            let (color, stroke) = line_look(label, i);
            Line {
                label: label.clone(),
                color,
                stroke,
                points: points.clone(),
            }
        })
        .collect();
    let x_label = |x: f64| crate::size::human(x as u64);
    draw_line_chart(
        path,
        &LineChart {
            title: title.to_string(),
            x_desc: "message size",
            y_desc: "modelled time (µs)",
            x_log: true,
            x_label: &x_label,
            lines,
            reference: None,
        },
    )
}
