//! `rdmc push`: the root's side.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail};
use bytes::Bytes;
use futures::FutureExt as _;
use futures::future::join_all;
use tokio::sync::mpsc;
use tracing::Instrument;

use super::epochs::{Epoch, data_group};
use super::inputs::{self, PieceReader, Source};
use super::launch::{Launch, Launched};
use super::manifest::{Manifest, Piece};
use super::progress::{Progress, Style};
use super::survey::{self, Opened, Survey, close_control, tell};
use super::sync::{self, FileSet};
use super::{
    Failure, PushArgs, group_config, listed_cluster, node_config, prepare_cluster, runtime,
};
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

/// Check everything, launch the receivers (if asked) while hashing every
/// file, then push.
pub(super) fn run(args: &PushArgs) -> Result<Vec<String>, Failure> {
    let style = Style::pick(args.cluster.json);
    // Everything that can be wrong here is found before anyone is contacted:
    // the command line, the members file, the key, every input.
    let (mut cluster, launch) = match args.hosts.hosts {
        Some(_) => {
            let (launch, listed) = Launch::plan(&args.hosts, &args.cluster)?;
            (
                listed_cluster(&args.cluster, listed, "--hosts")?,
                Some(launch),
            )
        }
        None => (
            prepare_cluster(&args.cluster, (Want::Rank(0), "rdmc push is rank"))?,
            None,
        ),
    };
    if cluster.size < 2 {
        return Err(Failure::from(format!(
            "{} lists no receivers: the pushing host is its first line, receivers follow",
            cluster.origin
        )));
    }
    let found = inputs::collect(&args.paths).map_err(Failure::from)?;
    if found.files.len() > sync::MAX_FILES {
        return Err(Failure::from(format!(
            "{} files: a push carries at most {} (push the trees in parts)",
            found.files.len(),
            sync::MAX_FILES
        )));
    }
    let (max, force) = (args.cluster.max_message_size, args.force);
    let hash = move || prepare(found, max, force, style);
    if args.dry_run {
        let prepared = hash().map_err(Failure::from)?;
        dry_run(&cluster, &prepared.manifest, args.cluster.json);
        return Ok(Vec::new());
    }
    if args.rate == Some(0) {
        return Err(Failure::from(
            "--rate must be at least 1 byte a second".to_owned(),
        ));
    }
    let runtime = runtime().map_err(Failure::from)?;
    let outcome = runtime.block_on(
        async {
            cluster.join().await?;
            // The inputs are hashed while the receivers start and the
            // cluster forms: on a cluster launched over ssh, the time of
            // both is the longer's.
            let hashing = tokio::task::spawn_blocking(hash);
            let mut launched = match launch {
                Some(launch) => Some(launch.start(&args.hosts, &args.cluster).await?),
                None => None,
            };
            if launched.is_some() {
                tracing::info!(receivers = cluster.size - 1, "receivers started over ssh");
            }
            let hashing = async {
                let prepared = match hashing.await {
                    Ok(hashed) => hashed.map_err(Failure::from)?,
                    Err(e) => return Err(Failure::from(anyhow!("hashing the inputs failed: {e}"))),
                };
                let manifest = &prepared.manifest;
                tracing::info!(
                    files = manifest.files.len(),
                    bytes = manifest.total_bytes(),
                    "inputs hashed"
                );
                Ok(prepared)
            };
            let started = tokio::select! {
                started = start_and_hash(&cluster, args, launched.as_mut(), hashing) => started,
                reason = rdmc_cli::signals::interrupted() => Err(Failure::from(reason)),
                reason = cluster.lost() => Err(Failure::from(reason)),
            };
            let outcome = match started {
                Ok(started) => push(&cluster, args, started, style).await,
                Err(failure) => Err(failure),
            };
            if let Some(launched) = launched {
                launched.finish().await;
            }
            outcome
        }
        .instrument(tracing::info_span!("push")),
    );
    // Not waiting for blocking work left behind: the hashing of inputs
    // when the push was interrupted before it ended.
    runtime.shutdown_background();
    outcome
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

/// Hash the inputs `found` into the manifest (blocking): messages of at
/// most `max` bytes, `force` to replace changed files.
fn prepare(
    found: inputs::Collected,
    max: u64,
    force: bool,
    style: Style,
) -> anyhow::Result<Prepared> {
    let total: u64 = found.files.iter().map(|s| s.size).sum();
    let bar = Progress::hashing(style, total);
    let mut manifest = inputs::hash_all(&found, (max, BATCH_LIMIT.min(max)), &|n| bar.inc(n))?;
    manifest.replace = force;
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

/// This member's node, its groups with every receiver open, and the inputs
/// hashed.
type Started = (rdmc::Node, Opened, Prepared);

/// Start this member's node and open its groups with the receivers while
/// `hashing` the inputs; a receiver started over ssh (`launched`) that ends
/// before the cluster formed (ssh refused, no `rdmc` there) fails the push
/// at once, and so does an input that cannot be hashed (the node then
/// leaves).
async fn start_and_hash(
    cluster: &ClusterSetup,
    args: &PushArgs,
    launched: Option<&mut Launched>,
    hashing: impl std::future::Future<Output = Result<Prepared, Failure>>,
) -> Result<Started, Failure> {
    let starting = async {
        let start = cluster.start(node_config(&args.cluster));
        let node = match launched {
            Some(launched) => tokio::select! {
                node = start => node?,
                failure = launched.failed() => return Err(failure),
            },
            None => start.await?,
        };
        tracing::info!("cluster formed");
        match survey::open(cluster, &node, args).await {
            Ok(opened) => Ok((node, opened)),
            Err(failure) => {
                node.shutdown().await;
                Err(failure)
            }
        }
    };
    tokio::pin!(starting, hashing);
    tokio::select! {
        started = &mut starting => {
            let (node, opened) = started?;
            match hashing.await {
                Ok(prepared) => Ok((node, opened, prepared)),
                Err(failure) => {
                    node.shutdown().await;
                    Err(failure)
                }
            }
        }
        prepared = &mut hashing => {
            let prepared = prepared?;
            let (node, opened) = starting.await?;
            Ok((node, opened, prepared))
        }
    }
}

/// Push from `node`; `Ok` names the receivers that failed and were left
/// out (the others have everything).
async fn push(
    cluster: &ClusterSetup,
    args: &PushArgs,
    (node, opened, prepared): Started,
    style: Style,
) -> Result<Vec<String>, Failure> {
    let manifest = prepared.manifest.clone();
    let progress = Progress::new(style, "sent", 0, &manifest);
    let receivers = cluster.size - 1;
    let outcome = async {
        let outcome = send_all(cluster, &node, args, (opened, prepared), &progress).await;
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
        Ok(Pushed {
            failed,
            complete,
            sent_bytes,
        }) => {
            let failed: Vec<String> = failed.iter().map(|&r| describe(cluster, r)).collect();
            let have = receivers - failed.len();
            let sent_to = have - complete.len();
            let mut what = if failed.is_empty() {
                format!("pushed to {receivers} receivers, every file's BLAKE3 checked by each")
            } else {
                format!(
                    "pushed to {have} of {receivers} receivers, every file's BLAKE3 \
                     checked by each of them"
                )
            };
            if !complete.is_empty() {
                if style == Style::Json {
                    let hosts: Vec<String> =
                        complete.iter().map(|&r| describe(cluster, r)).collect();
                    println!(
                        "{}",
                        serde_json::json!({"event": "already_held", "rank": 0, "hosts": hosts})
                    );
                }
                what = if sent_to == 0 {
                    format!(
                        "nothing to send: {} receivers already held every file, identical",
                        complete.len()
                    )
                } else {
                    format!(
                        "{what} ({} already held them: sent nothing)",
                        complete.len()
                    )
                };
            }
            progress.finish(&manifest, &what, &failed, Some(sent_bytes));
            Ok(failed)
        }
        Err(failure) => {
            progress.abandon();
            Err(failure)
        }
    }
}

/// What the push achieved: every receiver in `failed` failed and was left
/// out; every other has every file, checked and on disk (those in
/// `complete` held them before the push and were sent nothing).
pub(super) struct Pushed {
    pub(super) failed: Vec<u32>,
    pub(super) complete: Vec<u32>,
    /// Bytes of files this run sent on the data groups.
    pub(super) sent_bytes: u64,
}

/// Survey the receivers, then run epochs until a data group closes with
/// every receiver still in the push (`Ok`, naming those left out), or none
/// is left, or the root itself fails.
async fn send_all(
    cluster: &ClusterSetup,
    node: &rdmc::Node,
    args: &PushArgs,
    (opened, prepared): (Opened, Prepared),
    progress: &Progress,
) -> Result<Pushed, Failure> {
    let plan = Arc::new(prepared.manifest.plan());
    let files = prepared.manifest.files.len();
    let asked = (
        prepared.manifest_bytes.clone(),
        files,
        1 + plan.len() as u64,
    );
    let Survey {
        mut controls,
        complete,
        taken,
        held,
        failed,
        mut closing,
    } = survey::survey(cluster, opened, asked, progress).await?;
    tracing::info!(holding_all = complete.len(), "receivers surveyed");
    let mut members = vec![0];
    members.extend(controls.keys().filter(|r| !complete.contains(r)));
    // Only the files some receiver of the push lacks are sent.
    let needed = FileSet::lacking(files, members[1..].iter().filter_map(|r| held.get(r)));
    // Receivers cut off in an earlier run hold a prefix of the push: start
    // at the fewest messages any of them holds.
    let resume = members[1..]
        .iter()
        .map(|r| taken.get(r).copied().unwrap_or(1))
        .min()
        .unwrap_or(1);
    let mut epoch = Epoch::first(
        (
            members,
            complete.iter().copied().collect(),
            failed.iter().copied().collect(),
        ),
        resume,
        needed,
    );
    if resume > 1 {
        resumed(cluster, progress, &epoch, &taken);
    }
    let mut sending = Sending {
        prepared,
        plan,
        reported: 0,
        sent_files: 0,
        started: tokio::time::Instant::now(),
        sent_bytes: 0,
    };
    loop {
        announce(&mut controls, &epoch).await;
        // Those that held everything were told so: they need nothing more.
        for rank in &complete {
            if let Some(control) = controls.remove(rank) {
                closing.push(close_control(control));
            }
        }
        if epoch.receivers().next().is_none() {
            if epoch.complete.is_empty() {
                return Err(Failure {
                    message: "every receiver failed".to_owned(),
                    hosts: epoch.failed.iter().map(|&r| describe(cluster, r)).collect(),
                });
            }
            break;
        }
        progress.status(None);
        let ended = run_epoch(cluster, node, args, &epoch, &mut sending, progress).await;
        let (mut suspects, resume) = match ended {
            Ok(()) => break,
            Err(EpochEnd::Fatal(failure)) => return Err(failure),
            Err(EpochEnd::Failed {
                suspects,
                delivered,
                why,
            }) => {
                for &rank in &suspects {
                    note_failed(cluster, progress, rank, &why);
                }
                (suspects, delivered)
            }
        };
        // Receivers whose control group ended meanwhile are gone too.
        for (&rank, control) in &controls {
            if epoch.members.contains(&rank)
                && !suspects.contains(&rank)
                && matches!(control.closed().now_or_never(), Some(Err(_)))
            {
                note_failed(cluster, progress, rank, "its control group failed");
                suspects.insert(rank);
            }
        }
        if !epoch.members.iter().any(|r| suspects.contains(r)) {
            // Nobody left to leave out: going on would fail the same way.
            return Err(Failure::from(format!(
                "the push failed naming receivers already left out ({suspects:?})"
            )));
        }
        epoch = epoch.next(&suspects, resume);
        progress.status(Some(&format!(
            "going on with {} receivers from message {resume}",
            epoch.receivers().count()
        )));
    }
    let manifest = &sending.prepared.manifest;
    // Empty files take no message (and nothing was sent to receivers that
    // held everything, nor files every receiver held).
    skip_to(
        progress,
        manifest,
        &mut sending.sent_files,
        manifest.files.len(),
    );
    // Close the control groups of the receivers in the push: each closes
    // its own when it sees that (its data group closed already); wait for
    // that (briefly), so that none sees the root leave first.
    closing.extend(
        std::mem::take(&mut controls)
            .into_iter()
            .filter(|(rank, _)| epoch.members.contains(rank))
            .map(|(_, control)| close_control(control)),
    );
    join_all(closing).await;
    Ok(Pushed {
        failed: epoch.failed,
        complete: epoch.complete,
        sent_bytes: sending.sent_bytes,
    })
}

/// Say that the push resumes where receivers cut off in an earlier run
/// left off (`taken`: the messages each holds already).
fn resumed(cluster: &ClusterSetup, progress: &Progress, epoch: &Epoch, taken: &BTreeMap<u32, u64>) {
    let held: Vec<(String, u64)> = epoch
        .receivers()
        .filter_map(|r| {
            taken
                .get(&r)
                .map(|&t| (describe(cluster, r), t.saturating_sub(1)))
        })
        .collect();
    let text = format!(
        "resuming at piece {} of the push: the receivers hold the pieces before it, checked",
        epoch.resume - 1
    );
    progress.event(
        &text,
        serde_json::json!({"event": "resumed", "rank": 0, "from_piece": epoch.resume - 1,
                           "pieces_held": held.into_iter().collect::<BTreeMap<_, _>>()}),
    );
}

/// Tell every receiver whose control group is open about `epoch` (those
/// left out learn so from it); a control group that failed is dropped, as
/// are those of receivers left out once told.
async fn announce(controls: &mut BTreeMap<u32, rdmc::Sender>, epoch: &Epoch) {
    tell(controls, Bytes::from(epoch.to_bytes())).await;
    controls.retain(|rank, _| epoch.members.contains(rank) || epoch.complete.contains(rank));
}

fn describe(cluster: &ClusterSetup, rank: u32) -> String {
    cluster.describe(rdmc::NodeId(rank))
}

/// Say (on the progress display) that receiver `rank` failed and why.
fn note_failed(cluster: &ClusterSetup, progress: &Progress, rank: u32, why: &str) {
    progress.member_failed(&describe(cluster, rank), rank, why);
}

/// The push's state across epochs.
struct Sending {
    prepared: Prepared,
    /// The messages of file bytes after the manifest.
    plan: Arc<Vec<Piece>>,
    /// Pieces reported on the progress display (each once, whatever the
    /// epochs).
    reported: usize,
    /// Files complete on the display, in manifest order.
    sent_files: usize,
    /// For `--rate`: when the push began and the bytes sent since.
    started: tokio::time::Instant,
    sent_bytes: u64,
}

impl Sending {
    /// The messages `epoch` sends, by index in the push: from its first,
    /// those carrying a file some receiver lacks.
    fn messages(&self, epoch: &Epoch) -> Vec<u64> {
        let mut sent = sync::messages(&self.plan, &epoch.needed);
        sent.retain(|&index| index >= epoch.resume);
        sent
    }
}

/// Why an epoch ended without its data group closing.
enum EpochEnd {
    /// Receivers failed: `suspects` leave the push; every member took the
    /// messages before `delivered`.
    Failed {
        suspects: BTreeSet<u32>,
        delivered: u64,
        why: String,
    },
    /// The push cannot go on.
    Fatal(Failure),
}

/// Whether a data group's error leaves the push able to go on without
/// some receivers: those it names.
fn receivers_named(error: &rdmc::Error) -> Option<BTreeSet<u32>> {
    match error {
        rdmc::Error::GroupFailed {
            suspect: Some(node),
            ..
        } if node.0 != 0 => Some(BTreeSet::from([node.0])),
        rdmc::Error::CreateTimedOut { missing, .. }
            if !missing.is_empty() && missing.iter().all(|n| n.0 != 0) =>
        {
            Some(missing.iter().map(|n| n.0).collect())
        }
        _ => None,
    }
}

/// Create the epoch's data group, send from its first message on, close:
/// `Ok` once every member has every file, checked and on disk.
async fn run_epoch(
    cluster: &ClusterSetup,
    node: &rdmc::Node,
    args: &PushArgs,
    epoch: &Epoch,
    sending: &mut Sending,
    progress: &Progress,
) -> Result<(), EpochEnd> {
    // Every member took each message whose `delivered` came back: counted
    // in order, from the epoch's first, up to the first that failed.
    let (deliveries, mut to_count) = mpsc::unbounded_channel::<rdmc::Delivered>();
    let counter = tokio::spawn(async move {
        let mut delivered = 0;
        while let Some(delivery) = to_count.recv().await {
            if delivery.await.is_err() {
                break;
            }
            delivered += 1;
        }
        delivered
    });
    let sent = sending.messages(epoch);
    let outcome = send_epoch(node, args, epoch, sending, progress, deliveries).await;
    // The group failed or closed: every `delivered` has its answer. The
    // next epoch starts at the first message not delivered (or past the
    // last: none is left to send).
    let delivered = counter.await.unwrap_or(0);
    let total = 1 + sending.plan.len() as u64;
    let delivered = sent.get(delivered).copied().unwrap_or(total);
    outcome.map_err(|error| match error {
        Stop::Group(error) => match receivers_named(&error) {
            Some(suspects) => EpochEnd::Failed {
                suspects,
                delivered,
                why: error.to_string(),
            },
            None => EpochEnd::Fatal(Failure::of_group(cluster, &error)),
        },
        Stop::Here(failure) => EpochEnd::Fatal(failure),
    })
}

/// What stopped an epoch's sends.
enum Stop {
    /// The data group's error.
    Group(rdmc::Error),
    /// An error of this host (reading the files).
    Here(Failure),
}

impl From<rdmc::Error> for Stop {
    fn from(error: rdmc::Error) -> Self {
        Stop::Group(error)
    }
}

impl From<Failure> for Stop {
    fn from(failure: Failure) -> Self {
        Stop::Here(failure)
    }
}

async fn send_epoch(
    node: &rdmc::Node,
    args: &PushArgs,
    epoch: &Epoch,
    sending: &mut Sending,
    progress: &Progress,
    deliveries: mpsc::UnboundedSender<rdmc::Delivered>,
) -> Result<(), Stop> {
    let mut group = node
        .create_group(
            data_group(epoch.number),
            &epoch.ids(),
            group_config(&args.cluster),
        )
        .await?
        .into_sender()
        .map_err(|_| {
            Failure::from("the pushing member is not first in the member list".to_owned())
        })?;
    let manifest = sending.prepared.manifest.clone();
    let plan = sending.plan.clone();
    // Message 0 is the manifest (it went on the control groups), message i
    // the plan's piece i - 1.
    let sent = sending.messages(epoch);
    let (tx, mut rx) = mpsc::channel::<anyhow::Result<Bytes>>(READ_AHEAD);
    let reader = {
        let (sources, manifest, plan, sent) = (
            sending.prepared.sources.clone(),
            manifest.clone(),
            plan.clone(),
            sent.clone(),
        );
        // Files are read on a blocking thread, a few messages ahead.
        tokio::task::spawn_blocking(move || {
            let mut reader = PieceReader::new(&sources, &manifest);
            let mut next = None;
            for index in sent {
                let piece = &plan[index as usize - 1];
                // After messages not sent: go on from this one.
                let data = match next == Some(index) {
                    true => Ok(()),
                    false => reader.resume_at(piece),
                };
                let data = data.and_then(|()| reader.read(piece)).map(Bytes::from);
                next = Some(index + 1);
                let failed = data.is_err();
                if tx.blocking_send(data).is_err() || failed {
                    return;
                }
            }
        })
    };
    let mut in_flight = VecDeque::new();
    for index in sent {
        // With --rate: each message waits until the bytes before it are
        // within the rate.
        if let Some(rate) = args.rate {
            let due =
                sending.started + Duration::from_secs_f64(sending.sent_bytes as f64 / rate as f64);
            tokio::select! {
                () = tokio::time::sleep_until(due) => {}
                Err(e) = group.closed() => return Err(e.into()),
            }
        }
        let data = tokio::select! {
            data = rx.recv() => data
                .ok_or_else(|| Failure::from("the file reader stopped".to_owned()))?
                .map_err(Failure::from)?,
            // The group's failure as soon as it happens: do not wait for
            // the next file to learn of it.
            Err(e) = group.closed() => return Err(e.into()),
        };
        sending.sent_bytes += data.len() as u64;
        let (sent, delivered) = group.send(data).await?.split();
        let _ = deliveries.send(delivered);
        in_flight.push_back((index, sent));
        if in_flight.len() >= SEND_WINDOW {
            let (index, sent) = in_flight.pop_front().expect("not empty");
            log_sent(index, &sent.await?);
            report(progress, sending, &plan, index);
        }
    }
    while let Some((index, sent)) = in_flight.pop_front() {
        log_sent(index, &sent.await?);
        report(progress, sending, &plan, index);
    }
    drop(rx);
    reader
        .await
        .map_err(|e| Failure::from(anyhow!("the file reader failed: {e}")))?;
    progress.status(Some(&format!(
        "{} files sent; waiting for {} receivers to confirm",
        manifest.files.len(),
        epoch.receivers().count()
    )));
    group.close().await?;
    Ok(())
}

/// Log where the root's time went while it sent message `index`.
fn log_sent(index: u64, t: &rdmc::MessageTimings) {
    tracing::debug!(
        index,
        setup_us = t.setup.as_micros() as u64,
        transferring_us = t.transferring.as_micros() as u64,
        waiting_us = t.waiting.as_micros() as u64,
        total_us = t.total.as_micros() as u64,
        "message sent"
    );
}

/// Report message `index` sent (the manifest: nothing), and every file it
/// completed, unless an earlier epoch did.
fn report(progress: &Progress, sending: &mut Sending, plan: &[Piece], index: u64) {
    let Some(piece) = index.checked_sub(1).map(|i| i as usize) else {
        return;
    };
    if piece < sending.reported {
        return;
    }
    sending.reported = piece + 1;
    let manifest = &sending.prepared.manifest;
    // The files before this piece's that were not sent: none is reported
    // sent (but the empty ones, which take no message).
    skip_to(
        progress,
        manifest,
        &mut sending.sent_files,
        plan[piece][0].file,
    );
    sending.sent_files = report_piece(progress, manifest, &plan[piece], sending.sent_files);
}

/// Move the files complete on the display (`done`, in manifest order) on to
/// `to`, reporting the empty files passed (they take no message) and none
/// of the others (they were not sent: every receiver held them).
fn skip_to(progress: &Progress, manifest: &Manifest, done: &mut usize, to: usize) {
    while *done < to {
        if manifest.files[*done].size == 0 {
            progress.file_done(manifest, *done);
        }
        *done += 1;
    }
}

/// Report a piece sent, and every file it completed; returns how many
/// files (in manifest order) are complete now.
fn report_piece(
    progress: &Progress,
    manifest: &Manifest,
    piece: &Piece,
    mut complete: usize,
) -> usize {
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
