//! What the members of a group must agree on: the [`SharedSettings`], their
//! [`group_digest`] (which a `Join` carries: equal digests, equal groups)
//! and their [`SettingsFingerprint`] (which goes with it, so that a member
//! that finds the digests differ can say which settings do).
//!
//! Every member hashes the group's identity — its id, its member list in
//! rank order, the algorithm, the block size and the largest message size,
//! and the settings that are set of the others. Settings that are local to
//! a member (the receive window, the create timeout) are left out: members
//! may differ in them.
//!
//! The hash is FNV-1a 128 over a canonical little-endian encoding, written
//! out here so that it is identical across processes, platforms and Rust
//! versions (unlike `std`'s `DefaultHasher`).

use std::fmt;

use crate::ids::{GroupId, NodeId};
use crate::schedule::{Algorithm, BlockSize};

const FNV_OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
const FNV_PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;

/// Bumped whenever the encoding below changes.
const VERSION: u8 = 1;

struct Fnv1a128(u128);

impl Fnv1a128 {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u128::from(b);
            self.0 = self.0.wrapping_mul(FNV_PRIME);
        }
    }

    fn u64(&mut self, x: u64) {
        self.write(&x.to_le_bytes());
    }
}

/// A stable code per algorithm, independent of the enum's declaration order.
fn algorithm_code(algorithm: Algorithm) -> u8 {
    match algorithm {
        Algorithm::Sequential => 1,
        Algorithm::Chain => 2,
        Algorithm::BinomialTree => 3,
        Algorithm::BinomialPipeline => 4,
        Algorithm::Hybrid => 5,
    }
}

/// What every member of a group must create it with, as [`group_digest`]
/// hashes it: the settings that are not local to a member (the receive
/// window or the create timeout are, and members may differ in them).
///
/// A shared setting added later is a new field here, so every driver has to
/// say it; a setting that is unset (`None`, empty, `false`) is left out of
/// the hash, so that groups without it keep their digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedSettings<'a> {
    /// The multicast algorithm.
    pub algorithm: Algorithm,
    /// How messages are cut into blocks.
    pub block_size: BlockSize,
    /// The largest message the group carries.
    pub max_message_size: u64,
    /// Whether every message carries an end-to-end digest (as the driver
    /// resolved its default).
    pub message_digest: bool,
    /// The rack of each member, in rank order, when given.
    pub racks: Option<&'a [u32]>,
    /// The slow members' ranks.
    pub slow_members: &'a [usize],
    /// The largest batch of small messages, in bytes, when messages are
    /// batched.
    pub max_batch: Option<usize>,
}

/// One of the things the members of a group must agree on: its member
/// list, or one of its [`SharedSettings`] (in their order).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GroupSetting {
    /// The member list, in rank order.
    Members,
    /// [`SharedSettings::algorithm`].
    Algorithm,
    /// [`SharedSettings::block_size`].
    BlockSize,
    /// [`SharedSettings::max_message_size`].
    MaxMessageSize,
    /// [`SharedSettings::message_digest`].
    MessageDigest,
    /// [`SharedSettings::racks`].
    Racks,
    /// [`SharedSettings::slow_members`].
    SlowMembers,
    /// [`SharedSettings::max_batch`].
    MaxBatch,
}

impl GroupSetting {
    /// Every setting, in the order the digest hashes them.
    pub const ALL: [GroupSetting; 8] = [
        GroupSetting::Members,
        GroupSetting::Algorithm,
        GroupSetting::BlockSize,
        GroupSetting::MaxMessageSize,
        GroupSetting::MessageDigest,
        GroupSetting::Racks,
        GroupSetting::SlowMembers,
        GroupSetting::MaxBatch,
    ];
}

/// "block size" (in a sentence: "a different block size").
impl fmt::Display for GroupSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GroupSetting::Members => "member list",
            GroupSetting::Algorithm => "algorithm",
            GroupSetting::BlockSize => "block size",
            GroupSetting::MaxMessageSize => "largest message size",
            GroupSetting::MessageDigest => "message digest setting",
            GroupSetting::Racks => "racks",
            GroupSetting::SlowMembers => "slow members",
            GroupSetting::MaxBatch => "small-message batching",
        })
    }
}

