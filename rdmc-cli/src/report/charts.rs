//! Chart primitives on plotters' SVG backend: a line chart with ticks at the
//! measured x values (optionally log2) and a grouped bar chart, both with
//! the y axis from 0 and room for the legend.

use std::path::Path;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::format::tick;

/// Line colours of the plots (the "Tableau 10" palette); unicast is black.
pub(super) const COLORS: &[RGBColor] = &[
    rgb(0x1f77b4),
    rgb(0xff7f0e),
    rgb(0x2ca02c),
    rgb(0xd62728),
    rgb(0x9467bd),
    rgb(0x8c564b),
    rgb(0xe377c2),
    rgb(0x7f7f7f),
    rgb(0xbcbd22),
    rgb(0x17becf),
];

/// The colour `0xRRGGBB`.
const fn rgb(hex: u32) -> RGBColor {
    RGBColor((hex >> 16) as u8, (hex >> 8) as u8, hex as u8)
}

/// Font size of the plots' titles, in plotters' units (the SVG gets about
/// 80% of this in pixels).
const TITLE_FONT: u32 = 28;
/// Font size of the plots' other text.
const LABEL_FONT: u32 = 18;

/// Size of every plot, in pixels.
const PLOT_SIZE: (u32, u32) = (960, 600);

/// How a plotted line is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stroke {
    Solid,
    Dashed,
}

/// One line of a line chart.
#[derive(Debug, Clone)]
pub(super) struct Line {
    pub(super) label: String,
    pub(super) color: RGBColor,
    pub(super) stroke: Stroke,
    /// Points, sorted by x.
    pub(super) points: Vec<(f64, f64)>,
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
pub(super) struct LineChart<'a> {
    pub(super) title: String,
    pub(super) x_desc: &'a str,
    pub(super) y_desc: &'a str,
    /// Plot x on a log2 scale.
    pub(super) x_log: bool,
    pub(super) x_label: &'a dyn Fn(f64) -> String,
    pub(super) lines: Vec<Line>,
    /// A dashed grey reference line at this y, with its legend label.
    pub(super) reference: Option<(f64, &'a str)>,
}

/// The colour and stroke of a system's `index`-th line.
pub(super) fn line_look(system: &str, index: usize) -> (RGBColor, Stroke) {
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

/// The axes of a chart as plotters draws them: a [`TickedAxis`] for x and
/// a linear axis from 0 for y.
type Axes = Cartesian2d<TickedAxis, RangedCoordf64>;

/// A plotters error while drawing an SVG file.
type DrawError = DrawingAreaErrorKind<std::io::Error>;

/// What the line and bar charts share: the picture around the data.
struct Frame<'a> {
    title: &'a str,
    x_desc: &'a str,
    y_desc: &'a str,
    /// Width and height in pixels.
    size: (u32, u32),
    x_axis: TickedAxis,
    /// The top of the y axis (see [`y_top`]).
    top: f64,
    x_label: &'a dyn Fn(&f64) -> String,
    /// Draw the grid lines across x (bar charts leave them out).
    x_mesh: bool,
}

/// Map a plotters error to our error text.
fn plot_error(path: &Path) -> impl Fn(DrawError) -> anyhow::Error + '_ {
    move |e| anyhow::anyhow!("drawing {}: {e}", path.display())
}

/// Start a chart on `root`: white background, title, axes and grid from
/// `frame`. The caller draws the data, then [`finish_chart`].
fn start_chart<'a, 'p>(
    root: &'a DrawingArea<SVGBackend<'p>, Shift>,
    frame: Frame<'_>,
) -> Result<ChartContext<'a, SVGBackend<'p>, Axes>, DrawError> {
    root.fill(&WHITE)?;
    let mut ctx = ChartBuilder::on(root)
        .caption(frame.title, ("sans-serif", TITLE_FONT))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(80)
        .build_cartesian_2d(frame.x_axis, 0.0..frame.top)?;
    let y_label = |y: &f64| tick(*y);
    let mut mesh = ctx.configure_mesh();
    mesh.x_desc(frame.x_desc)
        .y_desc(frame.y_desc)
        .label_style(("sans-serif", LABEL_FONT))
        .axis_desc_style(("sans-serif", LABEL_FONT))
        .x_label_formatter(frame.x_label)
        .y_label_formatter(&y_label)
        .light_line_style(WHITE.mix(0.0));
    if !frame.x_mesh {
        mesh.disable_x_mesh();
    }
    mesh.draw()?;
    Ok(ctx)
}

