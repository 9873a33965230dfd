//! [`Rendezvous`]: the per-node state machine of group creation.
//!
//! Every member of a group creates it locally with the group's id, member
//! list and configuration. A member's creation completes only once every
//! other member has created the group the same way: each member hashes what
//! the members must agree on into a digest ([`group_digest`]) and sends it
//! to every other member in a `Join`. A `Join` with a different digest, or
//! from a non-member, fails the creation with a mismatch on both sides (the
//! refusing member answers with a `JoinRejected` and tells the other members
//! too); a member that does not join before the creation's deadline fails it
//! with a timeout naming every missing member in rank order.
//!
//! Like [`GroupMember`](super::GroupMember), the machine is sans-IO: the
//! driver feeds it events ([`create`](Rendezvous::create),
//! [`handle_join`](Rendezvous::handle_join),
//! [`handle_join_rejected`](Rendezvous::handle_join_rejected),
//! [`handle_peer_down`](Rendezvous::handle_peer_down),
//! [`handle_timeout`](Rendezvous::handle_timeout), …), drains
//! [`poll_action`](Rendezvous::poll_action) after each one and arms a timer
//! for [`poll_timeout`](Rendezvous::poll_timeout). Time is whatever ordered
//! value the driver passes in (an `Instant`, a simulated tick); the machine
//! never reads a clock.
//!
//! The driver runs a group's [`GroupMember`](super::GroupMember) from local
//! creation on, before the rendezvous completes: a peer that completed its
//! rendezvous earlier may already send ready-for-blocks or failures, and the
//! protocol core handles peers at different stages already. Nothing is sent
//! to a receiver before the root's application has the group, i.e. before
//! the root's rendezvous completed, which needs every member's matching
//! `Join`. What keeps a mismatch from showing up as a protocol violation
//! instead is the order of signals: each member sends its `Join`s before
//! anything else of the group, and signals are FIFO per link, so a peer
//! checks the `Join` first.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

use crate::ids::{GroupId, NodeId};
use crate::schedule::{Algorithm, BlockSize};

use crate::member::{Control, Rank};

/// Most signals kept, over all groups, for groups this node has not created
/// yet. When the table is full, the signals of the group heard of first are
/// dropped to make room: signals for groups that never come here (a peer's
/// creation this node's application never made) make way for fresh ones
/// instead of filling the table for good.
pub(crate) const MAX_EARLY: usize = 4096;

/// How many ended groups' ids a node remembers as used (the most recent
/// ones). Creating a group with a remembered id is refused
/// ([`Rendezvous::is_used`]); an id older than that is accepted again, and
/// so, in the unlikely case that one comes that late, is a signal of the
/// old group with that id, kept as an early signal of the new one. The
/// bound keeps a long-lived node's memory flat however many groups it runs
/// in turn; ids that only grow (a counter, a timestamp) never meet it.
pub const USED_IDS_KEPT: usize = 16_384;

/// How many groups whose creation failed here a node remembers, to answer
/// their late `Join`s (the most recent ones). A late `Join` for an older one
/// goes unanswered (the joiner's creation times out instead of failing at
/// once).
pub(crate) const ABANDONED_KEPT: usize = 1024;

/// Why a creation failed in the rendezvous (exhaustive: a driver answers
/// its caller for each).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CreateFailure {
    /// `peer` created the group with a different membership or
    /// configuration, joined without being a member, or refused the group.
    Mismatch {
        /// The member that disagreed (or refused).
        peer: NodeId,
    },
    /// These members had not joined when the deadline passed, in rank order.
    TimedOut {
        /// The missing members, in rank order.
        missing: Vec<NodeId>,
    },
}

