//! A 3-replica blob store built on rdmc: the library part of the
//! `blob_store` example (its test, `rdmc/tests/blob_store.rs`, includes this
//! file too).
//!
//! `N` nodes form `N` overlapping groups of three: group `r` is rooted at
//! node `r` and replicates to the next two nodes (`r+1`, `r+2`, mod `N`),
//! so every node is the root of one group and a replica in two others, as
//! in the Cosmos-like workloads of "RDMC: A Reliable RDMA Multicast for
//! Large Objects". Object `i` is written by the group rooted at node
//! `i mod N`: roots rotate.
//!
//! - **Put**: the root writes its own copy to a file while it multicasts the
//!   object as one message; the write is acknowledged only once that file
//!   is written and the message's [`Receipt::persisted`](rdmc::Receipt::persisted)
//!   resolved, that is, when every replica said its copy is on stable
//!   storage: with [`Durability::Synced`] (the example's default) the root
//!   syncs its file, and the replicas' groups sync each message's file
//!   before handing it over and acknowledge it then. With
//!   `--durability taken`, once [`Receipt::delivered`](rdmc::Receipt::delivered)
//!   resolved: the application of every replica has taken it.
//! - **Replicas on disk**: the two other replicas receive each message
//!   straight into a file of their own (`<dir>/node-<j>/blob-<group>-<seq>`) through the
//!   group's receive-target hook ([`ReceiveTarget::File`]).
//! - **Get**: reads the object back from any replica that is up and checks
//!   its SHA-256 against the one recorded at put time.
//! - **Failures**: [`BlobStore::kill`] takes a node down (a crash on the
//!   `mem` transport; a node leaving on `tcp`). Every group it belongs to
//!   fails, naming it: writes to those groups fail from then on; the other
//!   groups carry on.
//! - **Restarts** (`tcp`): [`BlobStore::restart`] starts a killed node again
//!   at its address, in a new incarnation; the other nodes let it back in
//!   without restarting, and the three groups it belongs to are formed
//!   again under new ids (group `r`'s `k`-th form has id `r + k·N`, so
//!   `id mod N` is still its root). Writes to them succeed again: an
//!   application retries the writes that failed while the node was down,
//!   and every object is on its three replicas once more.

use std::future::Future;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use aws_lc_rs::digest::{SHA256, digest};
use bytes::Bytes;
use futures::StreamExt;
use futures::future::Either;
use rdmc::{
    ClusterKey, Durability, Group, GroupConfig, GroupId, MemCluster, Node, NodeConfig, NodeId,
    ReceiveTarget, ReceiveTargets, Receiver, Sender, TcpConfig,
};
use tokio::task::JoinHandle;

/// How many nodes hold each object: the root and the next two.
pub const REPLICAS: usize = 3;

/// The transport the store's nodes run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// In-process (`MemCluster`).
    Mem,
    /// Authenticated TCP on loopback, every node in this process.
    Tcp,
}

/// What went wrong with a put or a get.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The multicast failed: the group failed (the error names the member
    /// that did), or its root is down.
    #[error("replication failed: {0}")]
    Replication(#[from] rdmc::Error),
    /// No replica that is up holds the object with the right hash.
    #[error("object {id}: no replica that is up holds it intact")]
    Lost {
        /// The object.
        id: u64,
    },
    /// Reading or writing a replica's file failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// Where an acknowledged object is: what a put returns and a get takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlobRef {
    /// The object's id.
    pub id: u64,
    /// The group that wrote it.
    pub group: GroupId,
    /// Its sequence number in that group.
    pub seq: u64,
    /// Its replicas, the root first.
    pub replicas: [NodeId; REPLICAS],
    /// Its length in bytes.
    pub len: u64,
    /// Its SHA-256.
    pub sha256: [u8; 32],
}

/// The root's handle on one group, and the sequence number its next
/// message will get (messages are numbered in the order they are queued).
struct Root {
    sender: Sender,
    next_seq: u64,
}

/// The blob store: `N` nodes, one group rooted at each.
pub struct BlobStore {
    dir: PathBuf,
    mem: Option<MemCluster>,
    /// On `tcp`: the nodes' addresses and the cluster key, to restart a
    /// node with.
    tcp: Option<(Vec<SocketAddr>, ClusterKey)>,
    /// Per group (= root node): the id of its current form.
    ids: Mutex<Vec<GroupId>>,
    /// The nodes; `None` once killed.
    nodes: Mutex<Vec<Option<Node>>>,
    /// Root handles, indexed by group (= root node); `None` once its root
    /// was killed.
    roots: Vec<Mutex<Option<Root>>>,
    /// Per node, the tasks reading the groups it is a replica in.
    replicas: Mutex<Vec<Vec<ReplicaTask>>>,
    /// When a copy counts as written.
    durability: Durability,
}

