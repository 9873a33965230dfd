//! How `rdmc push` and `rdmc receive` report: progress bars on a terminal
//! (one per file cut into several messages, and one for the whole push:
//! bytes, rate, ETA), JSON lines with `--json`, and a plain summary
//! otherwise. Sizes are always printed for people (`1.50 GiB`).

use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;

use super::manifest::{Manifest, Segment, piece_len};
use rdmc_cli::size::human;

/// How to report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Style {
    /// Progress bars on stderr: both stdout and stderr are terminals.
    Bars,
    /// JSON lines on stdout (`--json`).
    Json,
    /// A line at the end (not a terminal).
    Plain,
}

impl Style {
    /// JSON if asked; bars if stdout and stderr are terminals; else plain.
    pub(crate) fn pick(json: bool) -> Self {
        if json {
            Style::Json
        } else if std::io::stdout().is_terminal() && std::io::stderr().is_terminal() {
            Style::Bars
        } else {
            Style::Plain
        }
    }
}

const FILE_TEMPLATE: &str = "{prefix:<32!} [{bar:30.cyan/blue}] {bytes:>10}/{total_bytes:<10} {binary_bytes_per_sec:>12} ETA {eta}";
const TOTAL_TEMPLATE: &str = "{prefix:<32!.bold} [{bar:30.green/blue}] {bytes:>10}/{total_bytes:<10} {binary_bytes_per_sec:>12} ETA {eta} {msg}";

/// The progress of one push, at the root or at a receiver. Shared between
/// the async side and the blocking writer (all methods take `&self`).
pub(crate) struct Progress {
    style: Style,
    /// `sent` or `received`: what happened to a file when it is reported.
    verb: &'static str,
    rank: u32,
    multi: MultiProgress,
    total: ProgressBar,
    /// The bars of files cut into several messages, by file index.
    files: Mutex<HashMap<usize, ProgressBar>>,
    done: Mutex<usize>,
    file_count: usize,
    started: Instant,
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template)
        .expect("a valid template")
        .progress_chars("=> ")
}

