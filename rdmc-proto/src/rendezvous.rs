//! [`Rendezvous`]: the per-node state machine of group creation.
//!
//! Every member of a group creates it locally with the group's id, member
//! list and configuration. A member's creation completes only once every
//! other member has created the group the same way: each member hashes what
//! the members must agree on into a digest ([`group_digest`]) and sends it
//! to every other member in a `Join`, right after a short description of
//! what it hashed ([`SettingsFingerprint`]). A `Join` with a different
//! digest, or from a non-member, fails the creation with a mismatch on both
//! sides, each saying what differs ([`Mismatch`]: which settings, as the
//! fingerprints tell) — the refusing member answers with a `JoinRejected`
//! and tells the other members too; a node that has used the group's id
//! already (a group with it runs or ended there recently) answers a `Join`
//! with an `IdInUse`, and the joiner fails saying so; a member that does not
//! join before the creation's deadline fails it with a timeout naming every
//! missing member in rank order.
//!
//! Like [`GroupMember`](super::GroupMember), the machine is sans-IO: the
//! driver feeds it events ([`create`](Rendezvous::create),
//! [`handle_join_settings`](Rendezvous::handle_join_settings),
//! [`handle_join`](Rendezvous::handle_join),
//! [`handle_join_rejected`](Rendezvous::handle_join_rejected),
//! [`handle_id_in_use`](Rendezvous::handle_id_in_use),
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

use std::collections::{BTreeSet, VecDeque};

use crate::collections::{HashMap, HashSet};
use crate::ids::{GroupId, NodeId};
use crate::member::{Control, Failure, FailureKind, Rank};

mod settings;

pub use settings::{
    GroupSetting, GroupSummary, Mismatch, SettingsFingerprint, SharedSettings, group_digest,
};