/// An instruction from a [`Rendezvous`] to its driver (exhaustive: a
/// driver carries out each).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RendezvousAction {
    /// Send a `Join` carrying this node's digest of `group` to `to`.
    SendJoin {
        /// The group.
        group: GroupId,
        /// The member to tell.
        to: NodeId,
        /// This node's digest of the group.
        digest: u128,
    },
    /// Send a `JoinRejected` carrying this node's digest of `group` to `to`.
    SendJoinRejected {
        /// The group.
        group: GroupId,
        /// The node to tell.
        to: NodeId,
        /// This node's digest of the group.
        digest: u128,
    },
    /// Send `control` of `group` to `to` (a failure that the group's
    /// members must hear of, although this node has no state machine for
    /// the group any more).
    SendControl {
        /// The group.
        group: GroupId,
        /// The member to tell.
        to: NodeId,
        /// What to send.
        control: Control,
    },
    /// A control message that came from `from` before this node created
    /// `group`: hand it to the group's state machine now, in arrival order.
    DeliverEarly {
        /// The group.
        group: GroupId,
        /// Its sender.
        from: NodeId,
        /// The message.
        control: Control,
    },
    /// Every other member has joined: the group is created here.
    Ready {
        /// The group.
        group: GroupId,
    },
    /// The creation of `group` failed here; the machine has forgotten the
    /// group except to answer late `Join`s. The driver drops the group's
    /// state (its member state machine included).
    CreateFailed {
        /// The group.
        group: GroupId,
        /// Why.
        failure: CreateFailure,
    },
    /// A member refused `group` after its rendezvous completed here (it
    /// found a mismatch with another node): the group fails, naming `peer`.
    PeerRefused {
        /// The group.
        group: GroupId,
        /// The member that refused.
        peer: NodeId,
    },
}

/// A signal kept for a group not created here yet.
#[derive(Clone, Copy, Debug)]
enum Early {
    Join(u128),
    JoinRejected(u128),
    Control(Control),
}

/// A group created here whose state machine is still running.
#[derive(Debug)]
struct Created<I> {
    digest: u128,
    members: Vec<NodeId>,
    rank: Rank,
    /// Until every other member has joined.
    pending: Option<Pending<I>>,
}

/// A creation in progress.
#[derive(Debug)]
struct Pending<I> {
    /// The other members whose matching `Join` has not arrived, in rank order.
    waiting: Vec<NodeId>,
    deadline: I,
}

/// A group whose creation failed here for a mismatch or a timeout.
#[derive(Debug)]
struct Abandoned {
    digest: u128,
    members: Vec<NodeId>,
    rank: Rank,
    timed_out: bool,
}

/// A step of replaying a group's early signals after its creation.
#[derive(Debug)]
enum Replay {
    Signal(GroupId, NodeId, Early),
    /// The group's early signals are all handled: it may complete now.
    End(GroupId),
}

/// The group-creation rendezvous of one node, for all its groups.
///
/// `I` is the driver's notion of time: any ordered value, compared with
/// the deadlines given to [`create`](Self::create) by
/// [`handle_timeout`](Self::handle_timeout).
///
/// After every input the driver drains [`poll_action`](Self::poll_action)
/// before it feeds the next one.
#[derive(Debug)]
pub struct Rendezvous<I> {
    me: NodeId,
    /// Groups created here and not ended.
    created: HashMap<GroupId, Created<I>>,
    /// The ids of the groups created here that are still running, or among
    /// the last [`USED_IDS_KEPT`] that ended.
    used: HashSet<GroupId>,
    /// The ended ones among them, oldest first.
    ended: VecDeque<GroupId>,
    /// Signals for groups not created here yet, in arrival order.
    early: HashMap<GroupId, Vec<(NodeId, Early)>>,
    early_count: usize,
    /// The groups in `early`, in the order they were first heard of.
    early_order: VecDeque<GroupId>,
    /// Nodes known to be gone.
    down: HashSet<NodeId>,
    /// When each creation in progress gives up.
    deadlines: BTreeSet<(I, GroupId)>,
    /// Groups whose creation failed here for a mismatch or a timeout, to
    /// answer `Join`s that come late (the last [`ABANDONED_KEPT`]).
    abandoned: HashMap<GroupId, Abandoned>,
    /// Their ids, oldest first.
    abandoned_order: VecDeque<GroupId>,
    /// Early signals being replayed after a creation.
    replay: VecDeque<Replay>,
    actions: VecDeque<RendezvousAction>,
}

