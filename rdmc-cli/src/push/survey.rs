//! The root's first step: open a control and a report group with every
//! receiver, send each the manifest, and hear which already hold
//! everything, and which files each of the others holds (see
//! [`super::epochs`], [`super::sync`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use futures::future::join_all;
use tokio::task::JoinHandle;

use super::epochs::{
    Report, control_config, control_group, control_members, report_group, report_members,
};
use super::progress::Progress;
use super::sync::FileSet;
use super::{Failure, PushArgs};
use rdmc_cli::cluster::ClusterSetup;

/// How long the root and the receivers wait for the other side to close a
/// control or report group once it has served.
pub(super) const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// The receivers as the survey found them.
pub(super) struct Survey {
    /// The control group of every receiver still reachable.
    pub(super) controls: BTreeMap<u32, rdmc::Sender>,
    /// Receivers that hold every entry already.
    pub(super) complete: BTreeSet<u32>,
    /// How many messages of the push each other receiver holds already
    /// (kept from an earlier run that was cut short).
    pub(super) taken: BTreeMap<u32, u64>,
    /// The files each other receiver holds intact already.
    pub(super) held: BTreeMap<u32, FileSet>,
    /// Receivers that failed (each reported on `progress`).
    pub(super) failed: BTreeSet<u32>,
    /// The report groups being closed.
    pub(super) closing: Vec<JoinHandle<()>>,
}

/// The control and report group of every receiver, opened before the
/// manifest is ready (while the root hashes the inputs).
pub(super) struct Opened {
    controls: BTreeMap<u32, rdmc::Sender>,
    reports: BTreeMap<u32, rdmc::Receiver>,
    /// Receivers whose groups could not be opened, and why.
    failed: Vec<(u32, String)>,
}

/// Open the control and report group of every receiver: `Err` if this
/// member failed; receivers that did are kept in [`Opened`] for the
/// survey to report.
pub(super) async fn open(
    cluster: &ClusterSetup,
    node: &rdmc::Node,
    args: &PushArgs,
) -> Result<Opened, Failure> {
    let config = || control_config(args.cluster.max_message_size);
    let opens = (1..cluster.size as u32).map(|r| async move {
        let control = node.create_group(control_group(r), &control_members(r), config());
        let report = node.create_group(report_group(r), &report_members(r), config());
        (r, futures::future::try_join(control, report).await)
    });
    let mut opened = Opened {
        controls: BTreeMap::new(),
        reports: BTreeMap::new(),
        failed: Vec::new(),
    };
    for (rank, groups) in join_all(opens).await {
        match groups {
            Ok((control, report)) => {
                let (Ok(control), Ok(report)) = (control.into_sender(), report.into_receiver())
                else {
                    unreachable!("the root sends on control groups, receives on report groups");
                };
                opened.controls.insert(rank, control);
                opened.reports.insert(rank, report);
            }
            Err(e) => {
                let failure = Failure::of_group(cluster, &e);
                if failure.hosts.is_empty() {
                    return Err(failure);
                }
                opened.failed.push((rank, failure.message));
            }
        }
    }
    Ok(opened)
}

/// Send the manifest (of `files` files, cut into `messages` messages with
/// itself) on the `opened` groups, collect the reports: a receiver whose
/// report is not one for this push fails, alone.
pub(super) async fn survey(
    cluster: &ClusterSetup,
    opened: Opened,
    (manifest, files, messages): (Bytes, usize, u64),
    progress: &Progress,
) -> Result<Survey, Failure> {
    let Opened {
        controls,
        mut reports,
        failed,
    } = opened;
    let mut survey = Survey {
        controls,
        complete: BTreeSet::new(),
        taken: BTreeMap::new(),
        held: BTreeMap::new(),
        failed: BTreeSet::new(),
        closing: Vec::new(),
    };
    for (rank, why) in failed {
        survey.fail(cluster, progress, rank, &why);
    }
    for rank in tell(&mut survey.controls, manifest).await {
        survey.fail(
            cluster,
            progress,
            rank,
            "the manifest could not be sent to it",
        );
        reports.remove(&rank);
    }
    // Each receiver checks its output directory against the manifest
    // (hashing what it holds, which takes as long as reading it) before it
    // answers: the wait is bound by its liveness (a receiver that fails or
    // leaves fails its report group), not by a time limit.
    let answers = reports.into_iter().map(|(rank, mut report)| async move {
        let answer = match report.next().await {
            Some(Ok(message)) => Report::from_bytes(&message.data)
                .and_then(|report| report.check(files, messages).map(|()| report))
                .map_err(|e| format!("{e:#}")),
            Some(Err(e)) => Err(e.to_string()),
            None => Err("it ended its report group unanswered".to_owned()),
        };
        // The receiver closes its report group once it has answered; this
        // side closes after it.
        let closing = tokio::spawn(async move {
            let _ = tokio::time::timeout(CLOSE_WAIT, async {
                while let Some(Ok(_)) = report.next().await {}
                let _ = report.close().await;
            })
            .await;
        });
        (rank, answer, closing)
    });
    for (rank, answer, closing) in join_all(answers).await {
        survey.closing.push(closing);
        match answer {
            Ok(Report {
                holds_all: true, ..
            }) => {
                survey.complete.insert(rank);
            }
            Ok(Report {
                holds_all: false,
                taken,
                held,
            }) => {
                survey.taken.insert(rank, taken);
                survey.held.insert(rank, held);
            }
            Err(why) => survey.fail(cluster, progress, rank, &why),
        }
    }
    Ok(survey)
}

impl Survey {
    fn fail(&mut self, cluster: &ClusterSetup, progress: &Progress, rank: u32, why: &str) {
        progress.member_failed(&cluster.describe(rdmc::NodeId(rank)), rank, why);
        self.controls.remove(&rank);
        self.failed.insert(rank);
    }
}

/// Send `message` on every control group; those it could not be sent on
/// are dropped, and their ranks returned.
pub(super) async fn tell(controls: &mut BTreeMap<u32, rdmc::Sender>, message: Bytes) -> Vec<u32> {
    let sends = controls.iter().map(|(&rank, control)| {
        let message = message.clone();
        async move {
            let sent = match control.send(message).await {
                Ok(receipt) => receipt.sent().await.is_ok(),
                Err(_) => false,
            };
            (rank, sent)
        }
    });
    let gone: Vec<u32> = join_all(sends)
        .await
        .into_iter()
        .filter(|&(_, sent)| !sent)
        .map(|(rank, _)| rank)
        .collect();
    for rank in &gone {
        controls.remove(rank);
    }
    gone
}

/// Close `control` (the receiver closes its side when it sees that),
/// waiting at most [`CLOSE_WAIT`].
pub(super) fn close_control(mut control: rdmc::Sender) -> JoinHandle<()> {
    tokio::spawn(async move {
        let _ = tokio::time::timeout(CLOSE_WAIT, control.close()).await;
    })
}