impl Progress {
    /// Start reporting a push of `manifest` (nothing is drawn unless the
    /// style is `Bars`).
    pub(crate) fn new(style_: Style, verb: &'static str, rank: u32, manifest: &Manifest) -> Self {
        let target = if style_ == Style::Bars {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let multi = MultiProgress::with_draw_target(target);
        let total = multi.add(ProgressBar::new(manifest.total_bytes()));
        total.set_style(style(TOTAL_TEMPLATE));
        total.set_prefix("total");
        total.enable_steady_tick(Duration::from_millis(200));
        let progress = Progress {
            style: style_,
            verb,
            rank,
            multi,
            total,
            files: Mutex::new(HashMap::new()),
            done: Mutex::new(0),
            file_count: manifest.files.len(),
            started: Instant::now(),
        };
        progress.count(0);
        progress
    }

    /// A bar for hashing `bytes` bytes before the push (root), if drawn.
    pub(crate) fn hashing(style_: Style, bytes: u64) -> ProgressBar {
        if style_ != Style::Bars {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::new(bytes);
        bar.set_style(style(TOTAL_TEMPLATE));
        bar.set_prefix("hashing (BLAKE3)");
        bar
    }

    /// Say what the push is waiting for (on the total bar); `None`: show
    /// the count of files done again.
    pub(crate) fn status(&self, text: Option<&str>) {
        match text {
            Some(text) => self.total.set_message(text.to_owned()),
            None => self.count(*self.done.lock().expect("not poisoned")),
        }
    }

    fn count(&self, done: usize) {
        self.total
            .set_message(format!("{done}/{} files", self.file_count));
    }

    /// One message of file bytes went out (root) or was written (receiver).
    pub(crate) fn piece(&self, manifest: &Manifest, piece: &[Segment]) {
        self.total.inc(piece_len(piece));
        // A file sent in several messages gets a bar of its own.
        let chunked = match piece {
            [segment] => manifest.files[segment.file].size > manifest.batch_limit,
            _ => false,
        };
        if chunked {
            let segment = piece[0];
            let entry = &manifest.files[segment.file];
            let mut files = self.files.lock().expect("not poisoned");
            let bar = files.entry(segment.file).or_insert_with(|| {
                let bar = self
                    .multi
                    .insert_before(&self.total, ProgressBar::new(entry.size));
                bar.set_style(style(FILE_TEMPLATE));
                bar.set_prefix(entry.path.clone());
                bar
            });
            bar.inc(segment.len);
            if segment.offset + segment.len == entry.size {
                bar.finish();
            }
        }
    }

    /// File `index` is complete: sent (root), or written and its BLAKE3
    /// checked (receiver).
    pub(crate) fn file_done(&self, manifest: &Manifest, index: usize) {
        let done = {
            let mut done = self.done.lock().expect("not poisoned");
            *done += 1;
            *done
        };
        self.count(done);
        if self.style == Style::Json {
            let entry = &manifest.files[index];
            println!(
                "{}",
                json!({"event": self.verb, "rank": self.rank, "path": entry.path,
                       "size": entry.size, "blake3": entry.blake3,
                       "seconds": self.started.elapsed().as_secs_f64()})
            );
        }
    }

    /// Member `host` (rank `rank`) failed and the push goes on without
    /// it: a line on stderr (above the bars), or a JSON event.
    pub(crate) fn member_failed(&self, host: &str, rank: u32, why: &str) {
        match self.style {
            Style::Bars => self
                .multi
                .suspend(|| member_failed(self.style, self.rank, host, rank, why)),
            _ => member_failed(self.style, self.rank, host, rank, why),
        }
    }

    /// Stop drawing; print the summary: `what` says what happened to the
    /// bytes (`"sent ... and every receiver checked them"`); `failed`
    /// names the members left out of the push (the summary lists them).
    /// `sent_bytes`: at the root, the bytes of files this run sent (less
    /// than the files' when receivers held some).
    pub(crate) fn finish(
        &self,
        manifest: &Manifest,
        what: &str,
        failed: &[String],
        sent_bytes: Option<u64>,
    ) {
        self.total.finish();
        let seconds = self.started.elapsed().as_secs_f64();
        let bytes = manifest.total_bytes();
        let rate = bytes as f64 / seconds.max(1e-9);
        match self.style {
            Style::Json => {
                let mut done = json!({"event": "done", "rank": self.rank,
                    "files": manifest.files.len(), "bytes": bytes, "seconds": seconds,
                    "bytes_per_second": rate, "failed_hosts": failed});
                if let Some(sent) = sent_bytes {
                    done["sent_bytes"] = sent.into();
                }
                println!("{done}");
            }
            Style::Bars | Style::Plain => println!(
                "{what}: {} files, {} in {seconds:.1} s ({}/s)",
                manifest.files.len(),
                human(bytes),
                human(rate as u64)
            ),
        }
    }

    /// Say something that happened: `text` above the bars (or as a line),
    /// `event` with `--json`.
    pub(crate) fn event(&self, text: &str, event: serde_json::Value) {
        match self.style {
            Style::Json => println!("{event}"),
            Style::Bars => self.multi.suspend(|| eprintln!("{text}")),
            Style::Plain => eprintln!("{text}"),
        }
    }

    /// Stop drawing, leaving the bars as they are (before an error).
    pub(crate) fn abandon(&self) {
        self.total.abandon();
        for bar in self.files.lock().expect("not poisoned").values() {
            bar.abandon();
        }
    }
}

/// Member `host` (rank `failed`) failed and the push goes on without it,
/// as member `rank` reports it: a line on stderr, or a JSON event.
pub(crate) fn member_failed(style: Style, rank: u32, host: &str, failed: u32, why: &str) {
    match style {
        Style::Json => println!(
            "{}",
            json!({"event": "member_failed", "rank": rank, "failed_rank": failed,
                   "host": host, "error": why})
        ),
        Style::Bars | Style::Plain => {
            eprintln!("{host} failed ({why}); the push goes on without it");
        }
    }
}

/// Receiver `rank` holds the first `pieces` pieces of the push already,
/// `bytes` of file bytes, checked (kept by a receiver before it that was
/// killed).
pub(crate) fn resumed(style: Style, rank: u32, (pieces, bytes): (usize, u64)) {
    match style {
        Style::Json => println!(
            "{}",
            json!({"event": "resumed", "rank": rank, "pieces_held": pieces, "bytes_held": bytes})
        ),
        Style::Bars | Style::Plain => eprintln!(
            "resuming: the output directory holds the first {pieces} pieces of the push \
             ({}) already, checked (left by a receiver that was cut off)",
            human(bytes)
        ),
    }
}

/// Receiver `rank`'s summary when its output directory already held every
/// entry of the push, identical, so that nothing was sent to it.
pub(crate) fn already_held(style: Style, rank: u32, manifest: &Manifest, out: &std::path::Path) {
    let (files, bytes) = (manifest.files.len(), manifest.total_bytes());
    match style {
        Style::Json => println!(
            "{}",
            json!({"event": "done", "rank": rank, "files": files, "bytes": bytes,
                   "already_held": true, "failed_hosts": []})
        ),
        Style::Bars | Style::Plain => println!(
            "{} already held every file of the push, identical (BLAKE3 checked): \
             {files} files, {}; nothing received",
            out.display(),
            human(bytes)
        ),
    }
}
