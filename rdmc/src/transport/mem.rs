//! `mem`: an in-process transport for tests, examples and simulation.
//!
//! Every node of a [`MemCluster`] lives in the same process. The transport
//! models the verbs contract faithfully rather than being a bare channel, so
//! the runtime logic an RDMA backend depends on is exercised without
//! hardware: a block send consumes the receive the peer posted for that
//! (group, link) — a send with nothing posted fails as an RNR error would, a
//! block longer than the posted receive fails as a length error would — the
//! copy into the receiver's buffer is the "DMA", completions are FIFO per
//! link, and [`MemCluster::kill`] makes a node vanish the way a crashed host
//! does: its peers see error completions and a broken connection.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::mpsc;

use super::pool::BufferPool;
use super::{
    BlockRef, Completion, CompletionSender, Completions, MessageBuffer, RecvRegion, Signal,
    Transport,
};
use crate::collections::HashMap;
use crate::ids::{GroupId, NodeId};

/// An in-process cluster of `n` nodes with ids `0..n`: the transport for
/// tests, examples and simulation. Start its nodes with
/// [`Node::in_memory`](crate::Node::in_memory) or
/// [`Node::in_memory_all`](crate::Node::in_memory_all); the
/// [crate-level example](crate) uses one.
///
/// It keeps the rules an RDMA transport keeps, so code that works here
/// does not depend on a bare channel's leniency: a block lands only in the
/// receive its peer posted for that group beforehand (a send with none
/// posted fails as an RNR error would, a block longer than the posted
/// receive as a length error would), completions arrive in order per link,
/// and [`kill`](Self::kill) makes a node vanish as a crashed host does.
///
/// Cloning gives another handle to the same cluster.
#[derive(Clone, Debug)]
pub struct MemCluster {
    fabric: Arc<Fabric>,
}

#[derive(Debug, Default)]
struct Fabric {
    state: Mutex<FabricState>,
}

#[derive(Debug, Default)]
struct FabricState {
    /// Each node's completion queue; `None` until it starts and after it dies.
    nodes: Vec<Option<CompletionSender>>,
    /// Nodes that were killed; they never come back.
    dead: Vec<bool>,
    /// Posted receives per (group, from, to), in posting order.
    posted: HashMap<(GroupId, NodeId, NodeId), VecDeque<RecvRegion>>,
}

impl MemCluster {
    /// A cluster with room for `nodes` nodes.
    pub fn new(nodes: usize) -> Self {
        let state = FabricState {
            nodes: vec![None; nodes],
            dead: vec![false; nodes],
            posted: HashMap::default(),
        };
        MemCluster {
            fabric: Arc::new(Fabric {
                state: Mutex::new(state),
            }),
        }
    }

    /// Number of nodes the cluster has room for.
    pub fn len(&self) -> usize {
        self.fabric.lock().nodes.len()
    }

    /// Whether the cluster has room for no node at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Crash `node`: it stops sending and receiving at once, and every other
    /// node sees its connection break. Transfers to it fail from now on.
    pub fn kill(&self, node: NodeId) {
        self.fabric.detach(node, Detach::Kill);
    }

    /// Attach node `id`: its transport endpoint and completion queue.
    /// `pool_budget`: the most bytes of spare message buffers the node keeps.
    pub(crate) fn attach(
        &self,
        id: NodeId,
        pool_budget: usize,
    ) -> Result<(MemEndpoint, Completions), AttachError> {
        let mut state = self.fabric.lock();
        let n = state.nodes.len();
        match state.nodes.get(id.index()) {
            None => return Err(AttachError::NoSuchNode { id, nodes: n }),
            Some(Some(_)) => return Err(AttachError::InUse(id)),
            Some(None) if state.dead[id.index()] => return Err(AttachError::InUse(id)),
            Some(None) => {}
        }
        let (tx, rx) = mpsc::unbounded_channel();
        // The node and the running nodes hear of each other.
        let up = |node| Completion::PeerUp {
            node,
            incarnation: 0,
            addr: None,
        };
        for (i, peer) in state.nodes.iter().enumerate() {
            if let Some(peer) = peer {
                let _ = peer.send(up(id));
                let _ = tx.send(up(NodeId(i as u32)));
            }
        }
        state.nodes[id.index()] = Some(tx);
        let endpoint = MemEndpoint {
            me: id,
            fabric: Arc::clone(&self.fabric),
            pool: BufferPool::new(pool_budget),
        };
        Ok((endpoint, rx))
    }
}

/// Why a node could not join a [`MemCluster`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AttachError {
    #[error("node {id} is not in a cluster of {nodes}")]
    NoSuchNode { id: NodeId, nodes: usize },
    #[error("node {0} is already running (or was killed)")]
    InUse(NodeId),
}

/// How a node goes off the fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Detach {
    /// [`MemCluster::kill`]: at once, for good (it may not start again),
    /// and the others see its connection break.
    Kill,
    /// Its endpoint went without a shutdown: like a kill, if it was on.
    Crash,
    /// It shut down: the others hear it left; its id may start again.
    Leave,
}

