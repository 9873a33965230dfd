//! `rdmc push`: the root's side.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail};
use bytes::Bytes;
use tokio::sync::mpsc;
use tracing::Instrument;

use super::inputs::{self, PieceReader, Source};
use super::manifest::{Manifest, Piece};
use super::progress::{Progress, Style};
use super::{Failure, PushArgs, create_group, node_config, prepare_cluster, runtime};
use rdmc_cli::cluster::ClusterSetup;
use rdmc_cli::members::Want;
use rdmc_cli::size::human;

/// Files of at most this size are batched with their neighbours.
const BATCH_LIMIT: u64 = 1 << 20;
/// Messages handed to the group and not yet locally complete; with the
/// reader's queue, this bounds the root's memory to about
/// `(SEND_WINDOW + READ_AHEAD + 1)` messages.
const SEND_WINDOW: usize = 2;
/// Messages read ahead of the sends.
const READ_AHEAD: usize = 2;

/// Check everything, hash every file, then push.
pub(super) fn run(args: &PushArgs) -> Result<(), Failure> {
    let style = Style::pick(args.cluster.json);
    // Everything that can be wrong here is found before anyone is contacted:
    // the command line, the members file, the key, every input.
    let mut cluster = prepare_cluster(&args.cluster, (Want::Rank(0), "rdmc push is rank"))
        .map_err(Failure::from)?;
    if cluster.size < 2 {
        return Err(Failure::from(format!(
            "{} lists no receivers: the pushing host is its first line, receivers follow",
            cluster.origin
        )));
    }
    let prepared = prepare(args, style).map_err(Failure::from)?;
    if args.dry_run {
        dry_run(&cluster, &prepared.manifest, args.cluster.json);
        return Ok(());
    }
    if args.rate == Some(0) {
        return Err(Failure::from(
            "--rate must be at least 1 byte a second".to_owned(),
        ));
    }
    let runtime = runtime().map_err(Failure::from)?;
    runtime.block_on(
        async {
            cluster.join().await?;
            push(&cluster, args, prepared, style).await
        }
        .instrument(tracing::info_span!("push")),
    )
}

/// `--dry-run`: what the push would send, and to how many receivers.
fn dry_run(cluster: &ClusterSetup, manifest: &Manifest, json: bool) {
    let (files, bytes) = (manifest.files.len(), manifest.total_bytes());
    let (dirs, links) = (manifest.dirs.len(), manifest.links.len());
    let messages = 1 + manifest.plan().len();
    let receivers = cluster.size - 1;
    if json {
        println!(
            "{}",
            serde_json::json!({"event": "dry_run", "files": files, "bytes": bytes,
                               "directories": dirs, "links": links, "messages": messages,
                               "receivers": receivers})
        );
    } else {
        println!(
            "rdmc push: dry run: would push {files} files ({}), {dirs} directories and {links} \
             links in {messages} messages to {receivers} receivers; nothing was sent",
            human(bytes)
        );
    }
}

/// The inputs and their manifest.
struct Prepared {
    sources: Arc<Vec<Source>>,
    manifest: Arc<Manifest>,
    manifest_bytes: Bytes,
}

fn prepare(args: &PushArgs, style: Style) -> anyhow::Result<Prepared> {
    let max = args.cluster.max_message_size;
    let found = inputs::collect(&args.paths)?;
    let total: u64 = found.files.iter().map(|s| s.size).sum();
    let bar = Progress::hashing(style, total);
    let manifest = inputs::hash_all(&found, (max, BATCH_LIMIT.min(max)), &|n| bar.inc(n))?;
    bar.finish_and_clear();
    let manifest_bytes = Bytes::from(manifest.to_bytes());
    if manifest_bytes.len() as u64 > max {
        bail!(
            "the manifest of {} files takes {}, more than the largest message, {} \
             (raise --max-message-size on every member)",
            manifest.files.len(),
            human(manifest_bytes.len() as u64),
            human(max)
        );
    }
    Ok(Prepared {
        sources: Arc::new(found.files),
        manifest: Arc::new(manifest),
        manifest_bytes,
    })
}

