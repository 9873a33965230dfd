//! `rdmc receive`: a receiver's side.
//!
//! The async side takes each message from the group's stream and hands it
//! to a blocking writer thread ([`write_push`]) through a short queue; the
//! writer writes and checks every file this receiver lacks (those its
//! output directory holds intact already are neither sent for it nor
//! touched: see [`super::sync`]), and commits them. Only then does the receiver close the group: its close is its
//! statement that every file is on disk, checked.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{anyhow, bail};
use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::mpsc;
use tracing::Instrument;

use super::epochs::{
    Epoch, Next, Report, control_config, control_group, control_members, data_group, place,
    report_group, report_members,
};
use super::manifest::{Manifest, piece_len};
use super::output::{Staging, held_files, holds_all, leftover_staging};
use super::progress;
use super::progress::{Progress, Style};
use super::survey::CLOSE_WAIT;
use super::sync::{self, FileSet};
use super::{
    Failure, ReceiveArgs, group_config, listed_cluster, node_config, prepare_cluster, runtime,
};
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
    let cluster = if args.cluster_from_stdin {
        let listed = super::launch::read_launch_line()?;
        listed_cluster(&args.cluster, listed, "the cluster from standard input")?
    } else {
        let want = args.me.map_or(Want::Receiver, Want::Rank);
        prepare_cluster(&args.cluster, (want, "--me"))?
    };
    if cluster.rank_known() && cluster.rank == 0 {
        bail!(
            "{} makes this process rank 0, the pushing host: run `rdmc push` there",
            cluster.origin
        );
    }
    check_output_dir(&args.out)?;
    let who = match cluster.rank_known() {
        true => format!("rdmc receive {}", cluster.rank),
        false => "rdmc receive".to_owned(),
    };
    for name in leftover_staging(&args.out) {
        eprintln!(
            "{who}: note: {} holds {name}, the partial files of a receiver \
             that was killed (or of one still running there); the same push run \
             again resumes from them, remove it otherwise",
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
    let rank = cluster.rank;
    let config = || control_config(args.cluster.max_message_size);
    let opened = futures::future::try_join(
        node.create_group(control_group(rank), &control_members(rank), config()),
        node.create_group(report_group(rank), &report_members(rank), config()),
    )
    .await
    .map_err(|e| Failure::of_group(cluster, &e))?;
    let (Ok(mut control), Ok(report)) = (opened.0.into_receiver(), opened.1.into_sender()) else {
        return Err(Failure::from(
            "this receiver is first in the member list".to_owned(),
        ));
    };
    let mut state = Receiving {
        cluster,
        node,
        args,
        style,
        feed: None,
        writer: None,
        written: None,
        taken: 0,
        failed: BTreeSet::new(),
        manifest: None,
        reporting: None,
    };
    let outcome = state.run(&mut control, report).await;
    let already = matches!(outcome, Ok(Held::Already));
    // The end of the queue tells the writer the push is complete (or cut
    // short: then it removes what it wrote).
    let written = state.finish_writing().await;
    // The group's failure, not the writer's "ended early", is the cause.
    outcome?;
    if !already {
        written?;
    }
    // The root closes the control groups once the data group closed (or,
    // for a receiver that held everything, once it told it so); this member
    // closes its own after that (the root waits for it, briefly), so that
    // neither sees the other leave first.
    let _ = tokio::time::timeout(CLOSE_WAIT, async {
        while let Some(message) = control.next().await {
            if message.is_err() {
                return;
            }
        }
        let _ = control.close().await;
    })
    .await;
    if let Some(reporting) = state.reporting.take() {
        let _ = reporting.await;
    }
    if already {
        let manifest = state.manifest.as_ref().expect("the manifest came");
        progress::already_held(style, rank, manifest, &args.out);
        return Ok(());
    }
    let (manifest, progress) = state
        .written
        .take()
        .expect("the writer ended")
        .expect("the writer succeeded");
    progress.finish(
        &manifest,
        &format!(
            "received into {}, every file's BLAKE3 checked, and every receiver in the push has it",
            args.out.display()
        ),
        &[],
        None,
    );
    Ok(())
}

/// How a receiver's push ended well.
enum Held {
    /// It received every file.
    Received,
    /// Its output directory held every entry already: it received nothing.
    Already,
}

/// A receiver's push across epochs.
struct Receiving<'a> {
    cluster: &'a ClusterSetup,
    node: &'a rdmc::Node,
    args: &'a ReceiveArgs,
    style: Style,
    /// The writer's queue (each message with its piece's index in the
    /// plan), until the last message was handed to it.
    feed: Option<mpsc::Sender<(usize, Bytes)>>,
    writer: Option<tokio::task::JoinHandle<anyhow::Result<(Manifest, Progress)>>>,
    /// The writer's outcome, once it ended.
    written: Option<anyhow::Result<(Manifest, Progress)>>,
    /// The messages of the push before this one are handed to the writer
    /// (or not sent: no receiver lacks their files).
    taken: u64,
    /// Receivers left out of the push, as reported here.
    failed: BTreeSet<u32>,
    /// The push's manifest, once it came.
    manifest: Option<Manifest>,
    /// The answer to the manifest being sent, and the report group closed.
    reporting: Option<tokio::task::JoinHandle<()>>,
}

