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
//! so a push run again sends no file data.

use std::collections::BTreeSet;

use anyhow::{Context as _, bail};
use rdmc::{GroupConfig, GroupId, NodeId};
use serde::{Deserialize, Serialize};

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

/// The largest epoch or report: one naming every rank fits.
const EPOCH_LIMIT: usize = 1 << 20;

/// A receiver's answer to the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Report {
    /// Its output directory holds every entry of the manifest, identical
    /// (each file's size, permissions and SHA-256).
    pub(super) holds_all: bool,
    /// Otherwise, how many messages of the push it holds already (the
    /// manifest, then the pieces a killed receiver before it left, checked
    /// against the manifest): the first epoch starts at the fewest any of
    /// its receivers holds.
    #[serde(default)]
    pub(super) taken: u64,
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
}

impl Epoch {
    /// The first epoch: the receivers in `members` from message `resume`
    /// (at least the first piece: the manifest came on the control
    /// groups), those in `complete` receiving nothing.
    pub(super) fn first(
        members: Vec<u32>,
        complete: Vec<u32>,
        failed: Vec<u32>,
        resume: u64,
    ) -> Self {
        Epoch {
            number: 0,
            members,
            resume: resume.max(1),
            failed,
            complete,
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

/// Where message `index` of the push stands at a receiver that took
/// `taken` messages: an epoch never starts past what every member of it
/// took, so a gap is the root's error.
pub(super) fn place(index: u64, taken: u64) -> anyhow::Result<Next> {
    match index.cmp(&taken) {
        std::cmp::Ordering::Less => Ok(Next::Skip),
        std::cmp::Ordering::Equal => Ok(Next::Take),
        std::cmp::Ordering::Greater => {
            bail!("the push went on from message {index}, but this receiver has only {taken}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_epoch_round_trips_and_the_next_leaves_out_the_failed() {
        let first = Epoch::first(vec![0, 1, 2, 3, 4], vec![5], vec![6], 0);
        assert_eq!(Epoch::from_bytes(&first.to_bytes()).unwrap(), first);
        assert_eq!(first.resume, 1);
        assert_eq!(Epoch::first(vec![0, 1], vec![], vec![], 4).resume, 4);
        let second = first.next(&BTreeSet::from([2]), 7);
        assert_eq!(second.complete, [5]);
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
            let report = Report { holds_all, taken };
            assert_eq!(Report::from_bytes(&report.to_bytes()).unwrap(), report);
        }
        // An earlier receiver's report (no `taken`) holds the manifest only.
        assert_eq!(
            Report::from_bytes(br#"{"holds_all":false}"#).unwrap().taken,
            0
        );
        assert!(Report::from_bytes(b"{}").is_err());
        assert!(Report::from_bytes(&vec![b' '; EPOCH_LIMIT + 1]).is_err());
    }

    #[test]
    fn resent_messages_are_skipped_and_a_gap_is_an_error() {
        assert_eq!(place(3, 5).unwrap(), Next::Skip);
        assert_eq!(place(5, 5).unwrap(), Next::Take);
        assert!(place(6, 5).is_err());
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
