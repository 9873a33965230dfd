//! The per-node actor: owns the transport, the node's group-creation
//! [`Rendezvous`] and the state machines of all the node's groups, feeds
//! them completions, commands and the passing of time, carries out their
//! actions and turns their outcomes into wakeups of the user's futures and
//! streams.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio::time;
use tracing::Instrument;

mod creation;
mod peers;

#[cfg(test)]
pub(super) use creation::config_digest;

use super::group_state::DIGEST_LEN;
use super::group_state::target::TargetEvent;
use super::group_state::{
    Acks, CreateReply, GroupState, Joined, OpenBatch, ReadyForBlocks, SendReply, Sending, execute,
    member_error,
};
use super::timing::{Lap, Stopwatch, message_span};

use crate::collections::HashMap;
use crate::config::{BATCH_HEADER_BYTES, GroupConfig};
use crate::error::Error;
use crate::ids::{GroupId, NodeId};
use crate::proto::{
    Action, Control, FailureKind, GroupMember, MemberError, Rank, Rendezvous, SettingsFingerprint,
};
use crate::transport::{Completion, Completions, MessageBuffer, Signal, Transport};
use crate::wait::{CompletionMode, WaitPolicy};

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
        /// The mapped file `data` is, for a message sent from a file.
        source: Option<std::sync::Arc<MessageBuffer>>,
        reply: SendReply,
        acks: Acks,
    },
    Close {
        group: GroupId,
        reply: oneshot::Sender<Result<(), Error>>,
    },
    /// The application took a delivered message from the group's stream.
    Consumed {
        group: GroupId,
    },
    /// The application has its first `messages` messages on stable storage.
    Persisted {
        group: GroupId,
        messages: u64,
    },
    /// A message the application was about to take could not be made
    /// durable ([`Durability::Synced`](crate::Durability::Synced)).
    NotDurable {
        group: GroupId,
        error: String,
    },
    /// The last handle of the group was dropped.
    Leave {
        group: GroupId,
    },
    /// A create future was dropped with the group's handle in its reply:
    /// the handle, given back (the group waits to be adopted).
    Unclaimed {
        group: GroupId,
        joined: Joined,
    },
    /// Every peer the node has heard of.
    Peers {
        reply: oneshot::Sender<Vec<crate::peer::Peer>>,
    },
    /// Send the connected peers, then every change, to `events`.
    WatchPeers {
        events: mpsc::UnboundedSender<crate::peer::PeerEvent>,
    },
    /// How many entries the node's tables hold (tests of flat memory).
    #[cfg(test)]
    TableSizes {
        reply: oneshot::Sender<TableSizes>,
    },
    Shutdown,
}

/// How many entries a node's tables hold.
#[cfg(test)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct TableSizes {
    /// Groups the actor holds.
    pub(crate) groups: usize,
    /// Progress deadlines entered.
    pub(crate) timers: usize,
    /// Entries of the rendezvous, over all its tables.
    pub(crate) rendezvous: usize,
}

/// Most events handled before the actor yields to other tasks.
const BATCH: usize = 256;

/// How long a group waits, after the transport reports a peer unreachable,
/// before it fails naming that peer: long enough for a report of the
/// failure that made the peer leave — sent before its connections closed,
/// but carried by another task or another link — to arrive and name the
/// member that failed first. A failure report from any member within the
/// grace period decides the suspect; the peer is named only without one.
/// Small against any failure timeout worth using (a tenth of 1 s).
pub(crate) const FAILURE_GRACE: Duration = Duration::from_millis(100);

/// While the node has groups, the actor checks every `WATCHDOG_TICK`
/// that it is not itself late: a wakeup [`STALL`] or more behind means the
/// process was stopped (`SIGSTOP`, a debugger, a VM paused) or starved.
const WATCHDOG_TICK: Duration = Duration::from_millis(100);

/// A lateness of the actor's watchdog that counts as this node having
/// stalled. Peers lost within [`STALL_BLAME`] of it are most likely peers
/// that declared *this* node failed while it stood still (and closed their
/// connections): unless a member's report names someone else within the
/// grace period, the group names this node, not them. Well above what a
/// busy machine's scheduler delays (over 1 s seen on a 2-core VM at load
/// 10), so that a starved node does not blame itself for another's failure.
const STALL: Duration = Duration::from_millis(1500);