/// How an epoch ended at a receiver.
enum EpochEnd {
    /// The data group closed: this receiver has everything.
    Complete,
    /// The root announced the next epoch.
    Next(Epoch),
    /// The data group failed.
    Failed(rdmc::Error),
}

impl Receiving<'_> {
    fn group_failed(&self, error: &rdmc::Error) -> Failure {
        Failure::of_group(self.cluster, error)
    }

    /// The manifest, this receiver's answer, then every epoch the root
    /// announces, until one completes here (or says that this receiver
    /// held everything already).
    async fn run(
        &mut self,
        control: &mut rdmc::Receiver,
        reports: rdmc::Sender,
    ) -> Result<Held, Failure> {
        // Waits on the control group bound only by the root's liveness: a
        // root that fails or leaves fails the group.
        let manifest_bytes = match control.next().await {
            Some(Ok(message)) => message.data,
            Some(Err(error)) => return Err(self.group_failed(&error)),
            None => {
                return Err(Failure::from(
                    "the pushing host sent no manifest".to_owned(),
                ));
            }
        };
        let manifest = Manifest::from_bytes(&manifest_bytes).map_err(Failure::from)?;
        tracing::info!(files = manifest.files.len(), "manifest received");
        // Check what the output directory holds (hashing it: blocking).
        let staged = {
            let (out, manifest) = (self.args.out.clone(), manifest.clone());
            tokio::task::spawn_blocking(move || stage(&out, manifest))
                .await
                .map_err(|e| Failure::from(anyhow!("checking the output directory: {e}")))?
                .map_err(Failure::from)?
        };
        self.manifest = Some(manifest);
        tracing::info!(holds_all = staged.is_none(), "output directory checked");
        let report = match staged {
            None => Report {
                holds_all: true,
                taken: 0,
                held: FileSet::default(),
            },
            Some((staging, held)) => {
                if held > 0 {
                    let plan = staging.manifest().plan();
                    let bytes = plan[..held].iter().map(|p| piece_len(p)).sum();
                    progress::resumed(self.style, self.cluster.rank, (held, bytes));
                }
                let files = staging.held().clone();
                self.start_writer(staging, held);
                Report {
                    holds_all: false,
                    taken: self.taken,
                    held: files,
                }
            }
        };
        self.reporting = Some(tokio::spawn(answer(reports, report)));
        let mut epoch = self.next_epoch(control, None).await?;
        loop {
            self.report_failed(&epoch);
            if epoch.complete.contains(&self.cluster.rank) {
                return Ok(Held::Already);
            }
            if !epoch.members.contains(&self.cluster.rank) {
                return Err(Failure::from(
                    "the pushing host left this receiver out of the push: it saw it fail"
                        .to_owned(),
                ));
            }
            let create = self.node.create_group(
                data_group(epoch.number),
                &epoch.ids(),
                group_config(&self.args.cluster),
            );
            let created = tokio::select! {
                created = create => created,
                next = self.next_epoch(control, None) => {
                    epoch = next?;
                    continue;
                }
            };
            let end = match created {
                Ok(group) => {
                    let group = group
                        .into_receiver()
                        .map_err(|_| "a receiving member is first in the member list".to_owned())?;
                    self.pump(group, &epoch, control).await?
                }
                Err(error) => EpochEnd::Failed(error),
            };
            epoch = match end {
                EpochEnd::Complete => return Ok(Held::Received),
                EpochEnd::Next(next) => next,
                EpochEnd::Failed(error) => {
                    // This member's own failure ends its push; another's
                    // is the root's to handle: it says how to go on.
                    let own = !matches!(
                        &error,
                        rdmc::Error::GroupFailed { suspect: Some(node), .. }
                            if node.0 != self.cluster.rank
                    ) && !matches!(&error, rdmc::Error::CreateTimedOut { .. });
                    if own {
                        return Err(self.group_failed(&error));
                    }
                    self.next_epoch(control, Some(&error)).await?
                }
            };
        }
    }

    /// The root's next epoch from the control group; `after`: the data
    /// group's failure, which stands as the error if none comes.
    async fn next_epoch(
        &self,
        control: &mut rdmc::Receiver,
        after: Option<&rdmc::Error>,
    ) -> Result<Epoch, Failure> {
        let cause = |why: String| match after {
            Some(error) => {
                let mut failure = self.group_failed(error);
                failure.message.push_str(&format!("; {why}"));
                failure
            }
            None => Failure::from(why),
        };
        // The root may take a while (it waits for every receiver's answer,
        // or for a failure to be detected): as long as it lives, its control
        // group stands.
        match control.next().await {
            Some(Ok(message)) => {
                Epoch::from_bytes(&message.data).map_err(|e| cause(format!("{e:#}")))
            }
            Some(Err(error)) => Err(match after {
                Some(_) => cause(format!("and then {}", self.group_failed(&error).message)),
                None => self.group_failed(&error),
            }),
            None => Err(cause("the pushing host ended the push".to_owned())),
        }
    }

    /// Name each receiver the root left out, once.
    fn report_failed(&mut self, epoch: &Epoch) {
        for &failed in &epoch.failed {
            if failed != self.cluster.rank && self.failed.insert(failed) {
                progress::member_failed(
                    self.style,
                    self.cluster.rank,
                    &self.cluster.describe(rdmc::NodeId(failed)),
                    failed,
                    "the pushing host left it out",
                );
            }
        }
    }

    /// Take the epoch's messages (skipping those this receiver has), then
    /// close once the root closed: `Complete` when every member closed.
    async fn pump(
        &mut self,
        mut group: rdmc::Receiver,
        epoch: &Epoch,
        control: &mut rdmc::Receiver,
    ) -> Result<EpochEnd, Failure> {
        // The messages this epoch sends, in order.
        let sent = {
            let manifest = self.manifest.as_ref().expect("the manifest came");
            epoch
                .needed
                .check(manifest.files.len())
                .map_err(|e| Failure::from(e.context("the pushing host's epoch")))?;
            sync::messages(&manifest.plan(), &epoch.needed)
        };
        let mut order = sent.iter().copied().filter(|&i| i >= epoch.resume);
        loop {
            let message = tokio::select! {
                message = group.next() => message,
                next = self.next_epoch(control, None) => return Ok(EpochEnd::Next(next?)),
            };
            match message {
                Some(Ok(message)) => {
                    let index = order.next().ok_or_else(|| {
                        Failure::from("the push sent more messages than it announced".to_owned())
                    })?;
                    let t = &message.timings;
                    tracing::debug!(
                        index,
                        bytes = message.data.len(),
                        setup_us = t.setup.as_micros() as u64,
                        copy_us = t.copy.as_micros() as u64,
                        transferring_us = t.transferring.as_micros() as u64,
                        waiting_us = t.waiting.as_micros() as u64,
                        total_us = t.total.as_micros() as u64,
                        "message received"
                    );
                    let next = place(index, self.taken, &sent).map_err(Failure::from)?;
                    if next == Next::Skip {
                        continue;
                    }
                    self.hand_on(index, message.data).await?;
                }
                Some(Err(error)) => return Ok(EpochEnd::Failed(error)),
                None => break,
            }
        }
        // The root sent everything: commit, then say so by closing.
        if let Err(e) = self.finish_writing().await {
            return Err(Failure::from(e));
        }
        let closed = tokio::select! {
            closed = group.close() => closed,
            next = control.next() => match next {
                Some(Ok(message)) => {
                    let next = Epoch::from_bytes(&message.data).map_err(Failure::from)?;
                    return Ok(EpochEnd::Next(next));
                }
                // The root ends the control groups once the data group
                // closed (or fails): the close says which.
                Some(Err(_)) | None => group.close().await,
            },
        };
        Ok(match closed {
            Ok(()) => EpochEnd::Complete,
            Err(error) => EpochEnd::Failed(error),
        })
    }

    /// Start the writer on `staging`, which holds the first `held` pieces:
    /// this receiver has taken the manifest and those.
    fn start_writer(&mut self, staging: Staging, held: usize) {
        let (tx, rx) = mpsc::channel(WRITE_QUEUE);
        let (style, rank) = (self.style, self.cluster.rank);
        self.writer = Some(tokio::task::spawn_blocking(move || {
            write_push(staging, held, rx, style, rank)
        }));
        self.feed = Some(tx);
        self.taken = 1 + held as u64;
    }

    /// Hand message `index` of the push to the writer.
    async fn hand_on(&mut self, index: u64, data: Bytes) -> Result<(), Failure> {
        let piece = index as usize - 1;
        let handed = match &self.feed {
            Some(feed) => feed.send((piece, data)).await.is_ok(),
            None => false,
        };
        if !handed {
            // The writer stopped: its error says why.
            self.finish_writing().await?;
            return Err(Failure::from(
                "the file writer took no more messages".to_owned(),
            ));
        }
        self.taken = index + 1;
        Ok(())
    }

    /// End the writer's queue and wait for its outcome (once; after that,
    /// the same outcome again); `Ok` if none was started.
    async fn finish_writing(&mut self) -> anyhow::Result<()> {
        self.feed = None;
        if let Some(writer) = self.writer.take() {
            self.written = Some(
                writer
                    .await
                    .map_err(|e| anyhow!("the file writer failed: {e}"))
                    .and_then(|written| written),
            );
        }
        match self.written.as_ref() {
            // None: no writer was started (the push ended before it).
            None | Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(anyhow!("{e:#}")),
        }
    }
}

