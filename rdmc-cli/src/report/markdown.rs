//! Markdown tables of `summary.md`: cells, rows and whole tables.

/// A markdown table cell: `|` escaped, line breaks flattened.
pub(super) fn md_cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// A table's header row of fixed titles, written as the row reads:
/// `"a | b | c"`.
pub(super) fn header(titles: &str) -> Vec<String> {
    titles.split(" | ").map(str::to_owned).collect()
}

/// A table row (or header): the first cell, then the others.
pub(super) fn row(first: impl Into<String>, rest: impl IntoIterator<Item = String>) -> Vec<String> {
    std::iter::once(first.into()).chain(rest).collect()
}

/// A number's cell, empty when there is none.
pub(super) fn cell(x: Option<f64>, format: impl Fn(f64) -> String) -> String {
    x.map_or(String::new(), format)
}

/// `median (min–max)`, each number through `format`: without the range
/// when there is none, empty without a median.
pub(super) fn spread_cell(
    (median, min, max): (Option<f64>, Option<f64>, Option<f64>),
    format: impl Fn(f64) -> String,
) -> String {
    match (median, min, max) {
        (Some(m), Some(lo), Some(hi)) if lo < hi => {
            format!("{} ({}–{})", format(m), format(lo), format(hi))
        }
        (Some(m), _, _) => format(m),
        _ => String::new(),
    }
}

/// Append a markdown table.
pub(super) fn push_table(out: &mut String, header: &[String], rows: &[Vec<String>]) {
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