impl<I: Copy + Ord> Rendezvous<I> {
    /// The rendezvous of node `me`, with no groups.
    pub fn new(me: NodeId) -> Self {
        Rendezvous {
            me,
            created: HashMap::new(),
            used: HashSet::new(),
            ended: VecDeque::new(),
            early: HashMap::new(),
            early_count: 0,
            early_order: VecDeque::new(),
            down: HashSet::new(),
            deadlines: BTreeSet::new(),
            abandoned: HashMap::new(),
            abandoned_order: VecDeque::new(),
            replay: VecDeque::new(),
            actions: VecDeque::new(),
        }
    }

    /// Whether `group` was created here and is still running, or is among
    /// the last [`USED_IDS_KEPT`] groups that ended here: its id cannot be
    /// used again (yet).
    pub fn is_used(&self, group: GroupId) -> bool {
        self.used.contains(&group)
    }

    /// The most entries the tables keep for groups that are not running:
    /// the used ids of ended groups ([`USED_IDS_KEPT`]), the failed
    /// creations it remembers and the signals it holds for groups not
    /// created yet.
    #[doc(hidden)]
    pub const KEPT: usize = USED_IDS_KEPT + ABANDONED_KEPT + MAX_EARLY;

    /// How many entries the machine holds over all its tables (for tests
    /// that check a long-lived node's memory stays flat): at most the
    /// running groups' entries plus [`KEPT`](Self::KEPT) (and one per
    /// known-down node).
    #[doc(hidden)]
    pub fn table_len(&self) -> usize {
        self.created.len()
            + self.used.len()
            + self.ended.len()
            + self.early.len()
            + self.early_count
            + self.early_order.len()
            + self.down.len()
            + self.deadlines.len()
            + self.abandoned.len()
            + self.abandoned_order.len()
            + self.replay.len()
            + self.actions.len()
    }

    /// `group` ended here: remember its id as used, forgetting the oldest
    /// beyond [`USED_IDS_KEPT`].
    fn remember_ended(&mut self, group: GroupId) {
        self.ended.push_back(group);
        while self.ended.len() > USED_IDS_KEPT {
            if let Some(old) = self.ended.pop_front() {
                self.used.remove(&old);
            }
        }
    }

    /// Whether `node` is known to be gone.
    pub fn is_down(&self, node: NodeId) -> bool {
        self.down.contains(&node)
    }

    /// Whether the creation of `group` is in progress here.
    pub fn is_pending(&self, group: GroupId) -> bool {
        self.created
            .get(&group)
            .is_some_and(|c| c.pending.is_some())
    }

    /// This node creates `group` with `members` (in rank order, this node
    /// among them, no duplicates; see [`is_used`](Self::is_used)) and
    /// `digest` ([`group_digest`]); the creation fails if not every other
    /// member joined by `deadline`.
    ///
    /// The `Join`s go out first; then the signals that came for the group
    /// before it was created here are handled in arrival order.
    ///
    /// # Panics
    ///
    /// If this node is not in `members` or `group` is in use
    /// ([`is_used`](Self::is_used)).
    pub fn create(&mut self, group: GroupId, members: Vec<NodeId>, digest: u128, deadline: I) {
        let rank = members
            .iter()
            .position(|&n| n == self.me)
            .expect("this node is a member");
        assert!(self.used.insert(group), "group id in use");
        let waiting: Vec<NodeId> = members.iter().copied().filter(|&n| n != self.me).collect();
        for &to in &waiting {
            if !self.down.contains(&to) {
                self.actions
                    .push_back(RendezvousAction::SendJoin { group, to, digest });
            }
        }
        self.deadlines.insert((deadline, group));
        self.created.insert(
            group,
            Created {
                digest,
                members,
                rank,
                pending: Some(Pending { waiting, deadline }),
            },
        );
        if let Some(early) = self.early.remove(&group) {
            self.early_count -= early.len();
            self.early_order.retain(|&g| g != group);
            self.replay.extend(
                early
                    .into_iter()
                    .map(|(from, signal)| Replay::Signal(group, from, signal)),
            );
        }
        self.replay.push_back(Replay::End(group));
    }