/// The report of the member of rank `rank` whose creation of a group
/// failed here: it left the group.
fn gave_up(rank: Rank) -> Control {
    Control::Failed {
        suspect: Some(rank),
        kind: FailureKind::LocalShutdown,
        detector: rank,
    }
}

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
    /// `peer` created the group otherwise than this node, or refused it:
    /// `mismatch` says how.
    Mismatch {
        /// The member that disagreed (or refused).
        peer: NodeId,
        /// What it disagreed about.
        mismatch: Mismatch,
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
    /// Send `to` this node's fingerprint of `group` and then a `Join`
    /// carrying its digest (two signals, in this order:
    /// [`handle_join_settings`](Rendezvous::handle_join_settings), then
    /// [`handle_join`](Rendezvous::handle_join) at `to`).
    SendJoin {
        /// The group.
        group: GroupId,
        /// The member to tell.
        to: NodeId,
        /// This node's summary of the group.
        summary: GroupSummary,
    },
    /// Send `to` this node's fingerprint of `group` and then a
    /// `JoinRejected` carrying its digest (two signals, in this order).
    SendJoinRejected {
        /// The group.
        group: GroupId,
        /// The node to tell.
        to: NodeId,
        /// This node's summary of the group.
        summary: GroupSummary,
    },
    /// Send `to` an `IdInUse` for `group`: this node has used the id
    /// already, and refuses `to`'s `Join` ([`handle_id_in_use`](Rendezvous::handle_id_in_use)).
    SendIdInUse {
        /// The group id.
        group: GroupId,
        /// The node that joined.
        to: NodeId,
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
    Settings(SettingsFingerprint),
    Join(u128),
    JoinRejected(u128),
    Control(Control),
}

/// A group created here whose state machine is still running.
#[derive(Debug)]
struct Created<I> {
    summary: GroupSummary,
    members: Vec<NodeId>,
    /// The fingerprint each member sent last, for the `Join` or
    /// `JoinRejected` that follows it.
    heard: HashMap<NodeId, SettingsFingerprint>,
    rank: Rank,
    /// Until every other member has joined.
    pending: Option<Pending<I>>,
    /// The members whose `Join` had not come when the group completed
    /// here anyway (its root closed it): theirs may still come, and is
    /// taken without a word.
    late: Vec<NodeId>,
}

/// A creation in progress.
#[derive(Debug)]
struct Pending<I> {
    /// The other members whose matching `Join` has not arrived, in rank order.
    waiting: Vec<NodeId>,
    deadline: I,
}

/// A group whose creation failed here: a mismatch, a timeout, or the
/// group's own failure.
#[derive(Debug)]
struct Abandoned {
    summary: GroupSummary,
    members: Vec<NodeId>,
    /// What a member whose matching `Join` comes late is told.
    late_join: LateJoin,
}

/// What a member whose matching `Join` comes after the creation failed here
/// is told.
#[derive(Debug, Clone, Copy)]
enum LateJoin {
    /// The creation failed for a mismatch: the `Join` is rejected.
    Reject,
    /// The creation timed out: that this member gave up, with every other
    /// member (they may now complete their rendezvous with it gone).
    GaveUp(Control),
    /// The group failed during the creation: that failure (the others heard
    /// of it as it happened).
    Failed(Control),
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
            created: HashMap::default(),
            used: HashSet::default(),
            ended: VecDeque::new(),
            early: HashMap::default(),
            early_count: 0,
            early_order: VecDeque::new(),
            down: HashSet::default(),
            deadlines: BTreeSet::new(),
            abandoned: HashMap::default(),
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
        let heard: usize = self.created.values().map(|c| c.heard.len()).sum();
        self.created.len()
            + heard
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
    /// `summary` ([`GroupSummary::new`]); the creation fails if not every
    /// other member joined by `deadline`.
    ///
    /// The `Join`s go out first; then the signals that came for the group
    /// before it was created here are handled in arrival order.
    ///
    /// # Panics
    ///
    /// If this node is not in `members` or `group` is in use
    /// ([`is_used`](Self::is_used)).
    pub fn create(
        &mut self,
        group: GroupId,
        members: Vec<NodeId>,
        summary: GroupSummary,
        deadline: I,
    ) {
        let rank = members
            .iter()
            .position(|&n| n == self.me)
            .expect("this node is a member");
        assert!(self.used.insert(group), "group id in use");
        let waiting: Vec<NodeId> = members.iter().copied().filter(|&n| n != self.me).collect();
        for &to in &waiting {
            if !self.down.contains(&to) {
                self.actions
                    .push_back(RendezvousAction::SendJoin { group, to, summary });
            }
        }
        self.deadlines.insert((deadline, group));
        self.created.insert(
            group,
            Created {
                summary,
                members,
                heard: HashMap::default(),
                rank,
                pending: Some(Pending { waiting, deadline }),
                late: Vec::new(),
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

    /// The fingerprint of `group` as `from` created it, which `from` sends
    /// right before its `Join` or `JoinRejected`: kept for that signal.
    pub fn handle_join_settings(
        &mut self,
        from: NodeId,
        group: GroupId,
        fingerprint: SettingsFingerprint,
    ) {
        match self.created.get_mut(&group) {
            // Only a member's counts (a non-member's mismatch is that).
            Some(c) if c.members.contains(&from) => {
                c.heard.insert(from, fingerprint);
            }
            Some(_) => {}
            None if !self.used.contains(&group) => {
                self.keep_early(group, from, Early::Settings(fingerprint));
            }
            None => {}
        }
    }

    /// A `Join` from `from` for `group` with `digest`.
    pub fn handle_join(&mut self, from: NodeId, group: GroupId, digest: u128) {
        let Some(c) = self.created.get_mut(&group) else {
            if self.abandoned.contains_key(&group) {
                self.answer_late_join(group, from, digest);
            } else if self.used.contains(&group) {
                // A new creation with an id this node has used (a group
                // created here completes only once every member's `Join`
                // came: none of its own comes after).
                tracing::warn!(group = group.0, peer = from.0, "join for a used id refused");
                self.actions
                    .push_back(RendezvousAction::SendIdInUse { group, to: from });
            } else {
                self.keep_early(group, from, Early::Join(digest));
            }
            return;
        };
        let theirs = c.heard.remove(&from);
        let mine = c.summary;
        if c.pending.is_none() && digest == mine.digest && c.late.contains(&from) {
            // A Join still on its way when the group completed.
            c.late.retain(|&n| n != from);
            return;
        }
        if c.pending.is_none() {
            // The group runs here: every member's matching `Join` came, so
            // this one is of a new creation with the id in use here — a
            // new run of a member (same settings: a restarted process)
            // included, which would otherwise wait for its peers' Joins
            // until its create timeout.
            tracing::warn!(
                group = group.0,
                peer = from.0,
                "join for a running group's id refused"
            );
            self.actions
                .push_back(RendezvousAction::SendIdInUse { group, to: from });
            return;
        }
        if digest == mine.digest && c.members.contains(&from) {
            if let Some(p) = &mut c.pending {
                p.waiting.retain(|&n| n != from);
            }
            self.complete_if_joined(group);
            return;
        }
        let mismatch = if c.members.contains(&from) {
            Mismatch::Settings(theirs.map_or_else(Vec::new, |t| mine.fingerprint.differences(t)))
        } else {
            Mismatch::NotAMember
        };
        tracing::warn!(
            group = group.0,
            peer = from.0,
            theirs = format_args!("{digest:032x}"),
            %mismatch,
            "join with a different membership or configuration refused"
        );
        self.actions.push_back(RendezvousAction::SendJoinRejected {
            group,
            to: from,
            summary: mine,
        });
        self.refuse(group, from, true, mismatch);
    }

    /// A `JoinRejected` from `from` for `group`, carrying `from`'s digest.
    pub fn handle_join_rejected(&mut self, from: NodeId, group: GroupId, digest: u128) {
        let Some(c) = self.created.get_mut(&group) else {
            if !self.abandoned.contains_key(&group) && !self.used.contains(&group) {
                self.keep_early(group, from, Early::JoinRejected(digest));
            }
            return;
        };
        let theirs = c.heard.remove(&from);
        if c.pending.is_some() {
            tracing::warn!(group = group.0, peer = from.0, "our join was refused");
            // A peer with our own digest refused because of a third
            // member; it told every member itself.
            let (relay, mismatch) = if digest == c.summary.digest {
                (false, Mismatch::Refused)
            } else if !c.members.contains(&from) {
                (true, Mismatch::NotAMember)
            } else {
                let differ = theirs.map_or_else(Vec::new, |t| c.summary.fingerprint.differences(t));
                (true, Mismatch::Settings(differ))
            };
            self.refuse(group, from, relay, mismatch);
        } else if c.members.contains(&from) {
            // The rendezvous completed here, but a member refused the group
            // since (it found a mismatch with a non-member).
            tracing::warn!(group = group.0, peer = from.0, "a member refused the group");
            self.actions
                .push_back(RendezvousAction::PeerRefused { group, peer: from });
        }
    }

    /// An `IdInUse` from `from` for `group`: `from` has used the id already
    /// and refused this node's `Join`. A creation in progress fails,
    /// naming `from` ([`Mismatch::IdInUse`]); otherwise it is stale, and
    /// ignored.
    pub fn handle_id_in_use(&mut self, from: NodeId, group: GroupId) {
        let refused = self
            .created
            .get(&group)
            .is_some_and(|c| c.pending.is_some() && c.members.contains(&from));
        if refused {
            tracing::warn!(
                group = group.0,
                peer = from.0,
                "the id is in use at a member"
            );
            // Every member's `Join` to it gets the same answer.
            self.refuse(group, from, false, Mismatch::IdInUse);
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
    ///
    /// `failure` is the group's failure, if it failed: if that was before
    /// its creation completed here, a member whose `Join` comes late is
    /// told of it rather than refused as reusing the id.
    pub fn handle_group_ended(&mut self, group: GroupId, failure: Option<&Failure>) {
        let Some(c) = self.created.remove(&group) else {
            return;
        };
        if let Some(p) = c.pending {
            self.deadlines.remove(&(p.deadline, group));
            if let Some(f) = failure {
                let news = Control::Failed {
                    suspect: f.suspect,
                    kind: f.kind,
                    detector: c.rank,
                };
                self.keep_abandoned(group, c.summary, c.members, LateJoin::Failed(news));
            }
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
        let Some(c) = self.created.get_mut(&group) else {
            return;
        };
        if let Some(p) = c.pending.take() {
            c.late = p.waiting;
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
            let pending = self.created.get(&group).and_then(|c| {
                let p = c.pending.as_ref()?;
                let rank_of = |n: NodeId| c.members.iter().position(|&m| m == n);
                // The first missing member but `to`, by rank, as the cause
                // told to `to`; this member itself (it gave up) if `to` is
                // the only one missing.
                let report_to = |to: NodeId| match p.waiting.iter().find(|&&n| n != to) {
                    Some(&cause) => Control::Failed {
                        suspect: rank_of(cause),
                        kind: FailureKind::Unreachable,
                        detector: c.rank,
                    },
                    None => gave_up(c.rank),
                };
                let reports: Vec<(NodeId, Control)> = (c.members.iter())
                    .filter(|&&n| n != self.me)
                    .map(|&n| (n, report_to(n)))
                    .collect();
                Some((p.waiting.clone(), reports))
            });
            if let Some((missing, reports)) = pending {
                // Every other member is told that the group failed, the
                // first missing member the cause:
                // - one that joined may have completed its rendezvous (it
                //   heard from a member this one never did, across a link
                //   cut between the two), and would otherwise wait for this
                //   one, or blame it when it leaves (one still creating the
                //   group fails its creation with the report, or the
                //   root's verdict on it, naming the same missing member);
                // - one missing is told of the first other missing member
                //   (its own `Join` may have been lost on its way through
                //   that one), or that this one gave up if it is the only
                //   one missing. It fails as soon as it creates the group.
                for (to, control) in reports {
                    if !self.down.contains(&to) {
                        self.actions.push_back(RendezvousAction::SendControl {
                            group,
                            to,
                            control,
                        });
                    }
                }
                self.abandon(group, CreateFailure::TimedOut { missing });
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
                Replay::Signal(group, from, Early::Settings(fingerprint)) => {
                    self.handle_join_settings(from, group, fingerprint);
                }
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

    /// The creation of `group` failed for `mismatch` with `peer`: tell the
    /// other members (if `relay`) and fail it here.
    fn refuse(&mut self, group: GroupId, peer: NodeId, relay: bool, mismatch: Mismatch) {
        let Some(c) = self.created.get(&group) else {
            return;
        };
        if relay {
            for &to in &c.members {
                if to != self.me && to != peer && !self.down.contains(&to) {
                    self.actions.push_back(RendezvousAction::SendJoinRejected {
                        group,
                        to,
                        summary: c.summary,
                    });
                }
            }
        }
        self.abandon(group, CreateFailure::Mismatch { peer, mismatch });
    }

    /// Fail the creation of `group` here (the caller tells the others what
    /// they need to hear).
    fn abandon(&mut self, group: GroupId, failure: CreateFailure) {
        let Some(c) = self.created.remove(&group) else {
            return;
        };
        let Some(p) = c.pending else {
            self.created.insert(group, c);
            return;
        };
        self.deadlines.remove(&(p.deadline, group));
        let late_join = match failure {
            CreateFailure::TimedOut { .. } => LateJoin::GaveUp(gave_up(c.rank)),
            _ => LateJoin::Reject,
        };
        self.actions
            .push_back(RendezvousAction::CreateFailed { group, failure });
        self.keep_abandoned(group, c.summary, c.members, late_join);
        self.remember_ended(group);
    }

    /// Remember a group whose creation failed here, for late `Join`s.
    fn keep_abandoned(
        &mut self,
        group: GroupId,
        summary: GroupSummary,
        members: Vec<NodeId>,
        late_join: LateJoin,
    ) {
        let abandoned = Abandoned {
            summary,
            members,
            late_join,
        };
        self.abandoned.insert(group, abandoned);
        self.abandoned_order.push_back(group);
        while self.abandoned_order.len() > ABANDONED_KEPT {
            if let Some(old) = self.abandoned_order.pop_front() {
                self.abandoned.remove(&old);
            }
        }
    }

    /// A `Join` for a group whose creation failed here.
    fn answer_late_join(&mut self, group: GroupId, from: NodeId, digest: u128) {
        let Some(a) = self.abandoned.get(&group) else {
            return;
        };
        let control = match a.late_join {
            LateJoin::GaveUp(control) if digest == a.summary.digest => control,
            LateJoin::Failed(control) if digest == a.summary.digest => {
                self.actions.push_back(RendezvousAction::SendControl {
                    group,
                    to: from,
                    control,
                });
                return;
            }
            _ => {
                self.actions.push_back(RendezvousAction::SendJoinRejected {
                    group,
                    to: from,
                    summary: a.summary,
                });
                return;
            }
        };
        // A member that was missing when this one gave up has turned up:
        // the others may now complete their rendezvous, with this member
        // gone. Fail the group everywhere.
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
