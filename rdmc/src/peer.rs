//! The node's view of its peers: who is connected, in which run
//! (*incarnation*), and a stream of changes to react to — for example to
//! re-form the groups a restarted replica belonged to.

use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use futures::stream::FusedStream;
use tokio::sync::mpsc;

use crate::ids::NodeId;

/// A change in a node's view of its peers
/// ([`Node::peer_events`](crate::Node::peer_events)).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerEvent {
    /// `node` is connected, in its run `incarnation`. A node that restarted
    /// comes back with a higher incarnation than it had; the groups that
    /// held its earlier run have failed, new groups may include it.
    Up {
        /// The peer.
        node: NodeId,
        /// Which run of the peer: a restarted node has a higher one.
        incarnation: u64,
        /// Where it is connected from or to, when the transport knows.
        addr: Option<SocketAddr>,
    },
    /// `node`'s run `incarnation` is gone: its connection broke, it stopped
    /// answering, or it restarted. Every group that held it has failed.
    Down {
        /// The peer.
        node: NodeId,
        /// The run that is gone.
        incarnation: u64,
        /// Why, in words: the connection's error, a silence past the
        /// failure timeout, a newer run connecting, ...
        reason: String,
    },
    /// `node`'s run `incarnation` left for good: its node shut down
    /// ([`Node::shutdown`](crate::Node::shutdown)) and said so. Not a
    /// failure; the groups that still held it have failed, as for
    /// [`PeerEvent::Down`]. A later run of the node (a restart) comes back
    /// with [`PeerEvent::Up`].
    Left {
        /// The peer.
        node: NodeId,
        /// The run that left.
        incarnation: u64,
    },
}

/// A peer as a node sees it ([`Node::peers`](crate::Node::peers)).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// The peer.
    pub node: NodeId,
    /// Its latest run this node has seen (0 on transports that do not tell
    /// runs apart).
    pub incarnation: u64,
    /// Where it is connected, when the transport knows.
    pub addr: Option<SocketAddr>,
    /// Whether it is connected now. Connected on demand
    /// ([`Connections::OnDemand`](crate::Connections::OnDemand)), a peer
    /// whose connection was closed as idle (nothing wrong, made again when
    /// a group needs it) stays up; a peer that went down or left is not,
    /// until a connection of it is made again.
    pub up: bool,
}

/// The stream of a node's [`PeerEvent`]s: first an [`PeerEvent::Up`] for
/// every peer connected when it was made, then every change, in order. It
/// ends when the node shuts down.
///
/// Cancel safe: dropping a `next()` loses no event.
#[derive(Debug)]
pub struct PeerEvents {
    events: mpsc::UnboundedReceiver<PeerEvent>,
    done: bool,
}

impl PeerEvents {
    pub(crate) fn new(events: mpsc::UnboundedReceiver<PeerEvent>) -> Self {
        PeerEvents {
            events,
            done: false,
        }
    }
}

impl Stream for PeerEvents {
    type Item = PeerEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<PeerEvent>> {
        if self.done {
            return Poll::Ready(None);
        }
        let next = self.events.poll_recv(cx);
        if let Poll::Ready(None) = next {
            self.done = true;
        }
        next
    }
}

impl FusedStream for PeerEvents {
    fn is_terminated(&self) -> bool {
        self.done
    }
}
