//! The per-node actor: owns the transport and the state machines of all the
//! node's groups, feeds them completions and commands, carries out their
//! actions and turns their outcomes into wakeups of the user's futures and
//! streams.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio::time;
use tracing::Instrument;

use super::rendezvous::group_digest;
use super::timing::{Lap, MessageTimings, Stopwatch};

use crate::config::GroupConfig;
use crate::error::{Error, FailureKind, MembershipError};
use crate::ids::{GroupId, NodeId};
use crate::proto::{
    Action, Control, Failure, FailureReason, GroupMember, MemberConfig, MemberError, Rank,
};
use crate::transport::{BlockRef, Completion, Completions, MessageBuffer, Signal, Transport};
use crate::wait::{CompletionMode, Next, WaitPolicy};

/// A message delivered to a receiver.
///
/// Two messages are equal when their group, sequence number and bytes are;
/// [`timings`](Self::timings) are not compared.
#[non_exhaustive]
#[derive(Clone, Debug)]
pub struct Message {
    /// The group it was multicast in.
    pub group: GroupId,
    /// Its position in the root's send order, from 0.
    pub seq: u64,
    /// Its bytes, exactly as the root sent them.
    pub data: Bytes,
    /// Where this member's time went while receiving (and relaying) it.
    pub timings: MessageTimings,
}

impl PartialEq for Message {
    fn eq(&self, other: &Self) -> bool {
        self.group == other.group && self.seq == other.seq && self.data == other.data
    }
}

impl Eq for Message {}

/// The receiving end of a group's deliveries.
pub(crate) type Deliveries = mpsc::UnboundedReceiver<Result<Message, Error>>;

/// What a node's handles ask of its actor.
#[derive(Debug)]
pub(crate) enum Command {
    CreateGroup {
        id: GroupId,
        members: Vec<NodeId>,
        config: GroupConfig,
        reply: CreateReply,
    },
    Send {
        group: GroupId,
        data: Bytes,
        reply: SendReply,
    },
    Close {
        group: GroupId,
        reply: oneshot::Sender<Result<(), Error>>,
    },
    /// The application took a delivered message from the group's stream.
    Consumed {
        group: GroupId,
    },
    /// The last handle of the group was dropped.
    Leave {
        group: GroupId,
    },
    Shutdown,
}

/// Where a root's send future learns its outcome.
type SendReply = oneshot::Sender<Result<MessageTimings, Error>>;

/// Where a `create_group` future learns its outcome.
pub(crate) type CreateReply = oneshot::Sender<Result<Deliveries, Error>>;

/// Most events handled before the actor yields to other tasks.
const BATCH: usize = 256;
/// Most control messages kept for groups this node has not created yet.
const MAX_EARLY: usize = 4096;

pub(crate) struct Actor<T> {
    me: NodeId,
    transport: T,
    commands: mpsc::UnboundedReceiver<Command>,
    completions: Completions,
    mode: CompletionMode,
    groups: HashMap<GroupId, GroupState>,
    /// Every group id ever created here (never reused).
    used: HashSet<GroupId>,
    /// Control messages for groups not created here yet.
    early: HashMap<GroupId, Vec<Completion>>,
    early_count: usize,
    /// Nodes known to be gone.
    down: HashSet<NodeId>,
    /// When each creation rendezvous in progress gives up.
    deadlines: BTreeSet<(time::Instant, GroupId)>,
    /// Groups whose creation failed here for a mismatch or a timeout, to
    /// answer `Join`s that come late.
    abandoned: HashMap<GroupId, Abandoned>,
    /// The group whose early signals are being replayed: its rendezvous
    /// completes only after all of them (a `JoinRejected` may follow the
    /// last `Join`).
    replaying: Option<GroupId>,
}