/// How long after the end of a stall a lost peer is blamed on it.
const STALL_BLAME: Duration = Duration::from_secs(1);

pub(crate) struct Actor<T> {
    me: NodeId,
    /// How many nodes the cluster has (ids `0..nodes`): a member list
    /// naming another is refused.
    nodes: usize,
    transport: T,
    commands: mpsc::UnboundedReceiver<Command>,
    completions: Completions,
    /// How the loop waits for completions (it sees each small message).
    wait: WaitPolicy,
    groups: HashMap<GroupId, GroupState>,
    /// The creation of the node's groups: which joins are awaited, signals
    /// for groups not created yet, abandoned groups, ids used, deadlines.
    rendezvous: Rendezvous<time::Instant>,
    /// The origin of the time passed to the members' progress timeouts.
    epoch: time::Instant,
    /// The groups' progress deadlines (each group's entry may be earlier
    /// than its member's current deadline: it is renewed when it passes).
    timers: BTreeSet<(time::Instant, GroupId)>,
    /// When the watchdog is due next (while the node has groups).
    watchdog: Option<time::Instant>,
    /// The end of this node's last stall, and how long it stood still.
    stalled: Option<(time::Instant, Duration)>,
    /// Where receive-target hooks report the buffers they chose.
    target_tx: mpsc::UnboundedSender<TargetEvent>,
    targets: mpsc::UnboundedReceiver<TargetEvent>,
    /// Which peers are connected, and who watches them.
    peers: peers::PeerView,
    /// What the node moved ([`Node::stats`](crate::Node::stats)).
    counters: std::sync::Arc<crate::stats::NodeCounters>,
}

impl<T: Transport> Actor<T> {
    /// The actor of node `me` of a cluster of `nodes`.
    pub(crate) fn new(
        me: NodeId,
        nodes: usize,
        transport: T,
        commands: mpsc::UnboundedReceiver<Command>,
        completions: Completions,
        mode: CompletionMode,
    ) -> Self {
        let (target_tx, targets) = mpsc::unbounded_channel();
        Actor {
            target_tx,
            targets,
            me,
            nodes,
            transport,
            commands,
            completions,
            wait: WaitPolicy::new(mode),
            groups: HashMap::default(),
            rendezvous: Rendezvous::new(me),
            epoch: time::Instant::now(),
            timers: BTreeSet::new(),
            watchdog: None,
            stalled: None,
            peers: peers::PeerView::default(),
            counters: std::sync::Arc::default(),
        }
    }

    /// The node's counters, shared with its handle.
    pub(crate) fn counters(&self) -> std::sync::Arc<crate::stats::NodeCounters> {
        std::sync::Arc::clone(&self.counters)
    }

    /// The earliest deadline: a creation's, or a group's progress timeout.
    fn next_deadline(&self) -> Option<time::Instant> {
        let group = self.timers.first().map(|&(at, _)| at);
        [self.rendezvous.poll_timeout(), group, self.watchdog]
            .into_iter()
            .flatten()
            .min()
    }

    /// Check that the actor itself is on time (see [`STALL`]), and keep the
    /// watchdog running while the node has groups.
    fn watch(&mut self, now: time::Instant) {
        if let Some(due) = self.watchdog
            && due <= now
        {
            let late = now - due;
            if late >= STALL {
                tracing::warn!(?late, "this node stood still (stopped or starved)");
                self.stalled = Some((now, late));
            }
            self.watchdog = None;
        }
        if self.watchdog.is_none() && !self.groups.is_empty() {
            self.watchdog = now.checked_add(WATCHDOG_TICK);
        }
    }

    /// How long this node stood still, if it did so recently enough for a
    /// peer lost now to have been lost because of it.
    fn recent_stall(&self, now: time::Instant) -> Option<Duration> {
        self.stalled
            .filter(|&(end, _)| now.saturating_duration_since(end) <= STALL_BLAME)
            .map(|(_, late)| late)
    }

