//! Group creation in the [`Actor`]: checking a request, the new member's
//! state machine and group state, and the rendezvous that ends it (every
//! member joined, or a mismatch or timeout).

use std::collections::VecDeque;
use std::time::Instant;

use tokio::sync::mpsc;
use tokio::time;

use super::super::group_state::{CreateReply, Creating, GroupState, Joined, Unclaimed};
use super::{Actor, far_future};
use crate::collections::HashMap;
use crate::config::GroupConfig;
use crate::error::{Error, MembershipError};
use crate::ids::{GroupId, NodeId};
use crate::in_flight::InFlight;
use crate::proto::{
    Announce, CreateFailure, FailureKind, GroupMember, GroupSummary, MemberConfig, Rank,
    RendezvousAction, SharedSettings,
};
use crate::runtime::group_state::DIGEST_LEN;
use crate::stats::GroupCounters;
use crate::transport::{Completion, Signal, Transport};

impl<T: Transport> Actor<T> {
    /// Create group `id` here and start its rendezvous: `reply` gets the
    /// group's deliveries once every other member has joined.
    pub(super) fn create_group(
        &mut self,
        id: GroupId,
        members: Vec<NodeId>,
        config: GroupConfig,
        reply: CreateReply,
    ) {
        // The digest setting as this node resolves it: part of what every
        // member must agree on.
        let digest_on = config
            .message_digest()
            .unwrap_or_else(|| self.transport.digest_by_default());
        let config = config.with_message_digest(digest_on);
        let summary = config_summary(id, &members, &config);
        let Err(reply) = self.adopt(id, &members, summary.digest, reply) else {
            return;
        };
        let (mut member, rank_of, rank) = match self.new_member(id, &members, &config) {
            Ok(new) => new,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        // Connections the group needs, before its first signal goes out.
        self.transport
            .open_group(id, &members, rank, &member.connections());
        self.peers.made += 1;
        let made = self.peers.made;
        // Connected on demand, a member whose connection ended is tried
        // again (it may have come back, and is connected only when a group
        // needs it): the transport fails it if it cannot be reached within
        // the connect timeout.
        if self.transport.reconnects_on_demand() {
            for &n in members.iter().filter(|&&n| n != self.me) {
                if self.rendezvous.is_down(n) {
                    self.rendezvous.handle_peer_up(n);
                }
            }
        }
        let digest = summary.digest;
        let now = time::Instant::now();
        let deadline = now
            .checked_add(config.create_timeout())
            .unwrap_or_else(|| far_future(now));
        let span = tracing::debug_span!(
            "rdmc_group",
            group = id.0,
            rank,
            nodes = members.len(),
            algorithm = %config.algorithm()
        );
        span.in_scope(|| {
            let ids: Vec<String> = members.iter().map(|m| m.0.to_string()).collect();
            tracing::info!(
                group = id.0,
                rank,
                members = %ids.join(","),
                algorithm = %config.algorithm(),
                block_size = ?config.block_size_policy(),
                transport = %self.transport.describe(),
                completion = ?self.wait.mode(),
                digest = format_args!("{digest:032x}"),
                "group created"
            );
        });
        let (tx, rx) = mpsc::unbounded_channel();
        let in_flight = std::sync::Arc::new(InFlight::new(id, config.max_in_flight()));
        let counters = std::sync::Arc::new(GroupCounters::default());
        self.counters.group_opened();
        // A member known to be down fails the group at once. The member's
        // actions are carried out only after the rendezvous sent its Joins:
        // signals are FIFO per link, so every peer checks this member's
        // Join before anything else of the group.
        if let Some(&down) = members
            .iter()
            .find(|&&n| n != self.me && self.rendezvous.is_down(n))
        {
            member.handle_peer_failure_because(Some(rank_of[&down]), self.peers.why_down(down));
        }
        // Where each message's first block lands; without its memory the
        // group fails at once, naming this member (never an abort).
        let bounce = if rank > 0 {
            match self.transport.alloc_buffer(config.block_size()) {
                Ok(buf) => Some(buf),
                Err(e) => {
                    span.in_scope(|| tracing::warn!(error = %e, "no memory for the first block"));
                    member.handle_local_failure(
                        None,
                        FailureKind::OutOfMemory {
                            size: config.block_size() as u64,
                        },
                        None,
                    );
                    None
                }
            }
        } else {
            None
        };
        self.groups.insert(
            id,
            GroupState {
                id,
                member,
                bounce,
                members: members.clone(),
                rank_of,
                block_size: config.block_size(),
                digest: digest_on,
                block_senders: Vec::new(),
                receiving: None,
                receive_watch: None,
                event_at: Instant::now(),
                waiting_for_ready: false,
                root_left: false,
                sending: VecDeque::new(),
                deliveries: Some(tx),
                close_waiters: Vec::new(),
                outcome: None,
                left: false,
                span,
                identity: digest,
                create_timeout: config.create_timeout(),
                unclaimed: None,
                creating: Some(Creating {
                    reply,
                    joined: Joined {
                        deliveries: rx,
                        in_flight: std::sync::Arc::clone(&in_flight),
                        counters: std::sync::Arc::clone(&counters),
                        max_message_size: config.max_message_size(),
                        durability: config.durability(),
                    },
                }),
                deadline: None,
                unreachable: Vec::new(),
                lost: Vec::new(),
                made,
                grace: None,
                targets: config.receive_targets().cloned(),
                target_tx: self.target_tx.clone(),
                pending_begin: None,
                writing: None,
                written: None,
                durable: VecDeque::new(),
                persisting: VecDeque::new(),
                in_flight,
                batching: config.small_message_batching(),
                open_batch: None,
                receiving_batch: false,
                next_seq: 0,
                untaken: VecDeque::new(),
                app_taken: 0,
                transfer_ends: VecDeque::new(),
                transfers_persisted: 0,
                counters,
                node_counters: std::sync::Arc::clone(&self.counters),
            },
        );
        self.rendezvous.create(id, members, summary, deadline);
        self.watch(now);
        self.drive_rendezvous();
        self.drive(id);
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
        let mut rank_of = HashMap::with_capacity_and_hasher(members.len(), Default::default());
        for (rank, &node) in members.iter().enumerate() {
            if rank_of.insert(node, rank).is_some() {
                return Err(MembershipError::Duplicate(node).into());
            }
        }
        if let Some(&node) = members.iter().find(|n| n.index() >= self.nodes) {
            return Err(MembershipError::UnknownNode(node).into());
        }
        let Some(&rank) = rank_of.get(&self.me) else {
            return Err(MembershipError::NotAMember(self.me).into());
        };
        if config.block_size() == 0 {
            return Err(Error::InvalidConfig(
                "the block size must be at least 1 byte",
            ));
        }
        if config.block_size() > crate::config::MAX_BLOCK_SIZE {
            return Err(Error::InvalidConfig("the block size must be at most 1 GiB"));
        }
        if self.rendezvous.is_used(id) {
            return Err(Error::GroupIdInUse(id));
        }
        // Every member of a group runs the same transport, so they agree
        // on how its sends complete, which the binomial pipeline's layout
        // follows (slow members, sizes that are not a power of two).
        let topology = config
            .topology(members.len())?
            .with_buffered_sends(!self.transport.sends_complete_when_delivered());
        let member = GroupMember::new(
            MemberConfig::new(
                config.algorithm(),
                members.len(),
                rank,
                config.block_size_policy(),
            )
            .with_topology((!topology.is_flat() || topology.buffered_sends()).then_some(topology))
            // A message's digest travels after its bytes.
            .with_max_message_size(config.max_message_size().saturating_add(digest_len(config)))
            .with_receive_window(config.receive_window())
            // A send over TCP completes once the socket buffered it: its
            // senders overlap anyway, so a receiver takes from any of them
            // — unless the transport reports a block's last bytes, and the
            // next sender is announced then (early announcement).
            .with_early_announce(self.transport.early_announce())
            .with_announce(
                if self.transport.sends_complete_when_delivered()
                    || self.transport.early_announce().is_some()
                {
                    Announce::OneSender
                } else {
                    Announce::AnySender
                },
            )
            .with_progress_timeout(config.progress_timeout())
            // No progress is seen from outside, as a lost peer is: it waits
            // as long for a report of the failure behind it.
            .with_report_grace(super::FAILURE_GRACE)
            .with_slow_reader_timeout(config.slow_reader_timeout())
            // A batch's digest travels after its bytes too.
            .with_max_batch(
                config
                    .small_message_batching()
                    .map(|bytes| bytes as u64 + digest_len(config)),
            ),
        )
        .map_err(|_| Error::InvalidConfig("the group's schedule cannot be built"))?;
        Ok((member, rank_of, rank))
    }

    /// Carry out the rendezvous's pending actions.
    pub(super) fn drive_rendezvous(&mut self) {
        while let Some(action) = self.rendezvous.poll_action() {
            match action {
                RendezvousAction::SendJoin { group, to, summary } => {
                    let digest = summary.digest;
                    self.send_with_settings(group, to, summary, Signal::Join { digest });
                }
                RendezvousAction::SendJoinRejected { group, to, summary } => {
                    let digest = summary.digest;
                    let rejected = Signal::JoinRejected { digest };
                    self.send_with_settings(group, to, summary, rejected);
                }
                RendezvousAction::SendIdInUse { group, to } => {
                    self.transport.send_signal(group, to, Signal::IdInUse);
                }
                RendezvousAction::SendControl { group, to, control } => {
                    self.transport
                        .send_signal(group, to, Signal::Group(control));
                }
                RendezvousAction::DeliverEarly {
                    group,
                    from,
                    control,
                } => self.on_completion(Completion::Signal {
                    group,
                    from,
                    signal: Signal::Group(control),
                }),
                RendezvousAction::Ready { group } => self.creation_complete(group),
                RendezvousAction::CreateFailed { group, failure } => {
                    self.creation_failed(group, failure);
                }
                RendezvousAction::PeerRefused { group, peer } => {
                    let rank = self.groups.get(&group).and_then(|g| g.rank_of.get(&peer));
                    if let Some(&rank) = rank {
                        self.with_member(group, |m| m.handle_peer_failure(Some(rank)));
                    }
                }
            }
        }
    }

    /// Send `signal` of `group` to `to` right after the fingerprint of
    /// `summary` (which the peer keeps for it).
    fn send_with_settings(
        &mut self,
        group: GroupId,
        to: NodeId,
        summary: GroupSummary,
        signal: Signal,
    ) {
        let fingerprint = summary.fingerprint.0;
        let settings = Signal::JoinSettings { fingerprint };
        self.transport.send_signal(group, to, settings);
        self.transport.send_signal(group, to, signal);
    }

    /// Every other member joined: hand the group to the user.
    pub(super) fn creation_complete(&mut self, id: GroupId) {
        // The member's own actions first: it may have failed already (a
        // member known to be down), which fails the creation instead.
        self.drive(id);
        let Some(g) = self.groups.get_mut(&id) else {
            return;
        };
        let Some(creating) = g.creating.take() else {
            return;
        };
        g.span.in_scope(|| tracing::info!("every member joined"));
        if let Err(Ok(joined)) = creating.reply.send(Ok(creating.joined)) {
            // The create future was dropped (cancelled).
            self.keep_unclaimed(id, joined);
        }
    }

    /// The create future of `id` was dropped, and the group's handle came
    /// back: the group waits for a `create_group` of it to adopt it, as
    /// long as its create timeout, and is left after that.
    pub(super) fn keep_unclaimed(&mut self, id: GroupId, joined: Joined) {
        let Some(g) = self.groups.get_mut(&id) else {
            return;
        };
        if g.left || g.creating.is_some() || g.unclaimed.is_some() {
            return;
        }
        let now = time::Instant::now();
        let until = now
            .checked_add(g.create_timeout)
            .unwrap_or_else(|| far_future(now));
        g.span.in_scope(|| {
            tracing::info!(
                ?until,
                "the create future was dropped: the group waits to be adopted"
            );
        });
        g.unclaimed = Some(Unclaimed { joined, until });
        self.timers.insert((until, id));
    }

    /// A `create_group` of `id` (by `members`, to `identity`) while a
    /// creation of it whose future was dropped is here: it adopts that
    /// creation, if it is of the same group (the same members and shared
    /// settings, as the digest says). Its `reply` back if it does not.
    fn adopt(
        &mut self,
        id: GroupId,
        members: &[NodeId],
        identity: u128,
        reply: CreateReply,
    ) -> Result<(), CreateReply> {
        let Some(g) = self.groups.get_mut(&id) else {
            return Err(reply);
        };
        if g.members != members || g.identity != identity {
            return Err(reply);
        }
        if let Some(creating) = g.creating.as_mut().filter(|c| c.reply.is_closed()) {
            // Still in its rendezvous: the new future waits for it.
            g.span
                .in_scope(|| tracing::info!("a cancelled creation adopted"));
            creating.reply = reply;
            return Ok(());
        }
        let Some(unclaimed) = g.unclaimed.take() else {
            return Err(reply);
        };
        g.span
            .in_scope(|| tracing::info!("a cancelled creation's group adopted"));
        self.timers.remove(&(unclaimed.until, id));
        if let Err(Ok(joined)) = reply.send(Ok(unclaimed.joined)) {
            self.keep_unclaimed(id, joined);
        }
        Ok(())
    }

    /// The creation of `group` failed here for a mismatch or a timeout: fail
    /// the user's create and drop the group.
    pub(super) fn creation_failed(&mut self, group: GroupId, failure: CreateFailure) {
        let Some(mut g) = self.groups.remove(&group) else {
            return;
        };
        for at in g.armed() {
            self.timers.remove(&(at, group));
        }
        self.transport.release_group(group);
        g.node_counters.group_ended();
        let error = match failure {
            CreateFailure::Mismatch { peer, mismatch } => Error::MembershipMismatch {
                group,
                peer,
                mismatch,
            },
            CreateFailure::TimedOut { missing } => {
                let why = self.transport.why_unreachable(&missing);
                Error::CreateTimedOut {
                    group,
                    missing,
                    why,
                }
            }
        };
        g.span
            .in_scope(|| tracing::warn!(%error, "group not created"));
        if let Some(creating) = g.creating.take() {
            let _ = creating.reply.send(Err(error));
        }
    }
}

/// The summary of group `id` as every member must create it with
/// `config` ([`GroupSummary::new`] of its shared settings; the message
/// digest counts as set only when `Some(true)`, as this node resolved it).
pub(crate) fn config_summary(
    id: GroupId,
    members: &[NodeId],
    config: &GroupConfig,
) -> GroupSummary {
    let shared = SharedSettings {
        algorithm: config.algorithm(),
        block_size: config.block_size_policy(),
        max_message_size: config.max_message_size(),
        message_digest: config.message_digest() == Some(true),
        racks: config.racks(),
        slow_members: config.slow_members(),
        max_batch: config.small_message_batching(),
    };
    GroupSummary::new(id, members, &shared)
}

/// The digest of group `id` as every member must create it with `config`
/// (of its [`config_summary`]).
#[cfg(test)]
pub(crate) fn config_digest(id: GroupId, members: &[NodeId], config: &GroupConfig) -> u128 {
    config_summary(id, members, config).digest
}

/// Bytes a message of a group configured as `config` (its digest setting
/// resolved) carries after its own.
fn digest_len(config: &GroupConfig) -> u64 {
    if config.message_digest() == Some(true) {
        DIGEST_LEN
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::config_digest;
    use crate::config::GroupConfig;
    use crate::ids::{GroupId, NodeId};
    use crate::schedule::Algorithm;

    fn nodes(ids: &[u32]) -> Vec<NodeId> {
        ids.iter().copied().map(NodeId).collect()
    }

    #[test]
    fn the_digest_is_stable() {
        // Pinned: a change here breaks groups between builds. (The
        // largest message size and the block size are the ones the defaults
        // had when the value was pinned, and no batches.)
        let config = GroupConfig::new()
            .with_max_message_size(1 << 40)
            .with_block_size(1 << 20)
            .with_small_message_batching(None);
        let d = config_digest(GroupId(5), &nodes(&[0, 1, 2]), &config);
        assert_eq!(d, config_digest(GroupId(5), &nodes(&[0, 1, 2]), &config));
        assert_eq!(format!("{d:032x}"), "6cbbbb3fa55f0affa1bd3d1c13dae80c");
    }

    #[test]
    fn every_shared_field_changes_the_digest_and_local_ones_do_not() {
        let base = GroupConfig::new();
        let members = nodes(&[0, 1, 2]);
        let d = config_digest(GroupId(5), &members, &base);
        let different = [
            config_digest(GroupId(6), &members, &base),
            config_digest(GroupId(5), &nodes(&[0, 2, 1]), &base),
            config_digest(GroupId(5), &nodes(&[0, 1]), &base),
            config_digest(GroupId(5), &nodes(&[0, 1, 2, 3]), &base),
            config_digest(
                GroupId(5),
                &members,
                &base.clone().with_algorithm(Algorithm::Chain),
            ),
            config_digest(GroupId(5), &members, &base.clone().with_block_size(4096)),
            config_digest(
                GroupId(5),
                &members,
                &base.clone().with_block_size(256 << 10),
            ),
            config_digest(
                GroupId(5),
                &members,
                &base.clone().with_max_message_size(1 << 20),
            ),
            config_digest(
                GroupId(5),
                &members,
                &base.clone().with_algorithm(Algorithm::Hybrid),
            ),
            config_digest(
                GroupId(5),
                &members,
                &base.clone().with_racks(vec![0, 1, 0]),
            ),
            config_digest(
                GroupId(5),
                &members,
                &base.clone().with_racks(vec![0, 1, 1]),
            ),
            config_digest(GroupId(5), &members, &base.clone().with_slow_members([2])),
            config_digest(GroupId(5), &members, &base.clone().with_slow_members([1])),
            config_digest(
                GroupId(5),
                &members,
                &base.clone().with_small_message_batching(None),
            ),
            config_digest(
                GroupId(5),
                &members,
                &base.clone().with_small_message_batching(Some(4096)),
            ),
        ];
        for (i, other) in different.iter().enumerate() {
            assert_ne!(d, *other, "case {i}");
        }
        let local = base
            .clone()
            .with_receive_window(Some(3))
            .with_create_timeout(Duration::from_millis(1));
        assert_eq!(d, config_digest(GroupId(5), &members, &local));
    }
}
