//! What a node and its groups have moved: counters kept by the node's actor
//! as it works, read at any time as typed snapshots ([`Node::stats`],
//! [`Sender::stats`], [`Receiver::stats`]), and reported to the
//! [`metrics`](https://docs.rs/metrics) facade too, so that an application
//! with a recorder installed (Prometheus, StatsD, ...) exports them with no
//! code of its own.
//!
//! The facade's names:
//!
//! | metric | kind | what |
//! |---|---|---|
//! | `rdmc_bytes_sent_total`, `rdmc_bytes_received_total` | counter, label `peer` | block bytes to and from each peer |
//! | `rdmc_blocks_sent_total`, `rdmc_blocks_received_total` | counter, label `peer` | blocks to and from each peer |
//! | `rdmc_messages_sent_total`, `rdmc_messages_delivered_total` | counter | messages the root completed; messages delivered to this member's application |
//! | `rdmc_message_seconds` | histogram, label `role` (`root`, `receiver`) | each message's time from its start here to its completion here |
//! | `rdmc_message_waiting_seconds` | histogram, label `role` | the part of it spent waiting for a peer's ready-for-block |
//! | `rdmc_group_failures_total` | counter, label `kind` | groups failed here, by the kind of failure |
//! | `rdmc_groups_open` | gauge | groups this node is a member of |
//!
//! [`Node::stats`]: crate::Node::stats
//! [`Sender::stats`]: crate::Sender::stats
//! [`Receiver::stats`]: crate::Receiver::stats

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::ids::NodeId;

/// A snapshot of one group's counters at this member.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupStats {
    /// Root: messages sent and complete here (every block sent).
    pub messages_sent: u64,
    /// Receiver: messages delivered to this member's application.
    pub messages_delivered: u64,
    /// Block bytes this member sent (the root, or a receiver relaying).
    pub bytes_sent: u64,
    /// Block bytes this member received.
    pub bytes_received: u64,
    /// Blocks this member sent.
    pub blocks_sent: u64,
    /// Blocks this member received.
    pub blocks_received: u64,
}

/// A snapshot of a node's counters: what it moved to and from each peer,
/// over all its groups, and how many groups it is in.
#[non_exhaustive]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Per peer this node moved blocks to or from, by node id.
    pub peers: Vec<PeerStats>,
    /// Groups this node is a member of now (created, not yet ended).
    pub groups_open: u64,
}

/// What a node moved to and from one peer.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerStats {
    /// The peer.
    pub node: NodeId,
    /// Block bytes sent to it.
    pub bytes_sent: u64,
    /// Block bytes received from it.
    pub bytes_received: u64,
    /// Blocks sent to it.
    pub blocks_sent: u64,
    /// Blocks received from it.
    pub blocks_received: u64,
}

/// One group's live counters, shared by the actor and the group's handle.
#[derive(Debug, Default)]
pub(crate) struct GroupCounters {
    messages_sent: AtomicU64,
    messages_delivered: AtomicU64,
    bytes_sent: AtomicU64,
    bytes_received: AtomicU64,
    blocks_sent: AtomicU64,
    blocks_received: AtomicU64,
}

impl GroupCounters {
    /// A snapshot.
    pub(crate) fn snapshot(&self) -> GroupStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        GroupStats {
            messages_sent: get(&self.messages_sent),
            messages_delivered: get(&self.messages_delivered),
            bytes_sent: get(&self.bytes_sent),
            bytes_received: get(&self.bytes_received),
            blocks_sent: get(&self.blocks_sent),
            blocks_received: get(&self.blocks_received),
        }
    }
}

/// A node's live counters: per peer, and the open groups.
#[derive(Debug, Default)]
pub(crate) struct NodeCounters {
    peers: Mutex<BTreeMap<NodeId, PeerCounters>>,
    groups_open: AtomicU64,
}

/// One peer's counters and the facade's handles for them.
#[derive(Debug)]
struct PeerCounters {
    stats: PeerStats,
    bytes_sent: metrics::Counter,
    bytes_received: metrics::Counter,
    blocks_sent: metrics::Counter,
    blocks_received: metrics::Counter,
}