/// Finish a chart: the legend at the upper left, then the file.
fn finish_chart<'a, 'p: 'a>(
    root: &DrawingArea<SVGBackend<'p>, Shift>,
    ctx: &mut ChartContext<'a, SVGBackend<'p>, Axes>,
) -> Result<(), DrawError> {
    ctx.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", LABEL_FONT))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()
}

/// Draw a [`LineChart`] into an SVG file.
pub(super) fn draw_line_chart(path: &Path, chart: &LineChart<'_>) -> anyhow::Result<()> {
    let to_x = |x: f64| if chart.x_log { x.log2() } else { x };
    let from_x = |x: f64| if chart.x_log { x.exp2() } else { x };
    let mut ticks: Vec<f64> = chart
        .lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| to_x(p.0)))
        .filter(|x| x.is_finite())
        .collect();
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
    let x_label = |x: &f64| (chart.x_label)(from_x(*x));
    let frame = Frame {
        title: &chart.title,
        x_desc: chart.x_desc,
        y_desc: chart.y_desc,
        size: PLOT_SIZE,
        x_axis: TickedAxis::new(lo - pad, hi + pad, ticks),
        top: y_top(max_y, entries),
        x_label: &x_label,
        x_mesh: true,
    };
    let root = SVGBackend::new(path, frame.size).into_drawing_area();
    let draw = || {
        let mut ctx = start_chart(&root, frame)?;
        if let Some((y, label)) = chart.reference {
            let grey = RGBColor(0x60, 0x60, 0x60);
            ctx.draw_series(DashedLineSeries::new(
                [(lo - pad, y), (hi + pad, y)],
                8,
                6,
                grey.stroke_width(1),
            ))?
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
                Stroke::Dashed => {
                    ctx.draw_series(DashedLineSeries::new(points.clone(), 10, 5, style))
                }
            }?;
            // The legend's sample: one stroke, or two with a gap for dashed lines.
            let gap = if line.stroke == Stroke::Dashed { 3 } else { 0 };
            series.label(line.label.as_str()).legend(move |(x, y)| {
                EmptyElement::at((x, y))
                    + PathElement::new(vec![(0, 0), (12 - gap, 0)], style)
                    + PathElement::new(vec![(12 + gap, 0), (24, 0)], style)
            });
            ctx.draw_series(points.iter().map(|p| Circle::new(*p, 3, color.filled())))?;
        }
        finish_chart(&root, &mut ctx)
    };
    draw().map_err(plot_error(path))
}

/// A bar chart: groups of bars side by side, one colour per series.
pub(super) struct BarChart<'a> {
    pub(super) title: String,
    pub(super) x_desc: &'a str,
    pub(super) y_desc: &'a str,
    /// The groups along x.
    pub(super) categories: Vec<String>,
    /// Each series' label and its value in each category.
    pub(super) series: Vec<(String, Vec<Option<f64>>)>,
}

/// Draw a [`BarChart`] into an SVG file.
pub(super) fn draw_bar_chart(path: &Path, chart: &BarChart<'_>) -> anyhow::Result<()> {
    let n = chart.categories.len().max(1);
    let max_y = chart
        .series
        .iter()
        .flat_map(|(_, values)| values.iter().flatten().copied())
        .filter(|v| v.is_finite())
        .fold(0.0_f64, f64::max);
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
    let x_label = |x: &f64| {
        let i = x.round();
        if i >= 0.0 {
            chart
                .categories
                .get(i as usize)
                .cloned()
                .unwrap_or_default()
        } else {
            String::new()
        }
    };
    let frame = Frame {
        title: &chart.title,
        x_desc: chart.x_desc,
        y_desc: chart.y_desc,
        size: (width, PLOT_SIZE.1),
        x_axis: TickedAxis::new(-0.5, n as f64 - 0.5, ticks),
        top: y_top(max_y, chart.series.len()),
        x_label: &x_label,
        x_mesh: false,
    };
    let bar_width = 0.8 / chart.series.len().max(1) as f64;
    let root = SVGBackend::new(path, frame.size).into_drawing_area();
    let draw = || {
        let mut ctx = start_chart(&root, frame)?;
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
            ctx.draw_series(rects)?
                .label(label.as_str())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 6), (x + 16, y + 6)], color.filled())
                });
        }
        finish_chart(&root, &mut ctx)
    };
    draw().map_err(plot_error(path))
}