/// A creation rendezvous in progress: the group exists locally, but the
/// user gets its handle only once every other member has joined.
///
/// The group's state machine runs from local creation on: a peer that
/// finished its rendezvous earlier may already send ready-for-block or
/// failures, and the core handles peers at different stages already (it
/// posts receives before it says ready, and nothing is sent to a receiver
/// that has not said ready). Holding the state machine back would need a
/// second buffer for its traffic and gain nothing: no message can be sent
/// before the root's user has the handle, i.e. before the root's rendezvous
/// completed, which needs every member's matching `Join`. What keeps a
/// mismatch from showing up as a protocol violation instead is the order
/// of signals: each member sends its `Join`s before anything else of the
/// group, and signals are FIFO per link, so a peer checks the `Join` first.
struct Rendezvous {
    /// The other members whose matching `Join` has not arrived, in rank order.
    waiting: Vec<NodeId>,
    deadline: time::Instant,
    reply: CreateReply,
    deliveries: Deliveries,
}

/// A group whose creation failed here for a mismatch or a timeout.
struct Abandoned {
    digest: u128,
    members: Vec<NodeId>,
    rank: Rank,
    timed_out: bool,
}

/// Root: a message submitted and not yet complete.
struct Sending {
    seq: u64,
    data: Bytes,
    reply: SendReply,
    watch: Stopwatch,
}

struct GroupState {
    id: GroupId,
    member: GroupMember,
    members: Vec<NodeId>,
    rank_of: HashMap<NodeId, Rank>,
    block_size: usize,
    /// Where each message's first block lands before its size is known.
    bounce: Option<Arc<MessageBuffer>>,
    /// The message being received.
    receiving: Option<(u64, Arc<MessageBuffer>)>,
    /// The timings of the message being received.
    receive_watch: Option<Stopwatch>,
    /// When the completion being handled was taken from the transport.
    event_at: Instant,
    /// Whether, after the last event, the member only waited for a
    /// ready-for-block (for [`MessageTimings::waiting`]).
    waiting_for_ready: bool,
    /// Root: messages submitted and not yet complete, in order.
    sending: VecDeque<Sending>,
    deliveries: Option<mpsc::UnboundedSender<Result<Message, Error>>>,
    close_waiters: Vec<oneshot::Sender<Result<(), Error>>>,
    outcome: Option<Result<(), Error>>,
    /// Whether the user's handle is gone.
    left: bool,
    span: tracing::Span,
    /// What every member must agree on (see `rendezvous`).
    digest: u128,
    /// Until every member has joined.
    rendezvous: Option<Rendezvous>,
}

impl<T: Transport> Actor<T> {
    pub(crate) fn new(
        me: NodeId,
        transport: T,
        commands: mpsc::UnboundedReceiver<Command>,
        completions: Completions,
        mode: CompletionMode,
    ) -> Self {
        Actor {
            me,
            transport,
            commands,
            completions,
            mode,
            groups: HashMap::new(),
            used: HashSet::new(),
            early: HashMap::new(),
            early_count: 0,
            down: HashSet::new(),
            deadlines: BTreeSet::new(),
            abandoned: HashMap::new(),
            replaying: None,
        }
    }