    /// A `Join` from `from` for `group` with `digest`.
    pub fn handle_join(&mut self, from: NodeId, group: GroupId, digest: u128) {
        let Some(c) = self.created.get_mut(&group) else {
            if self.abandoned.contains_key(&group) {
                self.answer_late_join(group, from, digest);
            } else if !self.used.contains(&group) {
                self.keep_early(group, from, Early::Join(digest));
            }
            return;
        };
        let mine = c.digest;
        if digest == mine && c.members.contains(&from) {
            if let Some(p) = &mut c.pending {
                p.waiting.retain(|&n| n != from);
            }
            self.complete_if_joined(group);
            return;
        }
        tracing::warn!(
            group = group.0,
            peer = from.0,
            theirs = format_args!("{digest:032x}"),
            "join with a different membership or configuration refused"
        );
        let pending = c.pending.is_some();
        self.actions.push_back(RendezvousAction::SendJoinRejected {
            group,
            to: from,
            digest: mine,
        });
        if pending {
            self.refuse(group, from, true);
        }
    }

    /// A `JoinRejected` from `from` for `group`, carrying `from`'s digest.
    pub fn handle_join_rejected(&mut self, from: NodeId, group: GroupId, digest: u128) {
        let Some(c) = self.created.get(&group) else {
            if !self.abandoned.contains_key(&group) && !self.used.contains(&group) {
                self.keep_early(group, from, Early::JoinRejected(digest));
            }
            return;
        };
        if c.pending.is_some() {
            tracing::warn!(group = group.0, peer = from.0, "our join was refused");
            // A peer with our own digest refused because of a third
            // member; it told every member itself.
            let relay = digest != c.digest;
            self.refuse(group, from, relay);
        } else if c.members.contains(&from) {
            // The rendezvous completed here, but a member refused the group
            // since (it found a mismatch with a non-member).
            tracing::warn!(group = group.0, peer = from.0, "a member refused the group");
            self.actions
                .push_back(RendezvousAction::PeerRefused { group, peer: from });
        }
    }

    /// A control message from `from` for `group`, which the driver has no
    /// state machine for: kept if the group was never created here, to be
    /// handed over ([`RendezvousAction::DeliverEarly`]) once it is.
    pub fn handle_early_control(&mut self, from: NodeId, group: GroupId, control: Control) {
        if !self.used.contains(&group) {
            self.keep_early(group, from, Early::Control(control));
        }
    }

    /// `node` is gone: no more signals are sent to it. (The driver fails
    /// the node's groups through their member state machines.)
    pub fn handle_peer_down(&mut self, node: NodeId) {
        self.down.insert(node);
    }

    /// `node` is connected again (a new run of it, or the same run after
    /// its connection was restored): signals go to it again. Groups that
    /// held it while it was down have failed; new ones may include it.
    pub fn handle_peer_up(&mut self, node: NodeId) {
        self.down.remove(&node);
    }

    /// The driver dropped `group` (it closed or failed, the failure of a
    /// creation in progress included): its later signals are ignored.
    pub fn handle_group_ended(&mut self, group: GroupId) {
        let Some(c) = self.created.remove(&group) else {
            return;
        };
        if let Some(p) = c.pending {
            self.deadlines.remove(&(p.deadline, group));
        }
        self.remember_ended(group);
    }

    /// `group` closed cleanly here before its creation completed (the
    /// `Join` of some member was still on its way): the creation completes.
    ///
    /// The root's close vouches for every member: the root sends nothing
    /// before its own creation completed, which needs every member's
    /// matching `Join`.
    pub fn handle_group_closed(&mut self, group: GroupId) {
        if let Some(p) = self.created.get_mut(&group).and_then(|c| c.pending.take()) {
            self.deadlines.remove(&(p.deadline, group));
            self.actions.push_back(RendezvousAction::Ready { group });
        }
    }

    /// Fail every creation whose deadline is at or before `now`.
    pub fn handle_timeout(&mut self, now: I) {
        while let Some(&(deadline, group)) = self.deadlines.first() {
            if deadline > now {
                break;
            }
            self.deadlines.pop_first();
            let missing = self
                .created
                .get(&group)
                .and_then(|c| c.pending.as_ref())
                .map(|p| p.waiting.clone());
            if let Some(missing) = missing {
                // The missing members are told (they fail as soon as they
                // create the group); the members that joined are not: they
                // wait for the same missing members and time out too — each
                // with its own, clear error — or, if a missing member turns
                // up before, they are told then (see `answer_late_join`).
                let tell = missing.clone();
                self.abandon(group, CreateFailure::TimedOut { missing }, &tell);
            }
        }
    }

