//! `rdmc receive`: a receiver's side.
//!
//! The async side takes each message from the group's stream and hands it
//! to a blocking writer thread ([`write_push`]) through a short queue; the
//! writer parses the manifest, writes and checks every file, and commits
//! them. Only then does the receiver close the group: its close is its
//! statement that every file is on disk, checked.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow, bail};
use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::mpsc;
use tracing::Instrument;

use super::manifest::Manifest;
use super::output::{Staging, leftover_staging};
use super::progress::{Progress, Style};
use super::{Failure, ReceiveArgs, create_group, node_config, prepare_cluster, runtime};
use rdmc_cli::cluster::{ClusterSetup, check_output_dir};
use rdmc_cli::members::Want;

/// Messages received and not yet written.
const WRITE_QUEUE: usize = 2;

/// Check everything, then receive: this receiver's rank (once known) and the outcome.
pub(super) fn run(args: &ReceiveArgs) -> (Option<u32>, Result<(), Failure>) {
    let mut cluster = match check(args) {
        Ok(cluster) => cluster,
        Err(e) => return (args.me, Err(e.into())),
    };
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(e) => return (args.me, Err(e.into())),
    };
    let outcome = runtime.block_on(async {
        cluster.join().await?;
        let span = tracing::info_span!("receive", rank = cluster.rank);
        let style = Style::pick(args.cluster.json);
        async {
            tokio::select! {
                outcome = receive(&cluster, args, style) => outcome,
                reason = rdmc_cli::signals::interrupted() => Err(Failure::from(reason)),
                reason = cluster.lost() => Err(Failure::from(reason)),
            }
        }
        .instrument(span)
        .await
    });
    (cluster.rank_known().then_some(cluster.rank), outcome)
}

/// Check the command line, the cluster and the output directory.
fn check(args: &ReceiveArgs) -> anyhow::Result<ClusterSetup> {
    if args.me == Some(0) {
        bail!("rank 0 is the pushing host (it runs `rdmc push`); give --me 1 or more");
    }
    let want = args.me.map_or(Want::Receiver, Want::Rank);
    let cluster = prepare_cluster(&args.cluster, (want, "--me"))?;
    if cluster.rank_known() && cluster.rank == 0 {
        bail!(
            "{} makes this process rank 0, the pushing host: run `rdmc push` there",
            cluster.origin
        );
    }
    check_output_dir(&args.out).map_err(anyhow::Error::msg)?;
    let who = match cluster.rank_known() {
        true => format!("rdmc receive {}", cluster.rank),
        false => "rdmc receive".to_owned(),
    };
    for name in leftover_staging(&args.out) {
        eprintln!(
            "{who}: note: {} holds {name}, the partial files of a receiver \
             that was killed (or of one still running there); remove it when none is",
            args.out.display()
        );
    }
    Ok(cluster)
}

async fn receive(cluster: &ClusterSetup, args: &ReceiveArgs, style: Style) -> Result<(), Failure> {
    let node_config = node_config(&args.cluster);
    let node = cluster.start(node_config).await?;
    let outcome = receive_all(cluster, &node, args, style).await;
    // Put the last signals on the wire (this member's acknowledgement or
    // failure) before the process exits.
    node.shutdown().await;
    outcome
}

async fn receive_all(
    cluster: &ClusterSetup,
    node: &rdmc::Node,
    args: &ReceiveArgs,
    style: Style,
) -> Result<(), Failure> {
    let group_failed = |e: rdmc::Error| Failure::of_group(cluster, &e);
    let mut group = create_group(cluster, node, &args.cluster)
        .await?
        .into_receiver()
        .map_err(|_| "a receiving member is first in the member list".to_owned())?;
    let (tx, rx) = mpsc::channel(WRITE_QUEUE);
    let writer = {
        let (out, rank) = (args.out.clone(), cluster.rank);
        tokio::task::spawn_blocking(move || write_push(&out, rx, style, rank))
    };
    let mut failure = None;
    while let Some(message) = group.next().await {
        match message {
            Ok(message) => {
                if tx.send(message.data).await.is_err() {
                    // The writer stopped: its error says why.
                    break;
                }
            }
            Err(e) => {
                failure = Some(group_failed(e));
                break;
            }
        }
    }
    // The end of the queue tells the writer the push is complete (or cut
    // short: then it removes what it wrote).
    drop(tx);
    let written = writer
        .await
        .map_err(|e| anyhow!("the file writer failed: {e}"))?;
    if let Some(failure) = failure {
        // The group's failure, not the writer's "ended early", is the cause.
        return Err(failure);
    }
    let (manifest, progress) = written?;
    group.close().await.map_err(group_failed)?;
    progress.finish(
        &manifest,
        &format!(
            "received into {}, every file's SHA-256 checked, and every receiver has it",
            args.out.display()
        ),
    );
    Ok(())
}

/// The writer: the first message is the manifest, then each piece of its
/// plan; commit once the queue ends after the last. On any error (or a
/// queue that ends early) everything written is removed.
fn write_push(
    out: &Path,
    mut rx: mpsc::Receiver<Bytes>,
    style: Style,
    rank: u32,
) -> anyhow::Result<(Manifest, Progress)> {
    let first = rx
        .blocking_recv()
        .context("the push ended before its manifest came")?;
    let manifest = Manifest::from_bytes(&first)?;
    let progress = Progress::new(style, "received", rank, &manifest);
    let outcome = write_files(out.to_path_buf(), manifest.clone(), &mut rx, &progress);
    if outcome.is_err() {
        progress.abandon();
    }
    outcome.map(|()| (manifest, progress))
}

fn write_files(
    out: PathBuf,
    manifest: Manifest,
    rx: &mut mpsc::Receiver<Bytes>,
    progress: &Progress,
) -> anyhow::Result<()> {
    let plan = manifest.plan();
    let mut staging = Staging::begin(&out, manifest)?;
    for index in 0..staging.manifest().files.len() {
        if staging.manifest().files[index].size == 0 {
            progress.file_done(staging.manifest(), index);
        }
    }
    for (i, piece) in plan.iter().enumerate() {
        let data = rx.blocking_recv().ok_or_else(|| {
            anyhow!(
                "the push ended after {i} of its {} messages of file bytes",
                plan.len()
            )
        })?;
        let done = staging.write_piece(piece, &data)?;
        progress.piece(staging.manifest(), piece);
        for index in done {
            progress.file_done(staging.manifest(), index);
        }
    }
    if rx.blocking_recv().is_some() {
        bail!("the push sent more messages than its manifest plans");
    }
    staging.commit()
}
