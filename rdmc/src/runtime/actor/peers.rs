//! The actor's view of its peers: which run of each is connected, what the
//! application is told about them, and what a peer's coming and going does
//! to the node's groups.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use tokio::sync::mpsc;

use super::Actor;
use crate::ids::{GroupId, NodeId};
use crate::peer::{Peer, PeerEvent};
use crate::proto::Rank;
use crate::transport::{Completion, Transport};

/// Every peer the node has heard of, and who watches them.
#[derive(Debug, Default)]
pub(super) struct PeerView {
    peers: BTreeMap<NodeId, Peer>,
    watchers: Vec<mpsc::UnboundedSender<PeerEvent>>,
    /// Why each peer that is down went down, as the transport said.
    down_because: BTreeMap<NodeId, String>,
    /// How many groups the node has created.
    pub(super) made: u64,
    /// How many groups the node had created when each peer last went:
    /// those held its connection that ended.
    gone_at: BTreeMap<NodeId, u64>,
    /// The same when each peer's connection was last closed as idle: if a
    /// new run of the peer connects, the groups made before held the old
    /// run (gone meanwhile, unseen), those made since wait for the new.
    idle_at: BTreeMap<NodeId, u64>,
}

impl PeerView {
    /// Every peer the node has heard of, by id.
    pub(super) fn list(&self) -> Vec<Peer> {
        self.peers.values().cloned().collect()
    }

    /// Tell `watcher` of every connected peer, then of every change.
    pub(super) fn watch(&mut self, watcher: mpsc::UnboundedSender<PeerEvent>) {
        for peer in self.peers.values().filter(|p| p.up) {
            let _ = watcher.send(PeerEvent::Up {
                node: peer.node,
                incarnation: peer.incarnation,
                addr: peer.addr,
            });
        }
        self.watchers.push(watcher);
    }

    /// Why `node` is down, as the transport said, if it is.
    pub(super) fn why_down(&self, node: NodeId) -> Option<String> {
        self.down_because.get(&node).cloned()
    }

    fn tell(&mut self, event: PeerEvent) {
        self.watchers.retain(|w| w.send(event.clone()).is_ok());
    }

    /// Whether a report that `node`'s run `incarnation` is gone is about a
    /// run older than the latest one seen (a newer run is connected, or was).
    fn is_stale(&self, node: NodeId, incarnation: u64) -> bool {
        self.peers
            .get(&node)
            .is_some_and(|p| incarnation < p.incarnation)
    }
}

impl<T: Transport> Actor<T> {
    /// The transport connected `node`'s run `incarnation`.
    pub(super) fn peer_up(&mut self, node: NodeId, incarnation: u64, addr: Option<SocketAddr>) {
        if self.peers.is_stale(node, incarnation) {
            tracing::debug!(
                peer = node.0,
                incarnation,
                "ignored a stale peer's connection"
            );
            return;
        }
        tracing::info!(peer = node.0, incarnation, ?addr, "peer up");
        // A new run's failures have reasons of their own; the same run
        // connected again keeps why its connection failed last (a
        // configuration error fails each of its connections alike).
        if self
            .peers
            .peers
            .get(&node)
            .is_some_and(|p| p.incarnation != incarnation)
        {
            self.peers.down_because.remove(&node);
        }
        self.rendezvous.handle_peer_up(node);
        // The groups that held the peer were made over its earlier
        // connection, which is gone (they have failed, or are failing):
        // what comes from it for them over the new one came after a gap,
        // and is ignored. (What its old connection carried arrived before
        // the old connection's end was reported, and counts.) A peer's
        // first connection, made on demand for groups that hold it, comes
        // after no gap, and neither does the same run connected again
        // after its connection was closed as idle (nothing reported).
        let gap = self
            .peers
            .peers
            .get(&node)
            .is_some_and(|p| !p.up || p.incarnation != incarnation);
        // Only the groups made before the peer went: one made since (connected
        // on demand, it waited for the peer to come back) is made over the
        // new connection.
        let mut gone_at = self.peers.gone_at.get(&node).copied().unwrap_or(u64::MAX);
        let idle_at = self.peers.idle_at.remove(&node);
        if let Some(idle_at) = idle_at.filter(|_| {
            self.peers
                .peers
                .get(&node)
                .is_some_and(|p| p.incarnation != incarnation)
        }) {
            gone_at = gone_at.min(idle_at);
        }
        let mut lost = Vec::new();
        for (&id, g) in self
            .groups
            .iter_mut()
            .filter(|(_, g)| gap && g.made <= gone_at)
        {
            if let Some(&rank) = g.rank_of.get(&node)
                && !g.lost.contains(&rank)
            {
                g.lost.push(rank);
                lost.push((id, rank));
            }
        }
        // Such a group cannot go on: it fails naming the peer (after the
        // grace a report of the cause may come in), should the end of the
        // connection it was made over not have been reported.
        for (id, rank) in lost {
            self.peer_unreachable(id, rank);
        }
        self.peers.peers.insert(
            node,
            Peer {
                node,
                incarnation,
                addr,
                up: true,
            },
        );
        self.peers.tell(PeerEvent::Up {
            node,
            incarnation,
            addr,
        });
    }