async fn push(
    cluster: &ClusterSetup,
    args: &PushArgs,
    prepared: Prepared,
    style: Style,
) -> Result<(), Failure> {
    let manifest = prepared.manifest.clone();
    let progress = Progress::new(style, "sent", 0, &manifest);
    let receivers = cluster.size - 1;
    progress.status(Some(&format!("connecting to {receivers} receivers")));
    let outcome = async {
        let node_config = node_config(&args.cluster);
        let node = cluster.start(node_config).await?;
        let outcome = send_all(cluster, &node, args, prepared, &progress).await;
        // Put the last signals on the wire ("closed", or this member's
        // failure) before the process exits.
        node.shutdown().await;
        outcome
    };
    let outcome = tokio::select! {
        outcome = outcome => outcome,
        reason = rdmc_cli::signals::interrupted() => Err(Failure::from(reason)),
        reason = cluster.lost() => Err(Failure::from(reason)),
    };
    match outcome {
        Ok(()) => {
            progress.finish(
                &manifest,
                &format!("pushed to {receivers} receivers, every file's SHA-256 checked by each"),
            );
            Ok(())
        }
        Err(failure) => {
            progress.abandon();
            Err(failure)
        }
    }
}

/// Create the group, send the manifest and every piece, close: `Ok` once
/// every receiver has every file, checked and on disk.
async fn send_all(
    cluster: &ClusterSetup,
    node: &rdmc::Node,
    args: &PushArgs,
    prepared: Prepared,
    progress: &Progress,
) -> Result<(), Failure> {
    let group_failed = |e: rdmc::Error| Failure::of_group(cluster, &e);
    let mut group = create_group(cluster, node, &args.cluster)
        .await?
        .into_sender()
        .map_err(|_| "the pushing member is not first in the member list".to_owned())?;
    progress.status(None);
    group
        .send(prepared.manifest_bytes)
        .await
        .map_err(group_failed)?
        .sent()
        .await
        .map_err(group_failed)?;
    let manifest = prepared.manifest;
    let plan: Arc<Vec<Piece>> = Arc::new(manifest.plan());
    let (tx, mut rx) = mpsc::channel::<anyhow::Result<Bytes>>(READ_AHEAD);
    let reader = {
        let (sources, manifest, plan) = (prepared.sources, manifest.clone(), plan.clone());
        // Files are read on a blocking thread, a few messages ahead.
        tokio::task::spawn_blocking(move || {
            let mut reader = PieceReader::new(&sources, &manifest);
            for piece in plan.iter() {
                let data = reader.read(piece).map(Bytes::from);
                let failed = data.is_err();
                if tx.blocking_send(data).is_err() || failed {
                    return;
                }
            }
        })
    };
    let mut in_flight = VecDeque::new();
    let mut sent_files = 0;
    let (started, mut sent_bytes) = (tokio::time::Instant::now(), 0u64);
    for index in 0..plan.len() {
        // With --rate: each message waits until the bytes before it are
        // within the rate.
        if let Some(rate) = args.rate {
            let due = started + Duration::from_secs_f64(sent_bytes as f64 / rate as f64);
            tokio::select! {
                () = tokio::time::sleep_until(due) => {}
                Err(e) = group.closed() => return Err(group_failed(e)),
            }
        }
        let data = tokio::select! {
            data = rx.recv() => data.ok_or_else(|| "the file reader stopped".to_owned())??,
            // The group's failure as soon as it happens: do not wait for
            // the next file to learn of it.
            Err(e) = group.closed() => return Err(group_failed(e)),
        };
        sent_bytes += data.len() as u64;
        let receipt = group.send(data).await.map_err(group_failed)?;
        in_flight.push_back((index, receipt.sent()));
        if in_flight.len() >= SEND_WINDOW {
            let (index, sending) = in_flight.pop_front().expect("not empty");
            sending.await.map_err(group_failed)?;
            sent_files = report(progress, &manifest, &plan[index], sent_files);
        }
    }
    while let Some((index, sending)) = in_flight.pop_front() {
        sending.await.map_err(group_failed)?;
        sent_files = report(progress, &manifest, &plan[index], sent_files);
    }
    for index in sent_files..manifest.files.len() {
        // Empty files take no message.
        progress.file_done(&manifest, index);
    }
    reader
        .await
        .map_err(|e| anyhow!("the file reader failed: {e}"))?;
    progress.status(Some(&format!(
        "{} files sent; waiting for {} receivers to confirm",
        manifest.files.len(),
        cluster.size - 1
    )));
    group.close().await.map_err(group_failed)
}

/// Report a piece sent, and every file it completed; returns how many
/// files (in manifest order) are complete now.
fn report(progress: &Progress, manifest: &Manifest, piece: &Piece, mut complete: usize) -> usize {
    progress.piece(manifest, piece);
    let last = piece.last().expect("pieces are not empty");
    let through = if last.offset + last.len == manifest.files[last.file].size {
        last.file + 1
    } else {
        last.file
    };
    while complete < through {
        progress.file_done(manifest, complete);
        complete += 1;
    }
    complete
}