/// A task keeping one node's replicas of one group ([`keep_replicas`]).
type ReplicaTask = JoinHandle<Result<(), rdmc::Error>>;

/// The members of the group rooted at `root`, among `n` nodes.
pub fn members_of(root: usize, n: usize) -> [NodeId; REPLICAS] {
    std::array::from_fn(|k| NodeId(((root + k) % n) as u32))
}

/// The directory where node `node` keeps its replicas.
pub fn replica_dir(dir: &Path, node: NodeId) -> PathBuf {
    dir.join(format!("node-{}", node.0))
}

/// The file where a replica keeps message `seq` of `group`.
pub fn replica_file(dir: &Path, node: NodeId, group: GroupId, seq: u64) -> PathBuf {
    replica_dir(dir, node).join(format!("blob-{}-{seq}", group.0))
}

/// The SHA-256 of `data`.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    digest(&SHA256, data).as_ref().try_into().expect("32 bytes")
}

impl BlobStore {
    /// Start `n` nodes (at least [`REPLICAS`]) on `transport`, keeping
    /// replicas under `dir`, and create the `n` groups; a put is
    /// acknowledged once every copy is `durability`
    /// ([`Durability::Synced`]: on stable storage; [`Durability::Taken`]:
    /// written, in the page cache).
    pub async fn start(
        transport: Transport,
        n: usize,
        dir: &Path,
        durability: Durability,
    ) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        if n < REPLICAS {
            return Err(
                format!("a store of {REPLICAS} replicas needs at least {REPLICAS} nodes").into(),
            );
        }
        let (nodes, mem, tcp) = start_nodes(transport, n).await?;
        for id in 0..n {
            std::fs::create_dir_all(replica_dir(dir, NodeId(id as u32)))?;
        }