/// Hash what `setting` is in a group of `members` with `shared` (the bytes
/// the digest hashes for it: nothing for a setting that is unset).
fn write_setting(
    h: &mut Fnv1a128,
    setting: GroupSetting,
    members: &[NodeId],
    shared: &SharedSettings<'_>,
) {
    match setting {
        GroupSetting::Members => {
            h.u64(members.len() as u64);
            for node in members {
                h.write(&node.0.to_le_bytes());
            }
        }
        GroupSetting::Algorithm => h.write(&[algorithm_code(shared.algorithm)]),
        GroupSetting::BlockSize => h.u64(match shared.block_size {
            BlockSize::Fixed(size) => size as u64,
            _ => 0, // automatic (a fixed size is never 0)
        }),
        GroupSetting::MaxMessageSize => h.u64(shared.max_message_size),
        GroupSetting::MessageDigest => {
            if shared.message_digest {
                h.write(b"digest");
            }
        }
        // Written only when set, so that groups without them keep their
        // digest (and, for batches, a build without them cannot join a
        // group with them).
        GroupSetting::Racks => {
            if let Some(racks) = shared.racks {
                h.write(b"racks");
                h.u64(racks.len() as u64);
                for &rack in racks {
                    h.u64(u64::from(rack));
                }
            }
        }
        GroupSetting::SlowMembers => {
            if !shared.slow_members.is_empty() {
                h.write(b"slow");
                h.u64(shared.slow_members.len() as u64);
                for &rank in shared.slow_members {
                    h.u64(rank as u64);
                }
            }
        }
        GroupSetting::MaxBatch => {
            if let Some(bytes) = shared.max_batch {
                h.write(b"batch");
                h.u64(bytes as u64);
            }
        }
    }
}

/// The digest of group `id` as every member must create it: a hash of the
/// id, the member list in rank order and the [`SharedSettings`], stable
/// across processes, platforms and builds.
pub fn group_digest(id: GroupId, members: &[NodeId], shared: &SharedSettings<'_>) -> u128 {
    let mut h = Fnv1a128(FNV_OFFSET);
    h.write(b"rdmc-group");
    h.write(&[VERSION]);
    h.u64(id.0);
    for setting in GroupSetting::ALL {
        write_setting(&mut h, setting, members, shared);
    }
    h.0
}

/// A short description of a group's member list and [`SharedSettings`]:
/// 16 bits per [`GroupSetting`], a hash of that setting alone. A member
/// sends it with its `Join`; one that finds the digests differ compares
/// the two fingerprints to say which settings do
/// ([`differences`](Self::differences)). It tells, it does not decide:
/// the digest decides whether two members agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SettingsFingerprint(pub u128);

impl SettingsFingerprint {
    /// The fingerprint of a group of `members` (in rank order) with `shared`.
    pub fn new(members: &[NodeId], shared: &SharedSettings<'_>) -> Self {
        let mut fingerprint = 0;
        for (i, setting) in GroupSetting::ALL.into_iter().enumerate() {
            let mut h = Fnv1a128(FNV_OFFSET);
            h.write(b"rdmc-setting");
            h.write(&[i as u8]);
            write_setting(&mut h, setting, members, shared);
            fingerprint |= u128::from(fold16(h.0)) << (16 * i);
        }
        SettingsFingerprint(fingerprint)
    }

    /// The settings whose hashes differ between two fingerprints, in the
    /// order of [`GroupSetting::ALL`]. Two groups that differ in a setting
    /// have the same hash of it only by chance (one in 65,536): a
    /// difference found is certain, an empty list only likely.
    pub fn differences(self, other: SettingsFingerprint) -> Vec<GroupSetting> {
        GroupSetting::ALL
            .into_iter()
            .enumerate()
            .filter(|&(i, _)| (self.0 >> (16 * i)) as u16 != (other.0 >> (16 * i)) as u16)
            .map(|(_, setting)| setting)
            .collect()
    }
}

/// The 16-bit fold of a 128-bit hash.
fn fold16(x: u128) -> u16 {
    (0..8).fold(0, |acc, i| acc ^ (x >> (16 * i)) as u16)
}