    /// Run until shut down, or until the transport goes away.
    pub(crate) async fn run(mut self) {
        let span = tracing::info_span!("rdmc_node", node = self.me.0);
        async move {
            let mut wait = WaitPolicy::new(self.mode);
            loop {
                if !self.deadlines.is_empty() {
                    self.expire_rendezvous();
                }
                // Handle what is already there, a bounded batch at a time.
                let mut handled = 0;
                while handled < BATCH {
                    match self.completions.try_recv() {
                        Ok(c) => self.on_completion(c),
                        Err(mpsc::error::TryRecvError::Empty) => break,
                        Err(mpsc::error::TryRecvError::Disconnected) => {
                            return self.transport_gone();
                        }
                    }
                    handled += 1;
                }
                while handled < BATCH {
                    match self.commands.try_recv() {
                        Ok(Command::Shutdown) => return self.shutdown().await,
                        Ok(cmd) => self.on_command(cmd),
                        Err(mpsc::error::TryRecvError::Empty) => break,
                        Err(mpsc::error::TryRecvError::Disconnected) => {
                            return self.shutdown().await;
                        }
                    }
                    handled += 1;
                }
                match wait.after_pass(handled) {
                    Next::Again | Next::Spin => {
                        tokio::task::yield_now().await;
                        continue;
                    }
                    Next::Sleep => {}
                }
                let deadline = self.deadlines.first().map(|&(at, _)| at);
                tokio::select! {
                    biased;
                    c = self.completions.recv() => match c {
                        Some(c) => self.on_completion(c),
                        None => return self.transport_gone(),
                    },
                    cmd = self.commands.recv() => match cmd {
                        Some(Command::Shutdown) | None => return self.shutdown().await,
                        Some(cmd) => self.on_command(cmd),
                    },
                    // Expired rendezvous are handled at the top of the loop.
                    () = time::sleep_until(deadline.unwrap_or_else(time::Instant::now)),
                        if deadline.is_some() => {}
                }
            }
        }
        .instrument(span)
        .await
    }

    fn on_command(&mut self, cmd: Command) {
        match cmd {
            Command::CreateGroup {
                id,
                members,
                config,
                reply,
            } => self.create_group(id, members, config, reply),
            Command::Send { group, data, reply } => self.send(group, data, reply),
            Command::Close { group, reply } => self.close(group, reply),
            Command::Consumed { group } => {
                self.with_member(group, GroupMember::message_consumed);
            }
            Command::Leave { group } => self.leave(group),
            Command::Shutdown => unreachable!("handled by the loop"),
        }
    }