impl PeerCounters {
    fn new(node: NodeId) -> Self {
        let peer = node.0.to_string();
        PeerCounters {
            stats: PeerStats {
                node,
                bytes_sent: 0,
                bytes_received: 0,
                blocks_sent: 0,
                blocks_received: 0,
            },
            bytes_sent: metrics::counter!("rdmc_bytes_sent_total", "peer" => peer.clone()),
            bytes_received: metrics::counter!("rdmc_bytes_received_total", "peer" => peer.clone()),
            blocks_sent: metrics::counter!("rdmc_blocks_sent_total", "peer" => peer.clone()),
            blocks_received: metrics::counter!("rdmc_blocks_received_total", "peer" => peer),
        }
    }
}

/// Which way a block went.
#[derive(Clone, Copy, Debug)]
enum Direction {
    Sent,
    Received,
}

/// How a message ended here, for the facade's histograms.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Role {
    Root,
    Receiver,
}

impl NodeCounters {
    fn with_peer(&self, peer: NodeId, f: impl FnOnce(&mut PeerCounters)) {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        f(peers.entry(peer).or_insert_with(|| PeerCounters::new(peer)));
    }

    /// A block of `len` bytes of `group` posted to `peer`.
    pub(crate) fn sent(&self, group: &GroupCounters, peer: NodeId, len: usize) {
        self.count(group, peer, len, Direction::Sent);
    }

    /// A block of `len` bytes of `group` received from `peer`.
    pub(crate) fn received(&self, group: &GroupCounters, peer: NodeId, len: usize) {
        self.count(group, peer, len, Direction::Received);
    }

    fn count(&self, group: &GroupCounters, peer: NodeId, len: usize, direction: Direction) {
        let len = len as u64;
        let (bytes, blocks) = match direction {
            Direction::Sent => (&group.bytes_sent, &group.blocks_sent),
            Direction::Received => (&group.bytes_received, &group.blocks_received),
        };
        bytes.fetch_add(len, Ordering::Relaxed);
        blocks.fetch_add(1, Ordering::Relaxed);
        self.with_peer(peer, |p| {
            let (stats, bytes, blocks) = match direction {
                Direction::Sent => (
                    (&mut p.stats.bytes_sent, &mut p.stats.blocks_sent),
                    &p.bytes_sent,
                    &p.blocks_sent,
                ),
                Direction::Received => (
                    (&mut p.stats.bytes_received, &mut p.stats.blocks_received),
                    &p.bytes_received,
                    &p.blocks_received,
                ),
            };
            *stats.0 += len;
            *stats.1 += 1;
            bytes.increment(len);
            blocks.increment(1);
        });
    }

    /// `messages` messages of `group` completed here in `total`, of which
    /// `waiting` waiting for a peer's ready-for-block.
    pub(crate) fn completed(
        group: &GroupCounters,
        role: Role,
        messages: u64,
        (total, waiting): (std::time::Duration, std::time::Duration),
    ) {
        let role = match role {
            Role::Root => {
                group.messages_sent.fetch_add(messages, Ordering::Relaxed);
                metrics::counter!("rdmc_messages_sent_total").increment(messages);
                "root"
            }
            Role::Receiver => {
                group
                    .messages_delivered
                    .fetch_add(messages, Ordering::Relaxed);
                metrics::counter!("rdmc_messages_delivered_total").increment(messages);
                "receiver"
            }
        };
        metrics::histogram!("rdmc_message_seconds", "role" => role).record(total.as_secs_f64());
        metrics::histogram!("rdmc_message_waiting_seconds", "role" => role)
            .record(waiting.as_secs_f64());
    }

    /// A group was created here.
    pub(crate) fn group_opened(&self) {
        self.groups_open.fetch_add(1, Ordering::Relaxed);
        metrics::gauge!("rdmc_groups_open").increment(1.0);
    }

    /// A group ended here (closed, failed or left).
    pub(crate) fn group_ended(&self) {
        self.groups_open.fetch_sub(1, Ordering::Relaxed);
        metrics::gauge!("rdmc_groups_open").decrement(1.0);
    }

    /// A group failed here with a failure of `kind`.
    pub(crate) fn group_failed(kind: &rdmc_proto::FailureKind) {
        // The variant's name: `OutOfMemory { size: 5 }` is `OutOfMemory`.
        let name: String = format!("{kind:?}")
            .chars()
            .take_while(char::is_ascii_alphanumeric)
            .collect();
        metrics::counter!("rdmc_group_failures_total", "kind" => name).increment(1);
    }

    /// A snapshot.
    pub(crate) fn snapshot(&self) -> NodeStats {
        let peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        NodeStats {
            peers: peers.values().map(|p| p.stats).collect(),
            groups_open: self.groups_open.load(Ordering::Relaxed),
        }
    }
}