/// What the output directory holds of `manifest`: `None` if every entry,
/// identical; otherwise the staging to write the rest into (knowing which
/// files the output directory holds intact) and how many pieces of the
/// plan it holds already (left by a receiver of the same push that was
/// killed). Blocking.
fn stage(out: &Path, manifest: Manifest) -> anyhow::Result<Option<(Staging, usize)>> {
    let held = held_files(out, &manifest);
    if holds_all(out, &manifest, &held) {
        return Ok(None);
    }
    Staging::resume(out, manifest, held).map(Some)
}

/// The writer: each piece of the plan after the `held` ones that the push
/// sends; commit once the queue ends. On any error (or a queue that ends
/// before every file this receiver lacks came) everything written is
/// removed.
fn write_push(
    staging: Staging,
    held: usize,
    mut rx: mpsc::Receiver<(usize, Bytes)>,
    style: Style,
    rank: u32,
) -> anyhow::Result<(Manifest, Progress)> {
    let manifest = staging.manifest().clone();
    let progress = Progress::new(style, "received", rank, &manifest);
    let outcome = write_files(staging, held, &mut rx, &progress);
    if outcome.is_err() {
        progress.abandon();
    }
    outcome.map(|()| (manifest, progress))
}

fn write_files(
    mut staging: Staging,
    held: usize,
    rx: &mut mpsc::Receiver<(usize, Bytes)>,
    progress: &Progress,
) -> anyhow::Result<()> {
    let plan = staging.manifest().plan();
    let manifest = staging.manifest().clone();
    // Files the output directory holds intact are not received again.
    let lacked = |index: usize| !staging.held().contains(index);
    for index in 0..manifest.files.len() {
        if manifest.files[index].size == 0 && lacked(index) {
            progress.file_done(&manifest, index);
        }
    }
    // The pieces kept from an earlier run: their files are checked already.
    for piece in &plan[..held] {
        progress.piece(&manifest, piece);
        for s in piece {
            if s.offset + s.len == manifest.files[s.file].size && lacked(s.file) {
                progress.file_done(&manifest, s.file);
            }
        }
    }
    // The pieces sent, in order (those carrying only files every receiver
    // holds are not); the commit checks that every file lacked here came.
    let mut next = held;
    while let Some((i, data)) = rx.blocking_recv() {
        let Some(piece) = plan.get(i).filter(|_| i >= next) else {
            bail!("the push sent message {} out of its plan's order", i + 1);
        };
        next = i + 1;
        let done = staging.write_piece(piece, &data)?;
        progress.piece(&manifest, piece);
        for index in done {
            progress.file_done(&manifest, index);
        }
    }
    tracing::info!("every piece written");
    staging.commit()?;
    tracing::info!("files flushed and in place");
    Ok(())
}

/// Send `report` on the report group, then close it (the root closes its
/// side after reading it).
async fn answer(mut group: rdmc::Sender, report: Report) {
    if let Ok(receipt) = group.send(Bytes::from(report.to_bytes())).await {
        let _ = receipt.sent().await;
    }
    let _ = tokio::time::timeout(CLOSE_WAIT, group.close()).await;
}