    /// Create group `id` here and start its rendezvous: `reply` gets the
    /// group's deliveries once every other member has joined.
    fn create_group(
        &mut self,
        id: GroupId,
        members: Vec<NodeId>,
        config: GroupConfig,
        reply: CreateReply,
    ) {
        let (member, rank_of, rank) = match self.new_member(id, &members, &config) {
            Ok(new) => new,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        self.used.insert(id);
        let digest = group_digest(id, &members, &config);
        let now = time::Instant::now();
        let deadline = now
            .checked_add(config.create_timeout())
            .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600));
        let span = tracing::debug_span!(
            "rdmc_group",
            group = id.0,
            rank,
            nodes = members.len(),
            algorithm = %config.algorithm()
        );
        span.in_scope(|| tracing::info!(digest = format_args!("{digest:032x}"), "group created"));
        let (tx, rx) = mpsc::unbounded_channel();
        let others: Vec<NodeId> = members.iter().copied().filter(|&n| n != self.me).collect();
        let down: Vec<Rank> = others
            .iter()
            .filter(|n| self.down.contains(n))
            .map(|n| rank_of[n])
            .collect();
        // The Joins go out before anything else of the group: signals are
        // FIFO per link, so every peer checks this member's Join first.
        for &peer in &others {
            if !self.down.contains(&peer) {
                self.transport
                    .send_signal(id, peer, Signal::Join { digest });
            }
        }
        self.deadlines.insert((deadline, id));
        self.groups.insert(
            id,
            GroupState {
                id,
                member,
                bounce: (rank > 0).then(|| self.transport.alloc_buffer(config.block_size())),
                members,
                rank_of,
                block_size: config.block_size(),
                receiving: None,
                receive_watch: None,
                event_at: Instant::now(),
                waiting_for_ready: false,
                sending: VecDeque::new(),
                deliveries: Some(tx),
                close_waiters: Vec::new(),
                outcome: None,
                left: false,
                span,
                digest,
                rendezvous: Some(Rendezvous {
                    waiting: others,
                    deadline,
                    reply,
                    deliveries: rx,
                }),
            },
        );
        self.drive(id);
        if let Some(&suspect) = down.first() {
            self.with_member(id, |m| m.handle_peer_failure(Some(suspect)));
        }
        if let Some(early) = self.early.remove(&id) {
            self.early_count -= early.len();
            self.replaying = Some(id);
            for c in early {
                self.on_completion(c);
            }
            self.replaying = None;
        }
        self.maybe_complete_rendezvous(id);
    }

    /// Check a creation request; the new member's state machine, the rank of
    /// each member, and this node's rank.
    fn new_member(
        &self,
        id: GroupId,
        members: &[NodeId],
        config: &GroupConfig,
    ) -> Result<(GroupMember, HashMap<NodeId, Rank>, Rank), Error> {
        if members.is_empty() {
            return Err(MembershipError::Empty.into());
        }
        let mut rank_of = HashMap::with_capacity(members.len());
        for (rank, &node) in members.iter().enumerate() {
            if rank_of.insert(node, rank).is_some() {
                return Err(MembershipError::Duplicate(node).into());
            }
        }
        let Some(&rank) = rank_of.get(&self.me) else {
            return Err(MembershipError::NotAMember(self.me).into());
        };
        if config.block_size() == 0 {
            return Err(Error::InvalidConfig(
                "the block size must be at least 1 byte",
            ));
        }
        if self.used.contains(&id) {
            return Err(Error::GroupIdInUse(id));
        }
        let member = GroupMember::new(MemberConfig {
            algorithm: config.algorithm(),
            nodes: members.len(),
            rank,
            block_size: config.block_size(),
            max_message_size: config.max_message_size(),
            receive_window: config.receive_window(),
        })
        .map_err(|_| Error::InvalidConfig("the group's schedule cannot be built"))?;
        Ok((member, rank_of, rank))
    }

    /// Hand the group to the user if every other member has joined.
    fn maybe_complete_rendezvous(&mut self, id: GroupId) {
        if self.replaying == Some(id) {
            return;
        }
        let Some(g) = self.groups.get_mut(&id) else {
            return;
        };
        if !g.rendezvous.as_ref().is_some_and(|r| r.waiting.is_empty()) {
            return;
        }
        let Some(rv) = g.rendezvous.take() else {
            return;
        };
        self.deadlines.remove(&(rv.deadline, id));
        g.span.in_scope(|| tracing::info!("every member joined"));
        if rv.reply.send(Ok(rv.deliveries)).is_err() {
            // The create future was dropped: nobody will ever use the group.
            self.leave(id);
        }
    }

    /// A `Join` or `JoinRejected` from `from` for `group`.
    fn on_rendezvous_signal(&mut self, group: GroupId, from: NodeId, signal: Signal) {
        let Some(g) = self.groups.get_mut(&group) else {
            if self.abandoned.contains_key(&group) {
                if let Signal::Join { digest } = signal {
                    self.answer_late_join(group, from, digest);
                }
            } else if !self.used.contains(&group) {
                self.keep_early(Completion::Signal {
                    group,
                    from,
                    signal,
                });
            }
            return;
        };
        let mine = g.digest;
        let member = g.rank_of.get(&from).copied();
        let pending = g.rendezvous.is_some();
        let _enter = g.span.clone().entered();
        match signal {
            Signal::Join { digest } if digest == mine && member.is_some() => {
                if let Some(rv) = &mut g.rendezvous {
                    rv.waiting.retain(|&n| n != from);
                }
                self.maybe_complete_rendezvous(group);
            }
            Signal::Join { digest } => {
                tracing::warn!(
                    peer = from.0,
                    theirs = format_args!("{digest:032x}"),
                    "join with a different membership or configuration refused"
                );
                self.transport
                    .send_signal(group, from, Signal::JoinRejected { digest: mine });
                if pending {
                    self.refuse(group, from, true);
                }
            }
            Signal::JoinRejected { digest } if pending => {
                tracing::warn!(peer = from.0, "our join was refused");
                // A peer with our own digest refused because of a third
                // member; it told every member itself.
                self.refuse(group, from, digest != mine);
            }
            Signal::JoinRejected { .. } => {
                // The rendezvous completed here, but a member refused the
                // group since (it found a mismatch with a non-member).
                if let Some(rank) = member {
                    tracing::warn!(peer = from.0, "a member refused the group");
                    self.with_member(group, |m| m.handle_peer_failure(Some(rank)));
                }
            }
            Signal::Group(_) => unreachable!("routed to the group's state machine"),
        }
    }

    /// The rendezvous of `group` failed for a mismatch with `peer`: tell the
    /// other members (if `relay`) and fail the local create.
    fn refuse(&mut self, group: GroupId, peer: NodeId, relay: bool) {
        let Some(g) = self.groups.get(&group) else {
            return;
        };
        if relay {
            for &n in &g.members {
                if n != self.me && n != peer && !self.down.contains(&n) {
                    self.transport
                        .send_signal(group, n, Signal::JoinRejected { digest: g.digest });
                }
            }
        }
        self.abandon(group, Error::MembershipMismatch { group, peer }, &[]);
    }

    /// Fail the create of `group` with `error` and drop the group here,
    /// telling only the members in `tell` that it failed.
    ///
    /// A mismatch was told with `JoinRejected`s already. After a timeout the
    /// missing members are told (they fail as soon as they create the
    /// group); the members that joined are not: they are waiting for the
    /// same missing members and time out too — each with its own, clear
    /// error, not this member's failure — or, if a missing member turns up
    /// before, they are told then (see `answer_late_join`).
    fn abandon(&mut self, group: GroupId, error: Error, tell: &[NodeId]) {
        let Some(mut g) = self.groups.remove(&group) else {
            return;
        };
        let Some(rv) = g.rendezvous.take() else {
            self.groups.insert(group, g);
            return;
        };
        self.deadlines.remove(&(rv.deadline, group));
        self.transport.release_group(group);
        let failed = Signal::Group(Control::Failed {
            suspect: Some(g.member.config().rank),
        });
        for &n in tell {
            if !self.down.contains(&n) {
                self.transport.send_signal(group, n, failed);
            }
        }
        g.span
            .in_scope(|| tracing::warn!(%error, "group not created"));
        let timed_out = matches!(error, Error::CreateTimedOut { .. });
        let _ = rv.reply.send(Err(error));
        self.abandoned.insert(
            group,
            Abandoned {
                digest: g.digest,
                rank: g.member.config().rank,
                members: g.members,
                timed_out,
            },
        );
    }

    /// A `Join` for a group whose creation failed here.
    fn answer_late_join(&mut self, group: GroupId, from: NodeId, digest: u128) {
        let Some(a) = self.abandoned.get(&group) else {
            return;
        };
        if digest != a.digest || !a.timed_out {
            self.transport
                .send_signal(group, from, Signal::JoinRejected { digest: a.digest });
            return;
        }
        // A member that was missing when this one gave up has turned up:
        // the others may now complete their rendezvous, with this member
        // gone. Fail the group everywhere.
        let failed = Signal::Group(Control::Failed {
            suspect: Some(a.rank),
        });
        for &n in &a.members {
            if n != self.me && !self.down.contains(&n) {
                self.transport.send_signal(group, n, failed);
            }
        }
    }

    /// Fail every rendezvous whose deadline has passed.
    fn expire_rendezvous(&mut self) {
        let now = time::Instant::now();
        while let Some(&(deadline, group)) = self.deadlines.first() {
            if deadline > now {
                break;
            }
            self.deadlines.pop_first();
            let missing = self
                .groups
                .get(&group)
                .and_then(|g| g.rendezvous.as_ref())
                .map(|rv| rv.waiting.clone());
            if let Some(missing) = missing {
                let tell = missing.clone();
                self.abandon(group, Error::CreateTimedOut { group, missing }, &tell);
            }
        }
    }

    /// Keep a control message for a group not created here yet.
    fn keep_early(&mut self, c: Completion) {
        let Completion::Signal { group, .. } = &c else {
            return;
        };
        let group = *group;
        if self.early_count < MAX_EARLY {
            self.early_count += 1;
            self.early.entry(group).or_default().push(c);
        } else {
            tracing::warn!(
                group = group.0,
                "dropping control message for unknown group"
            );
        }
    }

    fn send(&mut self, group: GroupId, data: Bytes, reply: SendReply) {
        let started = Instant::now();
        let Some(g) = self.groups.get_mut(&group) else {
            let _ = reply.send(Err(Error::Closed(group)));
            return;
        };
        match g.member.submit(data.len() as u64) {
            Ok(seq) => {
                g.sending.push_back(Sending {
                    seq,
                    data,
                    reply,
                    watch: Stopwatch::start(started),
                });
                self.drive(group);
            }
            Err(e) => {
                let _ = reply.send(Err(member_error(g, e)));
            }
        }
    }

    fn close(&mut self, group: GroupId, reply: oneshot::Sender<Result<(), Error>>) {
        let Some(g) = self.groups.get_mut(&group) else {
            let _ = reply.send(Err(Error::Closed(group)));
            return;
        };
        if let Some(outcome) = &g.outcome {
            let _ = reply.send(outcome.clone());
            return;
        }
        g.close_waiters.push(reply);
        if let Err(e) = g.member.close() {
            let e = member_error(g, e);
            for w in g.close_waiters.drain(..) {
                let _ = w.send(Err(e.clone()));
            }
        }
        self.drive(group);
    }

    fn leave(&mut self, group: GroupId) {
        let Some(g) = self.groups.get_mut(&group) else {
            return;
        };
        g.left = true;
        if g.outcome.is_none() {
            g.member.shutdown();
        }
        self.drive(group);
    }

    fn on_completion(&mut self, c: Completion) {
        let now = Instant::now();
        let (group, peer) = match &c {
            Completion::PeerDown { node } => {
                let node = *node;
                tracing::warn!(peer = node.0, "peer down");
                self.down.insert(node);
                let affected: Vec<(GroupId, Rank)> = self
                    .groups
                    .iter()
                    .filter_map(|(id, g)| g.rank_of.get(&node).map(|&r| (*id, r)))
                    .collect();
                for (id, rank) in affected {
                    self.with_member(id, |m| m.handle_peer_failure(Some(rank)));
                }
                return;
            }
            Completion::Received { group, from, .. } => (*group, *from),
            Completion::Sent { group, to } => (*group, *to),
            Completion::Signal { group, from, .. } => (*group, *from),
            Completion::TransferFailed { group, peer, .. } => (*group, *peer),
        };
        if let Completion::Signal {
            signal: signal @ (Signal::Join { .. } | Signal::JoinRejected { .. }),
            ..
        } = c
        {
            return self.on_rendezvous_signal(group, peer, signal);
        }
        let Some(g) = self.groups.get_mut(&group) else {
            if !self.used.contains(&group) && matches!(c, Completion::Signal { .. }) {
                self.keep_early(c);
            }
            return;
        };
        let Some(&rank) = g.rank_of.get(&peer) else {
            tracing::warn!(
                group = group.0,
                peer = peer.0,
                "traffic from a non-member dropped"
            );
            return;
        };
        let _enter = g.span.clone().entered();
        g.event_at = now;
        // The interval this event ends was spent as the member's state
        // after the previous event says.
        let lap = if g.waiting_for_ready {
            Lap::Waiting
        } else {
            Lap::Transfer
        };
        // The message this node is busy with: the one it receives, or the
        // root's oldest unfinished one.
        if let Some(watch) = g.receive_watch.as_mut() {
            watch.lap(now, lap);
        } else if let Some(s) = g.sending.front_mut() {
            s.watch.lap(now, lap);
        }
        match c {
            Completion::Received { immediate, len, .. } => {
                g.member.handle_block(rank, immediate, len)
            }
            Completion::Sent { .. } => g.member.handle_send_complete(rank),
            Completion::Signal {
                signal: Signal::Group(control),
                ..
            } => g.member.handle_control(rank, control),
            Completion::Signal { .. } => unreachable!("rendezvous signals are handled above"),
            Completion::TransferFailed { error, .. } => {
                tracing::warn!(peer = peer.0, error, "transfer failed");
                g.member.handle_peer_failure(Some(rank))
            }
            Completion::PeerDown { .. } => unreachable!("handled above"),
        }
        self.drive(group);
    }

    fn with_member(&mut self, group: GroupId, f: impl FnOnce(&mut GroupMember)) {
        if let Some(g) = self.groups.get_mut(&group) {
            f(&mut g.member);
            self.drive(group);
        }
    }

    /// Carry out the group's pending actions.
    fn drive(&mut self, group: GroupId) {
        let Some(g) = self.groups.get_mut(&group) else {
            return;
        };
        let _enter = g.span.clone().entered();
        while let Some(action) = g.member.poll_action() {
            execute(g, &mut self.transport, action);
        }
        g.waiting_for_ready = g.member.waiting_for_ready();
        if let Some(watch) = g.receive_watch.as_mut()
            && !watch.setup_ended()
        {
            watch.end_setup(Instant::now());
        }
        if let Some(outcome) = &g.outcome
            && let Some(rv) = g.rendezvous.take()
        {
            // The group failed before every member joined (a member is
            // down, or another member said so): so does its creation.
            let error = outcome.clone().err().unwrap_or(Error::Closed(group));
            self.deadlines.remove(&(rv.deadline, group));
            let _ = rv.reply.send(Err(error));
            g.left = true;
        }
        if g.outcome.is_some() && g.left {
            self.groups.remove(&group);
        }
    }

    fn transport_gone(mut self) {
        tracing::warn!("transport gone; failing every group");
        self.fail_all();
    }

    /// Fail every open group (telling the other members), then let the
    /// transport put everything queued on the wire before it goes.
    async fn shutdown(mut self) {
        tracing::debug!("node shutting down");
        self.fail_all();
        self.transport.flush().await;
    }

    fn fail_all(&mut self) {
        let ids: Vec<GroupId> = self.groups.keys().copied().collect();
        for g in self.groups.values_mut() {
            if let Some(rv) = g.rendezvous.take() {
                let _ = rv.reply.send(Err(Error::NodeShutDown(self.me)));
                g.left = true;
            }
        }
        for id in ids {
            self.with_member(id, GroupMember::shutdown);
        }
    }
}