/// What a member's `Join` says of its group: the digest every member must
/// share, and the fingerprint that tells which settings differ when the
/// digests do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupSummary {
    /// The group's [`group_digest`].
    pub digest: u128,
    /// The group's [`SettingsFingerprint`].
    pub fingerprint: SettingsFingerprint,
}

impl GroupSummary {
    /// The summary of group `id` of `members` (in rank order) with `shared`.
    pub fn new(id: GroupId, members: &[NodeId], shared: &SharedSettings<'_>) -> Self {
        GroupSummary {
            digest: group_digest(id, members, shared),
            fingerprint: SettingsFingerprint::new(members, shared),
        }
    }
}

/// What a peer disagreed about when it created a group (or refused it).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mismatch {
    /// The peer created the group with these settings other than this
    /// node, in the order of [`GroupSetting::ALL`] — as far as the
    /// fingerprints tell: empty when they could not (a one in 65,536 chance
    /// per setting, or a peer that sent none).
    Settings(Vec<GroupSetting>),
    /// The peer created the group, but this node's member list leaves it
    /// out.
    NotAMember,
    /// The peer created the group as this node did, and refused it because
    /// a third member created it otherwise (that member is named at the
    /// members that disagree with it).
    Refused,
    /// The peer has used the group's id already: a group with it runs
    /// there, or is among the last it ended. Another id is needed.
    IdInUse,
}

