//! How a push goes on without the receivers that failed.
//!
//! Besides the data group, the pushing host (rank 0) shares a *control
//! group* of two with every receiver. The data group of each *epoch* is
//! announced on them: before the first message, and again after a data
//! group failed, the root tells every receiver still in the push which
//! members the next data group has and from which message it starts (the
//! first one not yet taken by all of them: [`Epoch::resume`]). A receiver
//! left out of an epoch is told so and ends. A receiver that already has
//! a resent message skips it, so every receiver takes each message of the
//! push exactly once, in order, whatever the epochs.
//!
//! A failure that a control group survives (another receiver's) is an
//! epoch's end; one that takes the control group down (the root's, or this
//! receiver's own) is the push's end.
//!
//! The manifest goes first, on the control groups: each receiver checks it
//! against what its output directory holds and answers on a *report group*
//! (of two, the receiver first). Receivers that already hold every entry,
//! identical, are marked complete in the first epoch and receive nothing;
//! so a push run again sends no file data. The others say which files they
//! hold intact already: the root sends only the messages carrying a file
//! one of them lacks, and says which in every epoch (see [`super::sync`]).

use std::collections::BTreeSet;

use anyhow::{Context as _, bail};
use rdmc::{GroupConfig, GroupId, NodeId};
use serde::{Deserialize, Serialize};

use super::sync::FileSet;

/// The data group of epoch 0; epoch `e` uses `DATA_GROUP + e`.
const DATA_GROUP: u64 = 1;
/// The control group of receiver `r` is `CONTROL_GROUPS + r`: above every
/// data group id (there are at most as many epochs as receivers).
const CONTROL_GROUPS: u64 = 1 << 32;
/// The report group of receiver `r` is `REPORT_GROUPS + r`.
const REPORT_GROUPS: u64 = 1 << 33;

/// The data group of `epoch`.
pub(super) fn data_group(epoch: u32) -> GroupId {
    GroupId(DATA_GROUP + u64::from(epoch))
}

/// The control group of the root and receiver `rank`.
pub(super) fn control_group(rank: u32) -> GroupId {
    GroupId(CONTROL_GROUPS + u64::from(rank))
}

/// A control group's members: the root, then the receiver.
pub(super) fn control_members(rank: u32) -> [NodeId; 2] {
    [NodeId(0), NodeId(rank)]
}

/// The report group of receiver `rank`.
pub(super) fn report_group(rank: u32) -> GroupId {
    GroupId(REPORT_GROUPS + u64::from(rank))
}

/// A report group's members: the receiver, then the root.
pub(super) fn report_members(rank: u32) -> [NodeId; 2] {
    [NodeId(rank), NodeId(0)]
}

/// A control or report group's configuration: it carries the manifest
/// (at most `max_message` bytes, as the data groups' messages), epochs and
/// reports.
pub(super) fn control_config(max_message: u64) -> GroupConfig {
    GroupConfig::new().with_max_message_size(max_message.max(EPOCH_LIMIT as u64))
}

/// The largest epoch or report: one naming every rank fits, with the file
/// set of a push of [`super::sync::MAX_FILES`] files.
const EPOCH_LIMIT: usize = 1 << 20;

/// A receiver's answer to the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Report {
    /// Its output directory holds every entry of the manifest, identical
    /// (each file's size, permissions and BLAKE3).
    pub(super) holds_all: bool,
    /// Otherwise, how many messages of the push it holds already (the
    /// manifest, then the pieces a killed receiver before it left, checked
    /// against the manifest): the first epoch starts at the fewest any of
    /// its receivers holds.
    #[serde(default)]
    pub(super) taken: u64,
    /// Otherwise, the files its output directory holds intact already
    /// (size, permissions and BLAKE3 as in the manifest): they are not
    /// sent for it, and it leaves them untouched.
    pub(super) held: FileSet,
}

impl Report {
    pub(super) fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a report serializes")
    }

    pub(super) fn from_bytes(data: &[u8]) -> anyhow::Result<Self> {
        if data.len() > EPOCH_LIMIT {
            bail!("a report of {} bytes", data.len());
        }
        serde_json::from_slice(data).context("a report that is not one")
    }

    /// Check a report for a manifest of `files` files cut into `messages`
    /// messages (the manifest included): a receiver's answer is not
    /// trusted.
    pub(super) fn check(&self, files: usize, messages: u64) -> anyhow::Result<()> {
        if self.holds_all {
            return Ok(());
        }
        if self.taken > messages {
            bail!(
                "it reports {} messages held of a push of {messages}",
                self.taken
            );
        }
        self.held.check(files).context("its report")
    }
}