    /// Handle every deadline that has passed.
    fn fire_timeouts(&mut self) {
        let now = time::Instant::now();
        self.watch(now);
        if self.rendezvous.poll_timeout().is_some_and(|d| d <= now) {
            self.rendezvous.handle_timeout(now);
            self.drive_rendezvous();
        }
        while let Some(&(at, id)) = self.timers.first() {
            if at > now {
                break;
            }
            self.timers.pop_first();
            if let Some(g) = self.groups.get_mut(&id)
                && g.deadline == Some(at)
            {
                g.deadline = None;
            }
            // Passes the time to the member, and enters its next deadline.
            self.drive(id);
        }
    }

    /// Run until shut down, or until the transport goes away.
    pub(crate) async fn run(mut self) {
        let span = tracing::info_span!("rdmc_node", node = self.me.0);
        async move {
            loop {
                if self
                    .next_deadline()
                    .is_some_and(|d| d <= time::Instant::now())
                {
                    self.fire_timeouts();
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
                while let Ok(event) = self.targets.try_recv() {
                    self.target_event(event);
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
                if !self.wait.should_sleep_after(handled).await {
                    continue;
                }
                let deadline = self.next_deadline();
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
                    Some(event) = self.targets.recv() => self.target_event(event),
                    // Expired deadlines are handled at the top of the loop.
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
            Command::Send {
                group,
                data,
                source,
                reply,
                acks,
            } => self.send(group, data, source, reply, acks),
            Command::Close { group, reply } => self.close(group, reply),
            Command::Consumed { group } => {
                // The member counts transfers: a batch is taken once each
                // of its messages is.
                if let Some(g) = self.groups.get_mut(&group)
                    && g.took_message()
                {
                    self.with_member(group, GroupMember::message_consumed);
                }
            }
            Command::Persisted { group, messages } => {
                let g = self.groups.get_mut(&group);
                if let Some(n) = g.and_then(|g| g.persisted_through(messages)) {
                    self.with_member(group, |m| _ = m.application_persisted(n));
                }
            }
            Command::NotDurable { group, error } => self.with_member(group, |m| {
                m.handle_local_failure(None, FailureKind::ReceiveTarget, Some(error));
            }),
            Command::Leave { group } => self.leave(group),
            Command::Unclaimed { group, joined } => self.keep_unclaimed(group, joined),
            Command::Peers { reply } => {
                let _ = reply.send(self.peers.list());
            }
            Command::WatchPeers { events } => self.peers.watch(events),
            #[cfg(test)]
            Command::TableSizes { reply } => {
                let _ = reply.send(TableSizes {
                    groups: self.groups.len(),
                    timers: self.timers.len(),
                    rendezvous: self.rendezvous.table_len(),
                });
            }
            Command::Shutdown => unreachable!("handled by the loop"),
        }
    }

    fn send(
        &mut self,
        group: GroupId,
        data: Bytes,
        source: Option<std::sync::Arc<MessageBuffer>>,
        reply: SendReply,
        acks: Acks,
    ) {
        let started = Instant::now();
        self.wait.message_moved(data.len() as u64);
        let Some(g) = self.groups.get_mut(&group) else {
            let _ = reply.send(Err(Error::Closed(group)));
            acks.fail(&Error::Closed(group));
            return;
        };
        let extra = if g.digest { DIGEST_LEN } else { 0 };
        let too_large = |g: &GroupState, e| match e {
            MemberError::TooLarge { size, max } => Error::MessageTooLarge {
                size: size - extra,
                max: max - extra,
            },
            e => member_error(g, e),
        };
        if source.is_none() && g.batchable(data.len()) {
            // Behind a transfer in flight (or a batch gathering), a small
            // message waits to go out in a batch with the others sent
            // meanwhile; alone, it goes at once.
            if !g.sending.is_empty() || g.open_batch.is_some() {
                if let Err(e) = g.member.check_submit(data.len() as u64 + extra) {
                    g.fail_send(reply, acks, &too_large(g, e));
                    return;
                }
                let framed = data.len() + BATCH_HEADER_BYTES;
                let max = g.batching.unwrap_or(0);
                if g.open_batch
                    .as_ref()
                    .is_some_and(|b| b.bytes + framed > max)
                {
                    // Full: it queues behind the transfers in flight.
                    g.seal_batch();
                }
                let batch = g.open_batch.get_or_insert_with(|| OpenBatch {
                    messages: Vec::new(),
                    bytes: 0,
                    replies: Vec::new(),
                    started,
                });
                batch.messages.push(data);
                batch.bytes += framed;
                batch.replies.push((reply, acks));
                if g.sending.is_empty() {
                    // Its transfer completed meanwhile (sealed just now).
                    g.seal_batch();
                }
                return self.drive(group);
            }
        } else {
            // A larger message goes after the batch gathering before it.
            g.seal_batch();
        }
        match g.member.submit(data.len() as u64 + extra) {
            Ok(seq) => {
                // Computed here, on the actor (it adds to the message's
                // time); not counted as the actor standing still.
                let digest = g.digest.then(|| blake3::hash(&data));
                let span = message_span(&g.span, seq, data.len());
                g.sending.push_back(Sending {
                    seq,
                    data,
                    digest,
                    source,
                    replies: vec![reply],
                    watch: Stopwatch::start(started).traced(span),
                });
                g.durable.push_back((seq, acks));
                if digest.is_some() {
                    self.rearm_watchdog();
                }
                self.drive(group);
            }
            Err(e) => g.fail_send(reply, acks, &too_large(g, e)),
        }
    }

    /// Restart the watchdog's interval now: time the actor spent working
    /// (hashing a message) is not a stall.
    fn rearm_watchdog(&mut self) {
        if self.watchdog.is_some() {
            self.watchdog = time::Instant::now().checked_add(WATCHDOG_TICK);
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
        // The messages gathering for a batch were sent before the close.
        if g.member.is_root() {
            g.seal_batch();
        }
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
        if let Completion::Received { immediate, .. } = c {
            self.wait.block_received(immediate);
        }
        let (group, peer) = match &c {
            Completion::PeerDown {
                node,
                incarnation,
                reason,
            } => {
                let (node, incarnation, reason) = (*node, *incarnation, reason.clone());
                return self.peer_down(node, incarnation, reason);
            }
            &Completion::PeerUp {
                node,
                incarnation,
                addr,
            } => return self.peer_up(node, incarnation, addr),
            &Completion::PeerLeft { node, incarnation } => {
                return self.peer_left(node, incarnation);
            }
            &Completion::PeerIdle { node, incarnation } => {
                return self.peer_idle(node, incarnation);
            }
            Completion::Relayed { .. } => return self.on_relayed(c),
            Completion::Progress {
                group,
                from,
                remaining,
            } => {
                // A hint about a block still arriving: no lap of the
                // accounting ends here.
                let Some(g) = self.groups.get_mut(group) else {
                    return;
                };
                let Some(&rank) = g.rank_of.get(from) else {
                    return;
                };
                let _enter = g.span.clone().entered();
                g.member.handle_block_progress(rank, *remaining);
                let group = *group;
                return self.drive(group);
            }
            Completion::Received { group, from, .. } => (*group, *from),
            Completion::Sent { group, to } => (*group, *to),
            Completion::Signal { group, from, .. } => (*group, *from),
            Completion::TransferFailed { group, peer, .. } => (*group, *peer),
        };
        if let Completion::Signal { signal, .. } = c {
            let rendezvous = &mut self.rendezvous;
            match signal {
                Signal::JoinSettings { fingerprint } => {
                    let fingerprint = SettingsFingerprint(fingerprint);
                    rendezvous.handle_join_settings(peer, group, fingerprint);
                }
                Signal::Join { digest } => rendezvous.handle_join(peer, group, digest),
                Signal::JoinRejected { digest } => {
                    rendezvous.handle_join_rejected(peer, group, digest);
                }
                Signal::IdInUse => rendezvous.handle_id_in_use(peer, group),
                Signal::Group(_) | Signal::ReadyForBlocks { .. } => {}
            }
            if signal.group_control().is_none() {
                return self.drive_rendezvous();
            }
        }
        let Some(g) = self.groups.get_mut(&group) else {
            if let Completion::Signal { signal, .. } = c
                && let Some((control, count)) = signal.group_control()
            {
                for _ in 0..count {
                    self.rendezvous.handle_early_control(peer, group, control);
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
        if g.lost.contains(&rank) {
            tracing::debug!(
                group = group.0,
                peer = peer.0,
                "traffic from a lost member dropped"
            );
            return;
        }
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
                if g.digest && !g.block_senders.contains(&rank) {
                    g.block_senders.push(rank);
                }
                g.node_counters.received(&g.counters, peer, len);
                g.member.handle_block(rank, immediate, len)
            }
            Completion::Sent { .. } => g.member.handle_send_complete(rank),
            Completion::Signal { signal, .. } => {
                let (control, count) = signal
                    .group_control()
                    .expect("rendezvous signals are handled above");
                for _ in 0..count {
                    g.member.handle_control(rank, control);
                }
                if matches!(control, Control::Failed { .. }) {
                    return self.carrier_failed(group, rank);
                }
            }
            Completion::TransferFailed { error, .. } if rank == 0 && g.root_left => {
                // A report to a root that left: its verdict comes through
                // the relays, which are watched.
                tracing::debug!(peer = peer.0, error, "transfer to a root that left failed");
            }
            Completion::TransferFailed { error, .. } => {
                tracing::warn!(peer = peer.0, error, "transfer failed");
                return self.peer_unreachable(group, rank);
            }
            Completion::PeerDown { .. }
            | Completion::PeerLeft { .. }
            | Completion::PeerIdle { .. }
            | Completion::PeerUp { .. }
            | Completion::Relayed { .. }
            | Completion::Progress { .. } => {
                unreachable!("handled above")
            }
        }
        self.drive(group);
    }

    /// The transport reported `rank` of `group` unreachable: the group fails
    /// naming it after [`FAILURE_GRACE`], unless a member's report of the
    /// failure that caused it (naming whoever failed first) arrives before.
    fn peer_unreachable(&mut self, group: GroupId, rank: Rank) {
        let now = time::Instant::now();
        // A node resuming from a stall may hear of its lost peers before
        // its timers fire: check for the stall first.
        self.watch(now);
        let Some(g) = self.groups.get_mut(&group) else {
            return;
        };
        if g.member.is_finished() {
            return;
        }
        if !g.unreachable.contains(&rank) {
            g.unreachable.push(rank);
        }
        if g.grace.is_none() {
            let at = now
                .checked_add(FAILURE_GRACE)
                .unwrap_or_else(|| far_future(now));
            g.span.in_scope(|| {
                tracing::debug!(peer = rank, "peer unreachable: waiting for a report");
            });
            g.grace = Some(at);
            self.timers.insert((at, group));
        }
    }

    fn with_member(&mut self, group: GroupId, f: impl FnOnce(&mut GroupMember)) {
        if let Some(g) = self.groups.get_mut(&group) {
            f(&mut g.member);
            self.drive(group);
        }
    }

    /// Carry out the group's pending actions.
    fn drive(&mut self, group: GroupId) {
        let now = time::Instant::now();
        let stalled = self.recent_stall(now);
        let Some(g) = self.groups.get_mut(&group) else {
            return;
        };
        let _enter = g.span.clone().entered();
        if let Some(at) = g.grace
            && at <= now
        {
            // No report decided the failure within the grace period.
            g.grace = None;
            let lost = std::mem::take(&mut g.unreachable);
            match stalled {
                // This node stood still meanwhile: that is why its peers
                // are gone (they declared it failed).
                Some(stalled) if !lost.is_empty() => {
                    g.span.in_scope(|| {
                        tracing::warn!(?lost, ?stalled, "peers lost after this node stood still");
                    });
                    g.member.handle_local_failure(
                        None,
                        FailureKind::Stalled {
                            millis: u64::try_from(stalled.as_millis()).unwrap_or(u64::MAX),
                        },
                        None,
                    );
                }
                // In the order lost; one whose failure is moot (after the
                // close acknowledgement) leaves the next to decide.
                _ => {
                    for rank in lost {
                        if g.member.is_finished() {
                            break;
                        }
                        let node = g.members[rank];
                        let why = self.peers.why_down(node);
                        let cut = self.transport.cut_off_by(group, node);
                        let cut: Vec<Rank> = cut
                            .iter()
                            .filter_map(|n| g.rank_of.get(n))
                            .copied()
                            .collect();
                        g.member
                            .handle_peer_failure_cutting_off(Some(rank), &cut, why);
                    }
                }
            }
        }
        g.unclaimed_expired(now);
        g.member
            .handle_timeout(now.saturating_duration_since(self.epoch));
        if g.member.is_finished()
            && let Some(pending) = g.pending_begin.take()
        {
            // The group ended while the hook chose: its message is moot.
            pending.abort();
        }
        let mut hashed = false;
        // The ready-for-blocks of one pass to one peer travel as one
        // signal, after the receives they announce are posted.
        let mut ready = ReadyForBlocks::default();
        // While the hook chooses a message's buffer, its actions wait.
        while g.pending_begin.is_none()
            && let Some(action) = g.member.poll_action()
        {
            match action {
                Action::SendControl {
                    to,
                    control: Control::ReadyForBlock,
                } => ready.add(to),
                action => {
                    if let Action::SendBlock { to, .. } = action {
                        // The peer's ready-for-blocks so far go ahead of
                        // the block, so that they leave in its frame's
                        // write rather than in a packet of their own after it.
                        ready.send_to(to, g, &mut self.transport);
                    }
                    hashed |= execute(g, &mut self.transport, action)
                }
            }
        }
        ready.send(g, &mut self.transport);
        // A deadline later than the armed one waits: the armed one renews
        // it when it passes. An earlier one (a slow reader's, while the
        // progress timeout's is armed) replaces it.
        if let Some(at) = g.member.poll_timeout() {
            let at = self
                .epoch
                .checked_add(at)
                .unwrap_or_else(|| far_future(now));
            if g.deadline.is_none_or(|armed| at < armed) {
                if let Some(armed) = g.deadline.replace(at) {
                    self.timers.remove(&(armed, group));
                }
                self.timers.insert((at, group));
            }
        }
        g.waiting_for_ready = g.member.waiting_for_ready();
        if hashed && let Some(due) = self.watchdog.as_mut() {
            // Checking a digest is work, not a stall.
            *due = time::Instant::now() + WATCHDOG_TICK;
        }
        if let Some(watch) = g.receive_watch.as_mut()
            && !watch.setup_ended()
        {
            watch.end_setup(Instant::now());
        }
        if g.creating.is_some() {
            match &g.outcome {
                Some(Ok(())) => {
                    // The group closed before the last Join arrived here.
                    self.rendezvous.handle_group_closed(group);
                    return self.drive_rendezvous();
                }
                Some(Err(error)) => {
                    // The group failed before every member joined (a member
                    // is down, or another member said so): so does its
                    // creation.
                    if let Some(creating) = g.creating.take() {
                        let _ = creating.reply.send(Err(error.clone()));
                    }
                    g.left = true;
                }
                None => {}
            }
        }
        if g.outcome.is_some() && g.left {
            for at in g.armed() {
                self.timers.remove(&(at, group));
            }
            let g = self.groups.remove(&group);
            let failure = g.as_ref().and_then(|g| g.member.failure());
            self.rendezvous.handle_group_ended(group, failure);
        }
    }

    /// A receive-target hook chose the buffer of a message, or a message
    /// is written to its file: begin or deliver it, and carry on with the
    /// member's actions.
    fn target_event(&mut self, event: TargetEvent) {
        let group = event.group();
        if let Some(g) = self.groups.get_mut(&group) {
            super::group_state::target::on_event(g, &mut self.transport, event);
            self.drive(group);
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
        // Signals on their way through this node that arrived go on first.
        for _ in 0..BATCH {
            match self.completions.try_recv() {
                Ok(c @ Completion::Relayed { .. }) => self.on_completion(c),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        self.fail_all();
        self.transport.flush().await;
    }

    fn fail_all(&mut self) {
        let ids: Vec<GroupId> = self.groups.keys().copied().collect();
        for g in self.groups.values_mut() {
            if let Some(creating) = g.creating.take() {
                let _ = creating.reply.send(Err(Error::NodeShutDown(self.me)));
                g.left = true;
            }
            if g.unclaimed.take().is_some() {
                g.left = true;
            }
        }
        for id in ids {
            self.with_member(id, GroupMember::shutdown);
        }
    }
}

/// A time no deadline reaches: a hundred years from `now`.
fn far_future(now: time::Instant) -> time::Instant {
    now + Duration::from_secs(100 * 365 * 24 * 3600)
}