/// The mismatch as the rest of a sentence naming the peer ("node 2
/// created it with a different block size").
impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mismatch::Settings(settings) if settings.is_empty() => {
                f.write_str("created it with other settings (which ones could not be told)")
            }
            Mismatch::Settings(settings) => {
                f.write_str("created it with a different ")?;
                for (i, setting) in settings.iter().enumerate() {
                    match i {
                        0 => {}
                        _ if i + 1 == settings.len() => f.write_str(" and ")?,
                        _ => f.write_str(", ")?,
                    }
                    write!(f, "{setting}")?;
                }
                Ok(())
            }
            Mismatch::NotAMember => f.write_str("created it but is not in the member list"),
            Mismatch::Refused => {
                f.write_str("refused it because another member created it otherwise")
            }
            Mismatch::IdInUse => f.write_str(
                "refused it: the id is in use there (a group with it runs or ended recently)",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(ids: &[u32]) -> Vec<NodeId> {
        ids.iter().copied().map(NodeId).collect()
    }

    #[test]
    fn fnv1a_128_matches_the_reference_vectors() {
        let hash = |s: &[u8]| {
            let mut h = Fnv1a128(FNV_OFFSET);
            h.write(s);
            h.0
        };
        assert_eq!(hash(b""), FNV_OFFSET);
        assert_eq!(hash(b"a"), 0xd228_cb69_6f1a_8caf_7891_2b70_4e4a_8964);
        assert_eq!(hash(b"foobar"), 0x343e_1662_793c_64bf_6f0d_3597_ba44_6f18);
    }

    /// The settings of the pinned digest: the block size and the largest
    /// message size the defaults had when the value was pinned, no batches.
    fn pinned_settings() -> SharedSettings<'static> {
        SharedSettings {
            algorithm: Algorithm::BinomialPipeline,
            block_size: BlockSize::Fixed(1 << 20),
            max_message_size: 1 << 40,
            message_digest: false,
            racks: None,
            slow_members: &[],
            max_batch: None,
        }
    }

    #[test]
    fn the_digest_is_stable() {
        // Pinned: a change here breaks groups between builds.
        let d = group_digest(GroupId(5), &nodes(&[0, 1, 2]), &pinned_settings());
        assert_eq!(format!("{d:032x}"), PINNED);
    }

    /// Computed independently (Python) over the documented encoding.
    const PINNED: &str = "6cbbbb3fa55f0affa1bd3d1c13dae80c";

    /// Every setting changed alone, with the one it is.
    fn each_setting_changed(
        base: SharedSettings<'static>,
    ) -> Vec<(GroupSetting, SharedSettings<'static>)> {
        vec![
            (
                GroupSetting::Algorithm,
                SharedSettings {
                    algorithm: Algorithm::Chain,
                    ..base
                },
            ),
            (
                GroupSetting::BlockSize,
                SharedSettings {
                    block_size: BlockSize::AUTOMATIC,
                    ..base
                },
            ),
            (
                GroupSetting::MaxMessageSize,
                SharedSettings {
                    max_message_size: 1 << 20,
                    ..base
                },
            ),
            (
                GroupSetting::MessageDigest,
                SharedSettings {
                    message_digest: true,
                    ..base
                },
            ),
            (
                GroupSetting::Racks,
                SharedSettings {
                    racks: Some(&[0, 1, 0]),
                    ..base
                },
            ),
            (
                GroupSetting::SlowMembers,
                SharedSettings {
                    slow_members: &[2],
                    ..base
                },
            ),
            (
                GroupSetting::MaxBatch,
                SharedSettings {
                    max_batch: Some(4096),
                    ..base
                },
            ),
        ]
    }

    #[test]
    fn every_setting_and_the_membership_change_the_digest() {
        let base = pinned_settings();
        let members = nodes(&[0, 1, 2]);
        let d = group_digest(GroupId(5), &members, &base);
        let mut different = vec![
            group_digest(GroupId(6), &members, &base),
            group_digest(GroupId(5), &nodes(&[0, 2, 1]), &base),
            group_digest(GroupId(5), &nodes(&[0, 1]), &base),
        ];
        for (_, shared) in each_setting_changed(base) {
            different.push(group_digest(GroupId(5), &members, &shared));
        }
        for (i, other) in different.iter().enumerate() {
            assert_ne!(d, *other, "case {i}");
        }
    }

    #[test]
    fn the_fingerprint_names_each_setting_that_differs() {
        let base = pinned_settings();
        let members = nodes(&[0, 1, 2]);
        let ours = SettingsFingerprint::new(&members, &base);
        assert_eq!(ours.differences(ours), []);
        for other in [nodes(&[0, 2, 1]), nodes(&[0, 1]), nodes(&[0, 1, 2, 3])] {
            let theirs = SettingsFingerprint::new(&other, &base);
            assert_eq!(
                ours.differences(theirs),
                [GroupSetting::Members],
                "{other:?}"
            );
        }
        for (setting, shared) in each_setting_changed(base) {
            let theirs = SettingsFingerprint::new(&members, &shared);
            assert_eq!(ours.differences(theirs), [setting]);
        }
        let both = SharedSettings {
            algorithm: Algorithm::Hybrid,
            block_size: BlockSize::Fixed(4096),
            ..base
        };
        let theirs = SettingsFingerprint::new(&nodes(&[1, 0, 2]), &both);
        assert_eq!(
            theirs.differences(ours),
            [
                GroupSetting::Members,
                GroupSetting::Algorithm,
                GroupSetting::BlockSize
            ]
        );
        // The id is not a setting: the members compare one group's.
        assert_eq!(ours, SettingsFingerprint::new(&members, &base));
    }

    #[test]
    fn the_fingerprint_is_stable() {
        // Pinned: members of different builds compare fingerprints.
        let fingerprint = SettingsFingerprint::new(&nodes(&[0, 1, 2]), &pinned_settings());
        assert_eq!(format!("{:032x}", fingerprint.0), PINNED_FINGERPRINT);
    }

    const PINNED_FINGERPRINT: &str = "a27ea00592f49cb32a843e52eb07bc4d";

    #[test]
    fn a_mismatch_reads_as_the_rest_of_a_sentence() {
        use GroupSetting::{Algorithm as A, BlockSize as B, Members as M};
        let said = |settings: Vec<GroupSetting>| Mismatch::Settings(settings).to_string();
        assert_eq!(
            said(vec![]),
            "created it with other settings (which ones could not be told)"
        );
        assert_eq!(said(vec![A]), format!("created it with a different {A}"));
        assert_eq!(
            said(vec![A, B]),
            format!("created it with a different {A} and {B}")
        );
        assert_eq!(
            said(vec![A, B, M]),
            format!("created it with a different {A}, {B} and {M}")
        );
    }
}