/// What the root tells a receiver on its control group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Epoch {
    /// 0 for the first data group, one more for each after a failure.
    pub(super) number: u32,
    /// The data group's members by rank, the root first; a receiver not
    /// among them is out of the push.
    pub(super) members: Vec<u32>,
    /// The index (in the push's messages: the manifest is 0, then the
    /// plan's pieces) of the data group's first message.
    pub(super) resume: u64,
    /// The receivers left out so far, by rank, for the receivers' reports.
    pub(super) failed: Vec<u32>,
    /// The receivers that held everything already (and receive nothing).
    #[serde(default)]
    pub(super) complete: Vec<u32>,
    /// The files some receiver of the push lacks: the messages carrying
    /// one of them are sent, the others not ([`super::sync::messages`]).
    pub(super) needed: FileSet,
}

impl Epoch {
    /// The first epoch: the receivers in `members` from message `resume`
    /// (at least the first piece: the manifest came on the control
    /// groups), those in `complete` receiving nothing, the messages sent
    /// those that carry a file of `needed`.
    pub(super) fn first(
        (members, complete, failed): (Vec<u32>, Vec<u32>, Vec<u32>),
        resume: u64,
        needed: FileSet,
    ) -> Self {
        Epoch {
            number: 0,
            members,
            resume: resume.max(1),
            failed,
            complete,
            needed,
        }
    }

    /// The epoch after this one, without `failed`, from message `resume`.
    pub(super) fn next(&self, failed: &BTreeSet<u32>, resume: u64) -> Self {
        let mut all_failed: BTreeSet<u32> = self.failed.iter().copied().collect();
        all_failed.extend(failed);
        Epoch {
            number: self.number + 1,
            members: self
                .members
                .iter()
                .copied()
                .filter(|r| !failed.contains(r))
                .collect(),
            resume,
            failed: all_failed.into_iter().collect(),
            complete: self.complete.clone(),
            needed: self.needed.clone(),
        }
    }

    /// The data group's members as node ids.
    pub(super) fn ids(&self) -> Vec<NodeId> {
        self.members.iter().copied().map(NodeId).collect()
    }

    /// The receivers of this epoch.
    pub(super) fn receivers(&self) -> impl Iterator<Item = u32> + '_ {
        self.members.iter().copied().filter(|&r| r != 0)
    }

    pub(super) fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("an epoch serializes")
    }

    /// An epoch as the root sent it, checked: the root first, no rank
    /// twice, the numbers in range.
    pub(super) fn from_bytes(data: &[u8]) -> anyhow::Result<Self> {
        if data.len() > EPOCH_LIMIT {
            bail!("a control message of {} bytes", data.len());
        }
        let epoch: Epoch =
            serde_json::from_slice(data).context("a control message that is not an epoch")?;
        let distinct: BTreeSet<u32> = epoch.members.iter().copied().collect();
        if epoch.members.first() != Some(&0) || distinct.len() != epoch.members.len() {
            bail!("an epoch whose members are not the root and distinct receivers");
        }
        Ok(epoch)
    }
}

/// What a receiver does with message `index` of the push, having taken
/// `taken` of them before.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Next {
    /// The next message: hand it on.
    Take,
    /// One this receiver took in an earlier epoch: skip it.
    Skip,
}