    /// The earliest deadline of a creation in progress.
    pub fn poll_timeout(&self) -> Option<I> {
        self.deadlines.first().map(|&(at, _)| at)
    }

    /// The next action to carry out.
    pub fn poll_action(&mut self) -> Option<RendezvousAction> {
        loop {
            if let Some(action) = self.actions.pop_front() {
                return Some(action);
            }
            match self.replay.pop_front()? {
                Replay::Signal(group, from, Early::Join(digest)) => {
                    self.handle_join(from, group, digest);
                }
                Replay::Signal(group, from, Early::JoinRejected(digest)) => {
                    self.handle_join_rejected(from, group, digest);
                }
                Replay::Signal(group, from, Early::Control(control)) => {
                    if self.created.contains_key(&group) {
                        self.actions.push_back(RendezvousAction::DeliverEarly {
                            group,
                            from,
                            control,
                        });
                    }
                }
                Replay::End(group) => self.complete_if_joined(group),
            }
        }
    }

    /// The creation of `group` completes if every other member has joined
    /// (and its early signals are all handled: a `JoinRejected` may follow
    /// the last `Join`).
    fn complete_if_joined(&mut self, group: GroupId) {
        if self
            .replay
            .iter()
            .any(|r| matches!(r, Replay::End(g) if *g == group))
        {
            return;
        }
        let Some(c) = self.created.get_mut(&group) else {
            return;
        };
        let Some(p) = c.pending.take_if(|p| p.waiting.is_empty()) else {
            return;
        };
        self.deadlines.remove(&(p.deadline, group));
        self.actions.push_back(RendezvousAction::Ready { group });
    }

    /// The creation of `group` failed for a mismatch with `peer`: tell the
    /// other members (if `relay`) and fail it here.
    fn refuse(&mut self, group: GroupId, peer: NodeId, relay: bool) {
        let Some(c) = self.created.get(&group) else {
            return;
        };
        if relay {
            for &to in &c.members {
                if to != self.me && to != peer && !self.down.contains(&to) {
                    self.actions.push_back(RendezvousAction::SendJoinRejected {
                        group,
                        to,
                        digest: c.digest,
                    });
                }
            }
        }
        self.abandon(group, CreateFailure::Mismatch { peer }, &[]);
    }

    /// Fail the creation of `group`, telling the members in `tell` that the
    /// group failed here.
    fn abandon(&mut self, group: GroupId, failure: CreateFailure, tell: &[NodeId]) {
        let Some(c) = self.created.remove(&group) else {
            return;
        };
        let Some(p) = c.pending else {
            self.created.insert(group, c);
            return;
        };
        self.deadlines.remove(&(p.deadline, group));
        let timed_out = matches!(failure, CreateFailure::TimedOut { .. });
        self.actions
            .push_back(RendezvousAction::CreateFailed { group, failure });
        let control = Control::Failed {
            suspect: Some(c.rank),
        };
        for &to in tell {
            if !self.down.contains(&to) {
                self.actions
                    .push_back(RendezvousAction::SendControl { group, to, control });
            }
        }
        self.abandoned.insert(
            group,
            Abandoned {
                digest: c.digest,
                members: c.members,
                rank: c.rank,
                timed_out,
            },
        );
        self.abandoned_order.push_back(group);
        while self.abandoned_order.len() > ABANDONED_KEPT {
            if let Some(old) = self.abandoned_order.pop_front() {
                self.abandoned.remove(&old);
            }
        }
        self.remember_ended(group);
    }

    /// A `Join` for a group whose creation failed here.
    fn answer_late_join(&mut self, group: GroupId, from: NodeId, digest: u128) {
        let Some(a) = self.abandoned.get(&group) else {
            return;
        };
        if digest != a.digest || !a.timed_out {
            self.actions.push_back(RendezvousAction::SendJoinRejected {
                group,
                to: from,
                digest: a.digest,
            });
            return;
        }
        // A member that was missing when this one gave up has turned up:
        // the others may now complete their rendezvous, with this member
        // gone. Fail the group everywhere.
        let control = Control::Failed {
            suspect: Some(a.rank),
        };
        for &to in &a.members {
            if to != self.me && !self.down.contains(&to) {
                self.actions
                    .push_back(RendezvousAction::SendControl { group, to, control });
            }
        }
    }