        let store = BlobStore {
            dir: dir.to_path_buf(),
            mem,
            tcp,
            ids: Mutex::new((0..n as u64).map(GroupId).collect()),
            nodes: Mutex::new(nodes.into_iter().map(Some).collect()),
            roots: (0..n).map(|_| Mutex::new(None)).collect(),
            replicas: Mutex::new((0..n).map(|_| Vec::new()).collect()),
            durability,
        };
        // All groups at once.
        let roots: Vec<usize> = (0..n).collect();
        store.form(&roots).await?;
        Ok(store)
    }

    /// Form the groups rooted at `roots` under their current ids: every
    /// member creates each, the root's sender replaces the old form's and
    /// each replica starts reading.
    async fn form(&self, roots: &[usize]) -> Result<(), rdmc::Error> {
        let n = self.len();
        let ids = lock(&self.ids).clone();
        let creates = {
            let nodes = lock(&self.nodes);
            roots
                .iter()
                .map(|&root| {
                    let members = members_of(root, n);
                    let joins = members
                        .iter()
                        .map(|&node| {
                            let handle = nodes[node.index()]
                                .as_ref()
                                .ok_or(rdmc::Error::NodeShutDown(node))?;
                            let files = files_in(replica_dir(&self.dir, node));
                            let config = GroupConfig::new()
                                .with_receive_targets(files)
                                .with_durability(self.durability);
                            Ok(handle.create_group(ids[root], &members, config))
                        })
                        .collect::<Result<Vec<_>, rdmc::Error>>()?;
                    Ok(futures::future::try_join_all(joins))
                })
                .collect::<Result<Vec<_>, rdmc::Error>>()?
        };
        let groups = futures::future::try_join_all(creates).await?;
        for group in groups.into_iter().flatten() {
            match group {
                Group::Root(sender) => {
                    let root = sender.members()[0].index();
                    *lock(&self.roots[root]) = Some(Root {
                        sender,
                        next_seq: 0,
                    });
                }
                Group::Receiver(receiver) => {
                    let node = receiver.members()[receiver.rank()];
                    lock(&self.replicas)[node.index()].push(tokio::spawn(keep_replicas(receiver)));
                }
            }
        }
        Ok(())
    }

    /// Start `node`, killed before, again (on `tcp`: at its address, in a
    /// new incarnation; the other nodes let it back in and go on), and form
    /// the three groups it belongs to again, under new ids. Its replicas
    /// of the writes acknowledged before it went down are still in its
    /// directory; writes that failed while it was down are for the
    /// application to retry.
    ///
    /// # Errors
    /// On `mem` (a crashed in-process node cannot come back), or if the
    /// node cannot start or the groups cannot form.
    pub async fn restart(
        &self,
        node: NodeId,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let Some((addresses, key)) = &self.tcp else {
            return Err("only the tcp store restarts nodes".into());
        };
        if self.is_up(node) {
            return Err(format!("node {node} is up").into());
        }
        // The address is free again once the old node shut down.
        let listener = TcpListener::bind(addresses[node.index()])?;
        let config = TcpConfig::new(addresses.clone(), node, key.clone()).with_listener(listener);
        let started = Node::tcp(config, NodeConfig::new()).await?;
        lock(&self.nodes)[node.index()] = Some(started);
        let n = self.len();
        let roots: Vec<usize> = (0..REPLICAS).map(|k| (node.index() + n - k) % n).collect();
        {
            let mut ids = lock(&self.ids);
            for &root in &roots {
                ids[root] = GroupId(ids[root].0 + n as u64);
            }
        }
        self.form(&roots).await?;
        Ok(())
    }

    /// How many nodes the store has.
    pub fn len(&self) -> usize {
        self.roots.len()
    }

    /// The group (and so the root) that writes object `id`: the current
    /// form of the group rooted at node `id mod N`.
    pub fn group_of(&self, id: u64) -> GroupId {
        lock(&self.ids)[(id % self.len() as u64) as usize]
    }

    /// The replicas of object `id`, the root first.
    pub fn replicas_of(&self, id: u64) -> [NodeId; REPLICAS] {
        members_of((id % self.len() as u64) as usize, self.len())
    }

    /// Whether `node` is up.
    pub fn is_up(&self, node: NodeId) -> bool {
        lock(&self.nodes)[node.index()].is_some()
    }

    /// Write object `id`: resolves once every replica's application holds
    /// it (its bytes are in the replica's file), with where it is.
    ///
    /// The object is queued when `put` is called ([`Sender::try_send`]: the
    /// store's groups have no bound on messages in flight, so there is
    /// always room), not when the future is first polled: puts to one
    /// group are written in the order of the calls.
    ///
    /// # Errors
    /// [`StoreError::Replication`] if the group fails first (naming the
    /// member that failed) or its root is down.
    ///
    /// # Cancel safety
    /// Dropping the future does not withdraw the object: it may still end
    /// up on every replica, unacknowledged.
    pub fn put(
        &self,
        id: u64,
        data: Bytes,
    ) -> impl Future<Output = Result<BlobRef, StoreError>> + Send + 'static {
        let group = self.group_of(id);
        let replicas = self.replicas_of(id);
        let sha256 = sha256(&data);
        let len = data.len() as u64;
        // Queue the message at once and number it under the same lock, so
        // concurrent puts agree with the group.
        let sync = self.durability == Durability::Synced;
        let queued = match lock(&self.roots[replicas[0].index()]).as_mut() {
            Some(root) => root.sender.try_send(data.clone()).map(|receipt| {
                let seq = root.next_seq;
                root.next_seq += 1;
                // Synced: acknowledged once every replica said the object
                // is on its stable storage; else once each took it.
                let acknowledged = if sync {
                    Either::Left(receipt.persisted())
                } else {
                    Either::Right(receipt.delivered())
                };
                (seq, acknowledged)
            }),
            None => Err(rdmc::Error::NodeShutDown(replicas[0])),
        };
        let dir = self.dir.clone();
        async move {
            let (seq, delivered) = queued?;
            // The root is a replica too: it writes its own copy (off the
            // async threads) while the multicast runs.
            let path = replica_file(&dir, replicas[0], group, seq);
            let write = tokio::task::spawn_blocking(move || {
                let mut file = std::fs::File::create(path)?;
                std::io::Write::write_all(&mut file, &data)?;
                if sync {
                    file.sync_data()?;
                }
                Ok::<_, std::io::Error>(())
            });
            let (delivered, written) = tokio::join!(delivered, write);
            delivered?;
            written.map_err(std::io::Error::other)??;
            Ok(BlobRef {
                id,
                group,
                seq,
                replicas,
                len,
                sha256,
            })
        }
    }

    /// Read an object back from the first of its replicas that is up and
    /// holds it intact (its SHA-256 as at put time).
    ///
    /// # Errors
    /// [`StoreError::Lost`] if no replica that is up has it.
    pub async fn get(&self, blob: &BlobRef) -> Result<Bytes, StoreError> {
        for node in blob.replicas {
            if !self.is_up(node) {
                continue;
            }
            let path = replica_file(&self.dir, node, blob.group, blob.seq);
            let Ok(Ok(data)) = tokio::task::spawn_blocking(move || std::fs::read(path)).await
            else {
                continue;
            };
            if data.len() as u64 == blob.len && sha256(&data) == blob.sha256 {
                return Ok(Bytes::from(data));
            }
        }
        Err(StoreError::Lost { id: blob.id })
    }

    /// Take `node` down while the store runs: on `mem` it crashes (the
    /// cluster loses it at once); on `tcp` its node shuts down, leaving
    /// every group. Its replica readers stop first, so it takes no message
    /// once this returns, and every group it is in fails, naming it.
    pub async fn kill(&self, node: NodeId) {
        if let Some(mem) = &self.mem {
            mem.kill(node);
        }
        let readers = std::mem::take(&mut lock(&self.replicas)[node.index()]);
        for reader in &readers {
            reader.abort();
        }
        for reader in readers {
            let _ = reader.await;
        }
        let root = lock(&self.roots[node.index()]).take();
        drop(root);
        let gone = lock(&self.nodes)[node.index()].take();
        if let Some(gone) = gone {
            gone.shutdown().await;
        }
    }

    /// Close every group and shut the nodes down. Returns, per group, how
    /// its close ended: `Ok` once every replica holds every message, or
    /// the group's failure (a group with a killed member).
    pub async fn shutdown(self) -> Vec<(GroupId, Result<(), rdmc::Error>)> {
        let ids = into_inner(self.ids);
        let mut roots: Vec<_> = self.roots.into_iter().map(into_inner).collect();
        let closes = roots
            .iter_mut()
            .zip(ids)
            .enumerate()
            .map(|(g, (root, id))| async move {
                let outcome = match root {
                    Some(root) => root.sender.close().await,
                    None => Err(rdmc::Error::NodeShutDown(NodeId(g as u32))),
                };
                (id, outcome)
            });
        let outcomes = futures::future::join_all(closes).await;
        for reader in into_inner(self.replicas).into_iter().flatten() {
            let _ = reader.await;
        }
        drop(roots);
        let nodes = into_inner(self.nodes).into_iter().flatten();
        futures::future::join_all(nodes.map(Node::shutdown)).await;
        outcomes
    }
}