    /// The transport lost `node`'s run `incarnation`: every group holding
    /// it fails (unless a newer run has come up since, whose groups stand).
    pub(super) fn peer_down(&mut self, node: NodeId, incarnation: u64, reason: String) {
        if self.peers.is_stale(node, incarnation) {
            tracing::debug!(
                peer = node.0,
                incarnation,
                "a stale run of the peer is gone"
            );
            return;
        }
        // A failure for this node only where a group of it held the peer;
        // a peer it shares nothing with (a run that ended, a link torn down
        // mid-agreement as the peer exits) is news, not a warning.
        if self.groups.values().any(|g| g.rank_of.contains_key(&node)) {
            tracing::warn!(peer = node.0, incarnation, %reason, "peer down");
        } else {
            tracing::info!(peer = node.0, incarnation, %reason, "peer down (in no group of this node)");
        }
        self.peers.down_because.insert(node, reason.clone());
        let event = PeerEvent::Down {
            node,
            incarnation,
            reason,
        };
        self.peer_gone((node, incarnation), event);
    }

    /// A relayed signal arrived: pass it on, or take it as arrived from its
    /// origin if it is for this node.
    pub(super) fn on_relayed(&mut self, c: Completion) {
        let Completion::Relayed {
            group,
            from,
            signal,
            route,
        } = c
        else {
            unreachable!("a relayed signal")
        };
        if let Some(from) = self.transport.forward(group, from, signal, route) {
            self.on_completion(Completion::Signal {
                group,
                from,
                signal,
            });
        }
    }

    /// Member `rank` of `group` reported the group failed: a member that
    /// failed relays nothing more, so if the root's verdict comes to this
    /// node through it, the verdict is lost with it, and the group fails
    /// here with the cause the report gave.
    pub(super) fn carrier_failed(&mut self, group: GroupId, rank: Rank) {
        if let Some(g) = self.groups.get_mut(&group)
            && !g.member.is_finished()
            && self
                .transport
                .cut_off_by(group, g.members[rank])
                .contains(&g.members[0])
        {
            g.member
                .handle_peer_failure_cutting_off(Some(rank), &[0], None);
        }
        self.drive(group);
    }

    /// `node`'s run `incarnation` is no longer connected, as no group
    /// needed it: nothing fails; see [`PeerView::idle_at`].
    pub(super) fn peer_idle(&mut self, node: NodeId, incarnation: u64) {
        if self.peers.is_stale(node, incarnation) {
            return;
        }
        tracing::debug!(peer = node.0, incarnation, "peer idle");
        self.peers.idle_at.insert(node, self.peers.made);
    }

    /// `node`'s run `incarnation` left for good, saying so: like a peer
    /// down for its groups (any still holding it fail), told as
    /// [`PeerEvent::Left`] and logged as no failure — except where the
    /// root's verdict comes relayed and `node` is the root or a relay of
    /// it: a node leaves only once it has said its last word on each
    /// group, a failure report to every member or the verdict that the
    /// group closed (a relay passes on the verdicts of the members below it
    /// before its own reaches it), which may still be with the relays
    /// further on; they are watched as any peer is.
    pub(super) fn peer_left(&mut self, node: NodeId, incarnation: u64) {
        if self.peers.is_stale(node, incarnation) {
            return;
        }
        tracing::info!(peer = node.0, incarnation, "peer left");
        let event = PeerEvent::Left { node, incarnation };
        let relayed: Vec<GroupId> = self
            .groups
            .iter()
            .filter(|&(&id, g)| {
                let root = g.members[0];
                self.transport.verdict_relayed(id)
                    && (root == node || self.transport.cut_off_by(id, node).contains(&root))
            })
            .map(|(&id, _)| id)
            .collect();
        for id in &relayed {
            if let Some(g) = self.groups.get_mut(id)
                && g.members[0] == node
            {
                g.root_left = true;
            }
        }
        self.peer_gone_except((node, incarnation), event, &relayed);
    }

    /// `node`'s run `incarnation` is gone, as `event` tells: tell the
    /// watchers and fail every group holding it.
    fn peer_gone(&mut self, gone: (NodeId, u64), event: PeerEvent) {
        self.peer_gone_except(gone, event, &[]);
    }

    /// As [`peer_gone`](Self::peer_gone), but the groups `spared` do not
    /// count the peer lost.
    fn peer_gone_except(
        &mut self,
        (node, incarnation): (NodeId, u64),
        event: PeerEvent,
        spared: &[GroupId],
    ) {
        self.rendezvous.handle_peer_down(node);
        self.peers.gone_at.insert(node, self.peers.made);
        let entry = self.peers.peers.entry(node).or_insert(Peer {
            node,
            incarnation,
            addr: None,
            up: false,
        });
        let was_up = std::mem::replace(&mut entry.up, false);
        if was_up || incarnation > 0 {
            self.peers.tell(event);
        }
        let affected: Vec<(GroupId, Rank)> = self
            .groups
            .iter()
            .filter(|(id, _)| !spared.contains(id))
            .filter_map(|(id, g)| g.rank_of.get(&node).map(|&r| (*id, r)))
            .collect();
        for (id, rank) in affected {
            self.peer_unreachable(id, rank);
        }
    }
}