fn member_error(g: &GroupState, e: MemberError) -> Error {
    match e {
        MemberError::NotRoot => Error::NotRoot(g.id),
        MemberError::Closed => Error::Closed(g.id),
        MemberError::Failed(f) => failure_error(g, &f),
        MemberError::TooLarge { size, max } => Error::MessageTooLarge { size, max },
    }
}

fn failure_error(g: &GroupState, f: &Failure) -> Error {
    let kind = match &f.reason {
        FailureReason::PeerUnreachable => FailureKind::Unreachable,
        FailureReason::Reported { by } => FailureKind::ReportedBy(g.members[*by]),
        FailureReason::ProtocolViolation { detail } => {
            FailureKind::ProtocolViolation(detail.clone())
        }
        FailureReason::LocalShutdown => FailureKind::LocalShutdown,
    };
    Error::GroupFailed {
        group: g.id,
        suspect: f.suspect.map(|r| g.members[r]),
        kind,
    }
}

fn execute<T: Transport>(g: &mut GroupState, transport: &mut T, action: Action) {
    let id = g.id;
    match action {
        Action::PostFirstBlockRecv { from } => {
            let bounce = g.bounce.as_ref().expect("non-roots have a bounce buffer");
            transport.post_recv(id, g.members[from], bounce.region(0, g.block_size));
        }
        Action::BeginMessage {
            seq,
            size,
            first_block,
            first_block_len,
        } => {
            let Ok(size) = usize::try_from(size) else {
                unreachable!("sizes above max_message_size are refused by the core");
            };
            let mut watch = Stopwatch::start(g.event_at);
            let buf = transport.alloc_buffer(size);
            let bounce = g.bounce.as_ref().expect("non-roots have a bounce buffer");
            let copy_start = Instant::now();
            buf.region(first_block * g.block_size, first_block_len)
                .write(bounce.block(0, first_block_len).as_slice());
            watch.add_copy(copy_start.elapsed());
            tracing::debug!(seq, size, "message begins");
            g.receiving = Some((seq, buf));
            g.receive_watch = Some(watch);
        }
        Action::PostRecv {
            from,
            seq,
            offset,
            len,
        } => {
            let buf = receiving(g, seq);
            transport.post_recv(id, g.members[from], buf.region(offset, len));
        }
        Action::SendBlock {
            to,
            seq,
            offset,
            len,
            immediate,
        } => {
            if g.member.is_root() {
                let sending = g
                    .sending
                    .iter_mut()
                    .find(|s| s.seq == seq)
                    .expect("the root sends only submitted messages");
                let block = BlockRef::from_message(sending.data.clone(), offset, len);
                transport.post_send(id, g.members[to], block, immediate);
                sending.watch.end_setup(Instant::now());
            } else {
                let block = receiving(g, seq).block(offset, len);
                transport.post_send(id, g.members[to], block, immediate);
            }
        }
        Action::SendControl { to, control } => {
            transport.send_signal(id, g.members[to], Signal::Group(control));
        }
        Action::MessageComplete { seq } => {
            let now = Instant::now();
            if g.member.is_root() {
                let sending = g.sending.pop_front().expect("a message was in flight");
                debug_assert_eq!(sending.seq, seq);
                let _ = sending.reply.send(Ok(sending.watch.finish(now)));
            } else {
                let (s, buf) = g.receiving.take().expect("a message was in progress");
                debug_assert_eq!(s, seq);
                let watch = g
                    .receive_watch
                    .take()
                    .unwrap_or_else(|| Stopwatch::start(g.event_at));
                let message = Message {
                    group: id,
                    seq,
                    data: buf.into_bytes(),
                    timings: watch.finish(now),
                };
                if let Some(tx) = &g.deliveries {
                    let _ = tx.send(Ok(message));
                }
            }
            tracing::debug!(seq, "message complete");
        }
        Action::Closed => {
            tracing::info!("group closed");
            finish(g, transport, Ok(()));
        }
        Action::Failed(failure) => {
            tracing::warn!(%failure, "group failed");
            let error = failure_error(g, &failure);
            for sending in g.sending.drain(..) {
                let _ = sending.reply.send(Err(error.clone()));
            }
            g.receiving = None;
            g.receive_watch = None;
            if let Some(tx) = &g.deliveries {
                let _ = tx.send(Err(error.clone()));
            }
            finish(g, transport, Err(error));
        }
    }
}

fn receiving(g: &GroupState, seq: u64) -> &Arc<MessageBuffer> {
    match &g.receiving {
        Some((s, buf)) if *s == seq => buf,
        _ => unreachable!("the core posts only for the message in progress"),
    }
}

fn finish<T: Transport>(g: &mut GroupState, transport: &mut T, outcome: Result<(), Error>) {
    transport.release_group(g.id);
    g.deliveries = None;
    for w in g.close_waiters.drain(..) {
        let _ = w.send(outcome.clone());
    }
    g.outcome = Some(outcome);
}
