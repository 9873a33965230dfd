//! The per-node actor: owns the transport and the state machines of all the
//! node's groups, feeds them completions and commands, carries out their
//! actions and turns their outcomes into wakeups of the user's futures and
//! streams.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

use crate::config::{CompletionMode, GroupConfig};
use crate::error::{Error, FailureKind, MembershipError};
use crate::ids::{GroupId, NodeId};
use crate::proto::{Action, Failure, FailureReason, GroupMember, MemberConfig, MemberError, Rank};
use crate::transport::{BlockRef, Completion, Completions, MessageBuffer, Signal, Transport};

/// A message delivered to a receiver.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// The group it was multicast in.
    pub group: GroupId,
    /// Its position in the root's send order, from 0.
    pub seq: u64,
    /// Its bytes, exactly as the root sent them.
    pub data: Bytes,
}

/// The receiving end of a group's deliveries.
pub(crate) type Deliveries = mpsc::UnboundedReceiver<Result<Message, Error>>;

/// What a node's handles ask of its actor.
#[derive(Debug)]
pub(crate) enum Command {
    CreateGroup {
        id: GroupId,
        members: Vec<NodeId>,
        config: GroupConfig,
        reply: oneshot::Sender<Result<Deliveries, Error>>,
    },
    Send {
        group: GroupId,
        data: Bytes,
        reply: oneshot::Sender<Result<(), Error>>,
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
type SendReply = oneshot::Sender<Result<(), Error>>;

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
    /// Root: messages submitted and not yet complete, in order.
    sending: VecDeque<(u64, Bytes, SendReply)>,
    deliveries: Option<mpsc::UnboundedSender<Result<Message, Error>>>,
    close_waiters: Vec<oneshot::Sender<Result<(), Error>>>,
    outcome: Option<Result<(), Error>>,
    /// Whether the user's handle is gone.
    left: bool,
    span: tracing::Span,
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
        }
    }

    /// Run until shut down, or until the transport goes away.
    pub(crate) async fn run(mut self) {
        let span = tracing::info_span!("rdmc_node", node = self.me.0);
        async move {
            let mut spin_until: Option<Instant> = None;
            loop {
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
                if handled > 0 {
                    if let CompletionMode::Hybrid { window } = self.mode {
                        spin_until = Some(Instant::now() + window);
                    }
                    tokio::task::yield_now().await;
                    continue;
                }
                let spinning = match self.mode {
                    CompletionMode::Polling => true,
                    CompletionMode::Hybrid { .. } => {
                        spin_until.is_some_and(|until| Instant::now() < until)
                    }
                    CompletionMode::Interrupt => false,
                };
                if spinning {
                    tokio::task::yield_now().await;
                    continue;
                }
                spin_until = None;
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
            } => {
                let _ = reply.send(self.create_group(id, members, config));
            }
            Command::Send { group, data, reply } => self.send(group, data, reply),
            Command::Close { group, reply } => self.close(group, reply),
            Command::Consumed { group } => {
                self.with_member(group, GroupMember::message_consumed);
            }
            Command::Leave { group } => self.leave(group),
            Command::Shutdown => unreachable!("handled by the loop"),
        }
    }

    fn create_group(
        &mut self,
        id: GroupId,
        members: Vec<NodeId>,
        config: GroupConfig,
    ) -> Result<Deliveries, Error> {
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
        self.used.insert(id);
        let span = tracing::debug_span!(
            "rdmc_group",
            group = id.0,
            rank,
            nodes = members.len(),
            algorithm = %config.algorithm()
        );
        span.in_scope(|| tracing::info!("group created"));
        let (tx, rx) = mpsc::unbounded_channel();
        let down: Vec<Rank> = members
            .iter()
            .filter(|n| self.down.contains(n))
            .map(|n| rank_of[n])
            .collect();
        self.groups.insert(
            id,
            GroupState {
                id,
                member,
                bounce: (rank > 0).then(|| MessageBuffer::new(config.block_size())),
                members,
                rank_of,
                block_size: config.block_size(),
                receiving: None,
                sending: VecDeque::new(),
                deliveries: Some(tx),
                close_waiters: Vec::new(),
                outcome: None,
                left: false,
                span,
            },
        );
        self.drive(id);
        if let Some(&suspect) = down.first() {
            self.with_member(id, |m| m.handle_peer_failure(Some(suspect)));
        }
        if let Some(early) = self.early.remove(&id) {
            self.early_count -= early.len();
            for c in early {
                self.on_completion(c);
            }
        }
        Ok(rx)
    }

    fn send(&mut self, group: GroupId, data: Bytes, reply: oneshot::Sender<Result<(), Error>>) {
        let Some(g) = self.groups.get_mut(&group) else {
            let _ = reply.send(Err(Error::Closed(group)));
            return;
        };
        match g.member.submit(data.len() as u64) {
            Ok(seq) => {
                g.sending.push_back((seq, data, reply));
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
        let Some(g) = self.groups.get_mut(&group) else {
            if !self.used.contains(&group) && matches!(c, Completion::Signal { .. }) {
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
        match c {
            Completion::Received { immediate, len, .. } => {
                g.member.handle_block(rank, immediate, len)
            }
            Completion::Sent { .. } => g.member.handle_send_complete(rank),
            Completion::Signal {
                signal: Signal::Group(control),
                ..
            } => g.member.handle_control(rank, control),
            // The creation rendezvous is not enforced yet.
            Completion::Signal { .. } => {}
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
            let buf = MessageBuffer::new(size);
            let bounce = g.bounce.as_ref().expect("non-roots have a bounce buffer");
            buf.region(first_block * g.block_size, first_block_len)
                .write(bounce.block(0, first_block_len).as_slice());
            tracing::debug!(seq, size, "message begins");
            g.receiving = Some((seq, buf));
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
            let block = if g.member.is_root() {
                let (_, data, _) = g
                    .sending
                    .iter()
                    .find(|(s, _, _)| *s == seq)
                    .expect("the root sends only submitted messages");
                BlockRef::from_bytes(data.slice(offset..offset + len))
            } else {
                receiving(g, seq).block(offset, len)
            };
            transport.post_send(id, g.members[to], block, immediate);
        }
        Action::SendControl { to, control } => {
            transport.send_signal(id, g.members[to], Signal::Group(control));
        }
        Action::MessageComplete { seq } => {
            if g.member.is_root() {
                let (s, _, reply) = g.sending.pop_front().expect("a message was in flight");
                debug_assert_eq!(s, seq);
                let _ = reply.send(Ok(()));
            } else {
                let (s, buf) = g.receiving.take().expect("a message was in progress");
                debug_assert_eq!(s, seq);
                let message = Message {
                    group: id,
                    seq,
                    data: buf.into_bytes(),
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
            for (_, _, reply) in g.sending.drain(..) {
                let _ = reply.send(Err(error.clone()));
            }
            g.receiving = None;
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