/// A replica's part in one group: take every message from the stream (the
/// receive-target hook already put its bytes in a file; taking it is this
/// replica's acknowledgement), then close once the root has closed.
///
/// rdmc acknowledges a message to the root as the application takes it
/// from the stream, when its bytes are in the file (the page cache), not
/// yet on disk: a store that must survive a power loss syncs the file
/// (`File::sync_data`) here, after the acknowledgement, or closes the group
/// only once everything taken is synced (a receiver's `close` is its
/// statement that it persisted every message).
async fn keep_replicas(mut receiver: Receiver) -> Result<(), rdmc::Error> {
    while let Some(message) = receiver.next().await {
        let message = message?;
        tracing::debug!(group = %message.group, seq = message.seq, "replica written");
    }
    receiver.close().await
}

/// A receive-target hook putting message `seq` of group `g` in
/// `dir/blob-<g>-<seq>`, opened off the async threads.
fn files_in(dir: PathBuf) -> ReceiveTargets {
    ReceiveTargets::new(move |incoming| {
        ReceiveTarget::create_file(dir.join(format!("blob-{}-{}", incoming.group.0, incoming.seq)))
    })
}

/// What [`start_nodes`] starts: the nodes, and on `mem` the cluster (to
/// kill nodes with), on `tcp` the addresses and key (to restart them with).
type Started = (
    Vec<Node>,
    Option<MemCluster>,
    Option<(Vec<SocketAddr>, ClusterKey)>,
);

/// Start `n` nodes on `transport`.
async fn start_nodes(
    transport: Transport,
    n: usize,
) -> Result<Started, Box<dyn std::error::Error + Send + Sync>> {
    match transport {
        Transport::Mem => {
            let cluster = MemCluster::new(n);
            let nodes = Node::in_memory_all(&cluster, NodeConfig::new())?;
            Ok((nodes, Some(cluster), None))
        }
        Transport::Tcp => {
            // Bind every port first, so the member list is known up front.
            let listeners = (0..n)
                .map(|_| TcpListener::bind("127.0.0.1:0"))
                .collect::<std::io::Result<Vec<_>>>()?;
            let addresses = listeners
                .iter()
                .map(TcpListener::local_addr)
                .collect::<std::io::Result<Vec<SocketAddr>>>()?;
            let mut key = [0; 32];
            aws_lc_rs::rand::fill(&mut key)?;
            let key = ClusterKey::from_bytes(key.to_vec())?;
            let starts = listeners.into_iter().enumerate().map(|(id, listener)| {
                let config = TcpConfig::new(addresses.clone(), NodeId(id as u32), key.clone())
                    .with_listener(listener);
                Node::tcp(config, NodeConfig::new())
            });
            let nodes = futures::future::try_join_all(starts).await?;
            Ok((nodes, None, Some((addresses, key))))
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn into_inner<T>(m: Mutex<T>) -> T {
    m.into_inner().unwrap_or_else(|e| e.into_inner())
}