    /// Keep a signal for a group not created here yet.
    fn keep_early(&mut self, group: GroupId, from: NodeId, signal: Early) {
        while self.early_count >= MAX_EARLY {
            let Some(oldest) = self.early_order.pop_front() else {
                break;
            };
            if let Some(dropped) = self.early.remove(&oldest) {
                tracing::warn!(
                    group = oldest.0,
                    signals = dropped.len(),
                    "dropping the signals of a group never created here"
                );
                self.early_count -= dropped.len();
            }
        }
        self.early_count += 1;
        let entry = self.early.entry(group).or_default();
        if entry.is_empty() {
            self.early_order.push_back(group);
        }
        entry.push((from, signal));
    }
}

// ---- the digest ------------------------------------------------------------
//
// Every member hashes the group's identity — its id, its member list in rank
// order, the algorithm, the block size and the largest message size. Settings
// that are local to a member (the receive window, the create timeout) are
// left out: members may differ in them.
//
// The hash is FNV-1a 128 over a canonical little-endian encoding, written out
// here so that it is identical across processes, platforms and Rust versions
// (unlike `std`'s `DefaultHasher`).

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

/// The digest of group `id` as every member must create it: a hash of the
/// id, the member list in rank order and the [`SharedSettings`], stable
/// across processes, platforms and builds.
pub fn group_digest(id: GroupId, members: &[NodeId], shared: &SharedSettings<'_>) -> u128 {
    let mut h = Fnv1a128(FNV_OFFSET);
    h.write(b"rdmc-group");
    h.write(&[VERSION]);
    h.u64(id.0);
    h.u64(members.len() as u64);
    for node in members {
        h.write(&node.0.to_le_bytes());
    }
    h.write(&[algorithm_code(shared.algorithm)]);
    h.u64(match shared.block_size {
        BlockSize::Fixed(size) => size as u64,
        _ => 0, // automatic (a fixed size is never 0)
    });
    h.u64(shared.max_message_size);
    if shared.message_digest {
        h.write(b"digest");
    }
    // Written only when set, so that groups without them keep their digest.
    if let Some(racks) = shared.racks {
        h.write(b"racks");
        h.u64(racks.len() as u64);
        for &rack in racks {
            h.u64(u64::from(rack));
        }
    }
    if !shared.slow_members.is_empty() {
        h.write(b"slow");
        h.u64(shared.slow_members.len() as u64);
        for &rank in shared.slow_members {
            h.u64(rank as u64);
        }
    }
    // Also only when set: a group without batches is the same as before
    // them (and a build without them cannot join a group with them).
    if let Some(bytes) = shared.max_batch {
        h.write(b"batch");
        h.u64(bytes as u64);
    }
    h.0
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

    #[test]
    fn every_setting_and_the_membership_change_the_digest() {
        let base = pinned_settings();
        let members = nodes(&[0, 1, 2]);
        let d = group_digest(GroupId(5), &members, &base);
        let with = |shared: SharedSettings<'_>| group_digest(GroupId(5), &members, &shared);
        let different = [
            group_digest(GroupId(6), &members, &base),
            group_digest(GroupId(5), &nodes(&[0, 2, 1]), &base),
            group_digest(GroupId(5), &nodes(&[0, 1]), &base),
            with(SharedSettings {
                algorithm: Algorithm::Chain,
                ..base
            }),
            with(SharedSettings {
                block_size: BlockSize::AUTOMATIC,
                ..base
            }),
            with(SharedSettings {
                max_message_size: 1 << 20,
                ..base
            }),
            with(SharedSettings {
                message_digest: true,
                ..base
            }),
            with(SharedSettings {
                racks: Some(&[0, 1, 0]),
                ..base
            }),
            with(SharedSettings {
                slow_members: &[2],
                ..base
            }),
            with(SharedSettings {
                max_batch: Some(4096),
                ..base
            }),
        ];
        for (i, other) in different.iter().enumerate() {
            assert_ne!(d, *other, "case {i}");
        }
    }
}