impl Fabric {
    /// Take `node` off the fabric, as `how` says.
    fn detach(&self, node: NodeId, how: Detach) {
        let mut state = self.lock();
        let Some(slot) = state.nodes.get_mut(node.index()) else {
            return;
        };
        if slot.take().is_none() && how != Detach::Kill {
            return;
        }
        state.dead[node.index()] |= how != Detach::Leave;
        state
            .posted
            .retain(|(_, from, to), _| *from != node && *to != node);
        for (i, peer) in state.nodes.iter().enumerate() {
            if let Some(peer) = peer.as_ref().filter(|_| i != node.index()) {
                let _ = peer.send(if how == Detach::Leave {
                    Completion::PeerLeft {
                        node,
                        incarnation: 0,
                    }
                } else {
                    Completion::peer_down(node, 0, "killed")
                });
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, FabricState> {
        // A panic while holding the lock leaves plain data behind; keep going.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl FabricState {
    fn queue(&self, node: NodeId) -> Option<&CompletionSender> {
        self.nodes.get(node.index()).and_then(Option::as_ref)
    }
}

/// One node's attachment to the fabric.
#[derive(Debug)]
pub(crate) struct MemEndpoint {
    me: NodeId,
    fabric: Arc<Fabric>,
    pool: BufferPool,
}

impl MemEndpoint {
    /// Report a failed transfer to this node (if it is still alive).
    fn fail_local(
        state: &FabricState,
        me: NodeId,
        group: GroupId,
        peer: NodeId,
        error: &'static str,
    ) {
        if let Some(q) = state.queue(me) {
            let _ = q.send(Completion::TransferFailed { group, peer, error });
        }
    }
}

impl Transport for MemEndpoint {
    fn describe(&self) -> String {
        "mem".to_owned()
    }

    fn alloc_buffer(&mut self, len: usize) -> Result<Arc<MessageBuffer>, super::AllocError> {
        self.pool.try_alloc(len)
    }

    fn post_recv(&mut self, group: GroupId, from: NodeId, region: RecvRegion) {
        let mut state = self.fabric.lock();
        if state.queue(self.me).is_none() {
            return; // killed
        }
        if state.queue(from).is_none() {
            Self::fail_local(&state, self.me, group, from, "peer unreachable");
            return;
        }
        state
            .posted
            .entry((group, from, self.me))
            .or_default()
            .push_back(region);
    }

    fn post_send(&mut self, group: GroupId, to: NodeId, block: BlockRef, immediate: u64) {
        let me = self.me;
        let region = {
            let mut state = self.fabric.lock();
            if state.queue(me).is_none() {
                return; // killed
            }
            if state.queue(to).is_none() {
                Self::fail_local(&state, me, group, to, "peer unreachable");
                return;
            }
            match state
                .posted
                .get_mut(&(group, me, to))
                .and_then(VecDeque::pop_front)
            {
                Some(region) if region.len() >= block.len() => region,
                Some(_) => {
                    Self::fail_local(
                        &state,
                        me,
                        group,
                        to,
                        "block longer than the posted receive",
                    );
                    Self::fail_local(
                        &state,
                        to,
                        group,
                        me,
                        "block longer than the posted receive",
                    );
                    return;
                }
                None => {
                    Self::fail_local(&state, me, group, to, "receiver not ready (RNR)");
                    return;
                }
            }
        };
        // The "DMA": outside the lock, so transfers on other links proceed.
        let len = block.len();
        region.write(block.as_slice());
        let state = self.fabric.lock();
        if let Some(q) = state.queue(to) {
            let _ = q.send(Completion::Received {
                group,
                from: me,
                immediate,
                len,
            });
        }
        if let Some(q) = state.queue(me) {
            let _ = q.send(Completion::Sent { group, to });
        }
    }

    fn send_signal(&mut self, group: GroupId, to: NodeId, signal: Signal) {
        let state = self.fabric.lock();
        if state.queue(self.me).is_none() {
            return; // killed
        }
        match state.queue(to) {
            Some(q) => {
                let _ = q.send(Completion::Signal {
                    group,
                    from: self.me,
                    signal,
                });
            }
            None => Self::fail_local(&state, self.me, group, to, "peer unreachable"),
        }
    }

    fn flush(&mut self) -> futures::future::BoxFuture<'static, ()> {
        // The node leaves for good, saying so; its id may start again.
        self.fabric.detach(self.me, Detach::Leave);
        Self::nothing_to_flush()
    }

    fn release_group(&mut self, group: GroupId) {
        let me = self.me;
        self.fabric
            .lock()
            .posted
            .retain(|(g, _, to), _| !(*g == group && *to == me));
    }
}

impl MemEndpoint {
    /// Nothing is ever queued: transfers complete inside the posting call.
    fn nothing_to_flush() -> futures::future::BoxFuture<'static, ()> {
        Box::pin(std::future::ready(()))
    }
}

impl Drop for MemEndpoint {
    fn drop(&mut self) {
        // Gone without a shutdown (which takes it off first): its peers
        // see its connection go.
        self.fabric.detach(self.me, Detach::Crash);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::Transport;

    /// The budget given at attach is the endpoint's pool's: within it a
    /// dropped buffer is reused, with a zero budget it is not kept.
    #[test]
    fn each_endpoint_pools_buffers_within_its_own_budget() {
        let cluster = MemCluster::new(2);
        let (mut pooled, _q0) = cluster.attach(NodeId(0), 8 << 20).unwrap();
        let (mut unpooled, _q1) = cluster.attach(NodeId(1), 0).unwrap();
        let a = pooled.alloc_buffer(1 << 20).unwrap();
        let ptr = a.as_ptr();
        drop(a);
        assert_eq!(pooled.pool.held(), 1 << 20);
        assert_eq!(pooled.alloc_buffer(1 << 20).unwrap().as_ptr(), ptr);
        drop(unpooled.alloc_buffer(1 << 20).unwrap());
        assert_eq!(unpooled.pool.held(), 0);
    }
}