/// Where message `index` of the push stands at a receiver that took every
/// message before `taken`, of a push sending the messages `sent` (in
/// order): an epoch never starts past what every member of it took, so a
/// message of `sent` skipped is the root's error.
pub(super) fn place(index: u64, taken: u64, sent: &[u64]) -> anyhow::Result<Next> {
    if index < taken {
        return Ok(Next::Skip);
    }
    let missed = sent.partition_point(|&s| s < index) - sent.partition_point(|&s| s < taken);
    if missed > 0 || sent.binary_search(&index).is_err() {
        bail!(
            "the push went on with message {index}, but this receiver has only those before \
             {taken} (and {missed} between are due)"
        );
    }
    Ok(Next::Take)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_epoch_round_trips_and_the_next_leaves_out_the_failed() {
        let mut needed = FileSet::none(9);
        needed.insert(8);
        let first = Epoch::first((vec![0, 1, 2, 3, 4], vec![5], vec![6]), 0, needed.clone());
        assert_eq!(Epoch::from_bytes(&first.to_bytes()).unwrap(), first);
        assert_eq!(first.resume, 1);
        let only = Epoch::first((vec![0, 1], vec![], vec![]), 4, FileSet::none(0));
        assert_eq!(only.resume, 4);
        let second = first.next(&BTreeSet::from([2]), 7);
        assert_eq!(second.complete, [5]);
        assert_eq!(second.needed, needed);
        assert_eq!(second.number, 1);
        assert_eq!(second.members, [0, 1, 3, 4]);
        assert_eq!(second.resume, 7);
        let third = second.next(&BTreeSet::from([4, 1]), 9);
        assert_eq!(third.members, [0, 3]);
        assert_eq!(third.failed, [1, 2, 4, 6]);
        assert_eq!(third.receivers().collect::<Vec<_>>(), [3]);
        assert_eq!(third.ids(), [NodeId(0), NodeId(3)]);
    }

    #[test]
    fn malformed_epochs_are_refused() {
        for bad in [
            &b"not json"[..],
            br#"{"number":1,"members":[1,0],"resume":0,"failed":[]}"#,
            br#"{"number":1,"members":[0,1,1],"resume":0,"failed":[]}"#,
            br#"{"number":1,"members":[],"resume":0,"failed":[]}"#,
            br#"{"number":-1,"members":[0],"resume":0,"failed":[]}"#,
        ] {
            assert!(
                Epoch::from_bytes(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn reports_round_trip_and_garbage_is_refused() {
        for (holds_all, taken) in [(false, 1), (false, 7), (true, 0)] {
            let mut held = FileSet::none(10);
            held.insert(9);
            let report = Report {
                holds_all,
                taken,
                held,
            };
            assert_eq!(Report::from_bytes(&report.to_bytes()).unwrap(), report);
            report.check(10, 7).unwrap();
            // Checked against the push it answers.
            assert!(report.holds_all || report.check(9, 7).is_err());
            assert!(report.holds_all || report.check(10, 6).is_err() == (taken > 6));
        }
        let bad = Report::from_bytes(br#"{"holds_all":false,"taken":1,"held":"ff"}"#).unwrap();
        assert!(bad.check(7, 1).is_err(), "a file past the last");
        bad.check(8, 1).unwrap();
        assert!(Report::from_bytes(br#"{"holds_all":false}"#).is_err());
        assert!(Report::from_bytes(br#"{"holds_all":false,"held":"xy"}"#).is_err());
        assert!(Report::from_bytes(b"{}").is_err());
        assert!(Report::from_bytes(&vec![b' '; EPOCH_LIMIT + 1]).is_err());
    }

    #[test]
    fn resent_messages_are_skipped_and_a_gap_is_an_error() {
        let all = [1, 2, 3, 4, 5, 6, 7];
        assert_eq!(place(3, 5, &all).unwrap(), Next::Skip);
        assert_eq!(place(5, 5, &all).unwrap(), Next::Take);
        assert!(place(6, 5, &all).is_err());
        // Messages not sent are no gap; one sent and not taken is.
        let some = [2, 5, 7];
        assert_eq!(place(5, 3, &some).unwrap(), Next::Take);
        assert_eq!(place(7, 6, &some).unwrap(), Next::Take);
        assert!(place(7, 4, &some).is_err());
        assert!(place(6, 6, &some).is_err(), "a message not announced");
    }

    #[test]
    fn group_ids_of_epochs_and_control_groups_never_meet() {
        let data: BTreeSet<GroupId> = (0..u32::from(u16::MAX)).map(data_group).collect();
        assert!(!data.contains(&control_group(1)));
        assert!(!data.contains(&control_group(u32::MAX)));
        assert!(!data.contains(&report_group(1)));
        assert_ne!(control_group(1), control_group(2));
        assert_ne!(control_group(u32::MAX), report_group(0));
        assert_ne!(report_group(1), report_group(2));
    }
}
