//! Allreduce on a pipelined k-ary tree: the members' buffers are reduced up
//! the tree to rank 0 in chunks, and rank 0 multicasts each reduced chunk
//! to every member as soon as it has it.

use bytes::{Bytes, BytesMut};
use futures::future::{join_all, try_join_all};

use super::edge::{
    AllreduceError, MAX_RING_BLOCK, VERDICT, Verdict, copy_exact, failed, next_message,
    receiver_of, root_of,
};
use super::halving::Halving;
use super::model::{self, LinkParams};
use super::op::ReduceOp;
use super::tree_wire::{Chunks, FirstMessage, Status, decode, encode, len_of};
use crate::{Error, Group, GroupConfig, GroupId, Node, NodeId, Receiver, Sender, Sent};

/// The default chunk: the unit the tree pipelines.
pub const DEFAULT_CHUNK_SIZE: usize = 64 * 1024;

/// How an [`Allreduce`] is built.
#[derive(Clone, Debug)]
pub struct AllreduceConfig {
    algorithm: AllreduceAlgorithm,
    degree: Option<usize>,
    expected_size: u64,
    chunk: usize,
    link: LinkParams,
    group: Option<GroupConfig>,
    ring_lanes: usize,
    ring_pieces: usize,
}

/// The default number of groups per ring edge ([`AllreduceConfig::with_ring_lanes`]).
pub const DEFAULT_RING_LANES: usize = 2;

/// The default number of messages each ring step is split into
/// ([`AllreduceConfig::with_ring_pieces`]).
pub const DEFAULT_RING_PIECES: usize = 1;

impl Default for AllreduceConfig {
    fn default() -> Self {
        AllreduceConfig {
            algorithm: AllreduceAlgorithm::Auto,
            degree: None,
            expected_size: 1 << 20,
            chunk: DEFAULT_CHUNK_SIZE,
            link: LinkParams::lab(),
            group: None,
            ring_lanes: DEFAULT_RING_LANES,
            ring_pieces: DEFAULT_RING_PIECES,
        }
    }
}

impl AllreduceConfig {
    /// The defaults: the degree the model picks for 1 MiB buffers on a
    /// 250 Mbit/s link ([`LinkParams::lab`]), 64 KiB chunks.
    pub fn new() -> Self {
        Self::default()
    }

    /// Which algorithm runs each call (default
    /// [`AllreduceAlgorithm::Auto`]).
    pub fn with_algorithm(mut self, algorithm: AllreduceAlgorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// Fix the tree's degree (at least 1) instead of asking the model.
    pub fn with_degree(mut self, k: usize) -> Self {
        self.degree = Some(k.max(1));
        self
    }

    /// The buffer size the model picks the degree for.
    pub fn with_expected_size(mut self, bytes: u64) -> Self {
        self.expected_size = bytes;
        self
    }

    /// The link the model picks the degree for.
    pub fn with_link_params(mut self, link: LinkParams) -> Self {
        self.link = link;
        self
    }

    /// The pipelining unit in bytes (at least 1; rounded down to whole
    /// elements at each call).
    pub fn with_chunk_size(mut self, bytes: usize) -> Self {
        self.chunk = bytes.max(1);
        self
    }

    /// The configuration of the groups the allreduce runs over (default:
    /// [`GroupConfig::new`] with blocks of a quarter chunk for the tree,
    /// and for the ring blocks that hold a whole step's message for the
    /// expected size, see [`with_expected_size`](Self::with_expected_size)).
    pub fn with_group_config(mut self, config: GroupConfig) -> Self {
        self.group = Some(config);
        self
    }

    /// How many two-member groups carry each edge of the ring (at least 1;
    /// default [`DEFAULT_RING_LANES`]): the ring's steps take them in turn.
    /// A receiver asks for a group's next message only once the one before
    /// it arrived, so with one group every step waits for that request to
    /// cross the link behind the step's data; with two, each group's
    /// request goes out a whole step ahead of its message.
    pub fn with_ring_lanes(mut self, lanes: usize) -> Self {
        self.ring_lanes = lanes.max(1);
        self
    }

    /// Into how many messages each ring step's segment is split (at least
    /// 1; default [`DEFAULT_RING_PIECES`]). Piece i of a step is sent on
    /// as soon as piece i of the step before arrived and was reduced, so
    /// consecutive steps overlap instead of each waiting for the whole of
    /// the one before. Each edge then has `lanes × pieces` groups, so
    /// that every piece's receive is still asked for ahead of it.
    pub fn with_ring_pieces(mut self, pieces: usize) -> Self {
        self.ring_pieces = pieces.max(1);
        self
    }

    /// The degree used for `n` members: the fixed one, or the model's.
    pub fn degree(&self, n: usize) -> usize {
        let k = self.degree.unwrap_or_else(|| {
            model::best_degree(n, self.expected_size, self.chunk as u64, &self.link)
        });
        k.clamp(1, n.saturating_sub(1).max(1))
    }
}

/// The algorithm of an [`Allreduce`]'s calls.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AllreduceAlgorithm {
    /// Per call, whichever of the tree and the ring the model
    /// ([`model::tree_allreduce`], [`model::ring_allreduce`]) says is
    /// faster for the buffer's size. Never
    /// [`HalvingDoubling`](Self::HalvingDoubling): its model beats the
    /// ring's wherever the group size is a power of two, but the model has
    /// no term for its two-way exchanges between the same pair of hosts,
    /// and over TCP it has not beaten the ring (the repository's
    /// BENCHMARKS.md has the measurements).
    #[default]
    Auto,
    /// Always the pipelined k-ary tree (no ring groups are made).
    Tree,
    /// Always the ring: reduce-scatter then allgather, each member sending
    /// to the next rank over a two-member group.
    Ring,
    /// Always recursive halving and doubling (Thakur, Rabenseifner and
    /// Gropp, "Optimization of Collective Communication Operations in
    /// MPICH"): a reduce-scatter by recursive halving then an allgather by
    /// recursive doubling, `2 log2 p` steps of one message each way
    /// between partners (`p` the largest power of two not above the
    /// group size); the other `n − p` members first hand their buffer to
    /// a partner and get the result from it at the end
    /// ([`model::halving_doubling_allreduce`]).
    HalvingDoubling,
}

/// The parent of rank `r > 0` in the k-ary tree.
pub fn tree_parent(r: usize, k: usize) -> usize {
    (r - 1) / k
}

/// The children of rank `r` among `n` members, in rank order.
pub fn tree_children(r: usize, k: usize, n: usize) -> std::ops::Range<usize> {
    let first = (r * k + 1).min(n);
    first..(r * k + k + 1).min(n)
}

/// Allreduce among a fixed set of members: every member calls
/// [`allreduce`](Self::allreduce) with a buffer of the same length, and
/// each gets the element-wise reduction of all of them.
///
/// Built once per membership ([`new`](Self::new)): it creates the groups it
/// runs over — one two-member group per tree edge, with the child as root,
/// and one group of all members with rank 0 as root for the result — and
/// uses them for every call; unless the algorithm is
/// [`AllreduceAlgorithm::Tree`], also `lanes` two-member groups from each
/// rank to the next for the ring, times its pieces
/// ([`AllreduceConfig::with_ring_lanes`],
/// [`AllreduceConfig::with_ring_pieces`]); and with
/// [`AllreduceAlgorithm::HalvingDoubling`] two two-member groups (one each
/// way) per pair of partners of the recursive halving. It takes the group
/// ids `base` to `base + (1 + lanes × pieces) n`, and with the halving's
/// groups up to `base + (3 + lanes × pieces + ⌊log2 n⌋) n`.
///
/// Calls must be made in the same order on every member. A call costs a
/// message per chunk on each edge; the first carries a small header, so
/// that a buffer of the wrong length fails every member with the same
/// error instead of leaving them waiting.
#[derive(Debug)]
pub struct Allreduce {
    me: NodeId,
    rank: usize,
    members: Vec<NodeId>,
    k: usize,
    chunk: usize,
    /// This member's edge to its parent (it is the root of it).
    up: Option<Sender>,
    /// Each child's edge, in rank order.
    children: Vec<(usize, Receiver)>,
    /// The result's multicast from rank 0 (absent for one member).
    result: Option<Group>,
    algorithm: AllreduceAlgorithm,
    /// The model's link, to choose between tree and ring per call.
    link: LinkParams,
    /// The ring's edges. Absent with `AllreduceAlgorithm::Tree` or one
    /// member.
    ring: Option<Ring>,
    /// Messages per ring step.
    ring_pieces: usize,
    /// The recursive halving's groups. Absent unless the algorithm is
    /// `HalvingDoubling`, and with one member.
    halving: Option<Halving>,
    /// The ring's accumulator, kept from call to call: its memory is
    /// faulted in and zeroed once, not on every call.
    ring_acc: Vec<u8>,
}

/// The ring's edges of one member: `lanes × pieces` groups to the next
/// rank (this member the root of each) and as many from the previous one.
/// The ring's messages take the lanes in turn, the same turn on every
/// member.
#[derive(Debug)]
struct Ring {
    to_next: Vec<Sender>,
    from_prev: Vec<Receiver>,
    /// The lane of the next message, sent and received.
    turn: usize,
}

impl Allreduce {
    /// Join the allreduce over `members` (this node among them; rank 0 is
    /// `members[0]`). Every member calls this with the same arguments; it
    /// resolves once every group is up.
    ///
    /// # Errors
    /// [`AllreduceError::Setup`] if this node is not a member or a group
    /// cannot be created (a used id, a member that does not answer).
    pub async fn new(
        node: &Node,
        base: GroupId,
        members: &[NodeId],
        config: AllreduceConfig,
    ) -> Result<Self, AllreduceError> {
        let me = node.id();
        let n = members.len();
        let rank = members
            .iter()
            .position(|m| *m == me)
            .ok_or(AllreduceError::Setup(Error::InvalidConfig(
                "this node is not among the allreduce's members",
            )))?;
        let k = config.degree(n);
        let group_config = config
            .group
            .clone()
            .unwrap_or_else(|| GroupConfig::new().with_block_size((config.chunk / 4).max(1)));
        let edge = |child: usize| GroupId(base.0 + 1 + child as u64);
        let up = async {
            if rank == 0 {
                return Ok(None);
            }
            let pair = [me, members[tree_parent(rank, k)]];
            node.create_group(edge(rank), &pair, group_config.clone())
                .await
                .map(|g| Some(root_of(g)))
        };
        let children = try_join_all(tree_children(rank, k, n).map(|c| {
            let pair = [members[c], me];
            let config = group_config.clone();
            async move {
                node.create_group(edge(c), &pair, config)
                    .await
                    .map(|g| (c, receiver_of(g)))
            }
        }));
        let result = async {
            if n <= 1 {
                return Ok(None);
            }
            node.create_group(base, members, group_config.clone())
                .await
                .map(Some)
        };
        // Lane l of the ring's edge from rank `from`.
        let ring_edge =
            |lane: usize, from: usize| GroupId(base.0 + 1 + (n * (1 + lane) + from) as u64);
        // One block per ring message at the expected size: a message of
        // several blocks waits a round trip after its first block, the
        // receiver learning its size only then. Segments are whole
        // elements, up to one element over size / n: 64 bytes of slack.
        let ring_config = config.group.clone().unwrap_or_else(|| {
            let step = config.expected_size.div_ceil(n.max(1) as u64) + VERDICT as u64 + 64;
            let block = usize::try_from(step)
                .unwrap_or(usize::MAX)
                .min(MAX_RING_BLOCK)
                .max((config.chunk / 4).max(1));
            GroupConfig::new().with_block_size(block)
        });
        let lanes = config.ring_lanes.max(1) * config.ring_pieces.max(1);
        let ring = async {
            if n <= 1 || config.algorithm == AllreduceAlgorithm::Tree {
                return Ok(None);
            }
            let (next, prev) = ((rank + 1) % n, (rank + n - 1) % n);
            let (out_pair, in_pair) = ([me, members[next]], [members[prev], me]);
            let to_next =
                try_join_all((0..lanes).map(|l| {
                    node.create_group(ring_edge(l, rank), &out_pair, ring_config.clone())
                }));
            let from_prev = try_join_all(
                (0..lanes)
                    .map(|l| node.create_group(ring_edge(l, prev), &in_pair, ring_config.clone())),
            );
            let (to_next, from_prev) = tokio::try_join!(to_next, from_prev)?;
            let to_next = to_next.into_iter().map(root_of).collect();
            let from_prev = from_prev.into_iter().map(receiver_of).collect();
            Ok(Some(Ring {
                to_next,
                from_prev,
                turn: 0,
            }))
        };
        let halving = async {
            if n <= 1 || config.algorithm != AllreduceAlgorithm::HalvingDoubling {
                return Ok(None);
            }
            Halving::new(
                node,
                base.0 + 1 + (n * (1 + lanes)) as u64,
                members,
                rank,
                config.expected_size,
                (config.chunk / 4).max(1),
                config.group.clone(),
            )
            .await
            .map(Some)
        };
        let (up, children, result, ring, halving) =
            tokio::try_join!(up, children, result, ring, halving).map_err(AllreduceError::Setup)?;
        tracing::debug!(rank, n, k, "allreduce ready");
        Ok(Allreduce {
            me,
            rank,
            members: members.to_vec(),
            k,
            chunk: config.chunk,
            up,
            children,
            result,
            algorithm: config.algorithm,
            link: config.link,
            ring,
            ring_pieces: config.ring_pieces.max(1),
            halving,
            ring_acc: Vec::new(),
        })
    }

    /// The tree's degree.
    pub fn degree(&self) -> usize {
        self.k
    }

    /// This member's rank (its index in the member list).
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Replace `buf` with the element-wise reduction by `op` of every
    /// member's `buf`. Every member must call it with the same length and
    /// the same operator.
    ///
    /// # Errors
    /// [`AllreduceError::LengthMismatch`] or
    /// [`AllreduceError::PartialElement`] on every member if a buffer is
    /// bad (`buf` is then unchanged); [`AllreduceError::MemberFailed`] if a
    /// member fails (`buf` may then hold a partial reduction). After a
    /// member failure the allreduce cannot be used again.
    pub async fn allreduce(&mut self, buf: &mut [u8], op: &ReduceOp) -> Result<(), AllreduceError> {
        match self.algorithm_for(buf.len() as u64) {
            AllreduceAlgorithm::Ring => self.ring_allreduce(buf, op).await,
            AllreduceAlgorithm::HalvingDoubling => {
                let halving = self.halving.as_mut().expect("halving groups");
                halving.allreduce(buf, op, self.result.as_mut()).await
            }
            _ => self.tree_allreduce(buf, op).await,
        }
    }

    /// The algorithm a call with a buffer of `len` bytes runs: the
    /// configured one, or under [`AllreduceAlgorithm::Auto`] the tree or
    /// the ring, whichever the model says is faster for `len`
    /// ([`model::tree_allreduce`], [`model::ring_allreduce`]). One member
    /// always runs the tree (which sends nothing). Never `Auto`.
    pub fn algorithm_for(&self, len: u64) -> AllreduceAlgorithm {
        let n = self.members.len();
        match self.algorithm {
            AllreduceAlgorithm::Ring if self.ring.is_some() => AllreduceAlgorithm::Ring,
            AllreduceAlgorithm::HalvingDoubling if self.halving.is_some() => {
                AllreduceAlgorithm::HalvingDoubling
            }
            AllreduceAlgorithm::Auto if n > 1 => {
                let tree = model::tree_allreduce(n, len, self.k, self.chunk as u64, &self.link);
                let mut best = (AllreduceAlgorithm::Tree, tree);
                if self.ring.is_some() && model::ring_allreduce(n, len, &self.link) < best.1 {
                    best = (AllreduceAlgorithm::Ring, 0.0);
                }
                best.0
            }
            _ => AllreduceAlgorithm::Tree,
        }
    }

    /// Reduce-scatter then allgather around the ring of ranks.
    ///
    /// Each of the 2 (n − 1) steps sends one segment, split into
    /// `pieces` messages ([`AllreduceConfig::with_ring_pieces`]); piece i
    /// of a step leaves as soon as piece i of the step before arrived (and
    /// was reduced), so pieces of consecutive steps overlap on the links.
    /// The first piece of every reduce-scatter step starts with the
    /// sender's [`Verdict`] on the buffers seen so far; after the n − 1
    /// steps each member's verdict covers all n buffers, so a bad buffer
    /// fails every member with the same error before the allgather,
    /// without a separate round.
    async fn ring_allreduce(
        &mut self,
        buf: &mut [u8],
        op: &ReduceOp,
    ) -> Result<(), AllreduceError> {
        let element = op.element_size();
        let n = self.members.len();
        let (rank, elems) = (self.rank, buf.len() / element);
        let mut verdict = Verdict::of(buf.len() as u64, rank as u64, element);
        let p = self.ring_pieces.max(1);
        // Piece `i` of segment `s`, in bytes.
        let piece = |s: usize, i: usize| {
            let (a, b) = (elems * s / n, elems * (s + 1) / n);
            let (from, to) = (a + (b - a) * i / p, a + (b - a) * (i + 1) / p);
            from * element..to * element
        };
        // Step `s` sends segment `out(s)` and receives `inc(s)`, which
        // step s + 1 sends on: reduce-scatter for s < n − 1, then allgather.
        let inc = |s: usize| (rank + 2 * n - s - 1) % n;
        let out = |s: usize| (rank + 2 * n - s) % n;
        let (rs, total) = ((n - 1) * p, 2 * (n - 1) * p);
        let prev = self.members[(rank + n - 1) % n];
        let next = self.members[(rank + 1) % n];
        let mut acc = std::mem::take(&mut self.ring_acc);
        acc.clear();
        acc.extend_from_slice(buf);
        let ring = self.ring.as_mut().expect("ring groups");
        let lanes = ring.to_next.len();
        // Message k (step k / p, piece k % p) on every member takes lane
        // (base + k) mod lanes, sent and received.
        let base = ring.turn;
        let lane = |k: usize| (base + k) % lanes;
        let mut sends = Vec::with_capacity(total);
        // Per-message timings for `debug` events.
        let started = std::time::Instant::now();
        let since = |t: std::time::Instant| t.duration_since(started).as_micros() as u64;
        let send = |k: usize, acc: &[u8], verdict: &Verdict, ring: &Ring| {
            let (s, i) = (k / p, k % p);
            let r = piece(out(s), i);
            let msg = if s < n - 1 && i == 0 {
                let mut msg = BytesMut::with_capacity(VERDICT + r.len());
                verdict.put(&mut msg);
                msg.extend_from_slice(&acc[r]);
                msg.freeze()
            } else {
                Bytes::copy_from_slice(&acc[r])
            };
            ring.to_next[lane(k)].queue(msg).sent()
        };
        for k in 0..p {
            sends.push(send(k, &acc, &verdict, ring));
        }
        let mut k = 0;
        while k < total {
            let (s, i) = (k / p, k % p);
            let msg = next_message(&mut ring.from_prev[lane(k)], prev).await?;
            tracing::debug!(
                step = s,
                piece = i,
                arrived_us = since(std::time::Instant::now()),
                "ring message arrived"
            );
            let r = piece(inc(s), i);
            if s < n - 1 {
                let data = if i == 0 {
                    let theirs =
                        Verdict::get(&msg.data).ok_or_else(|| AllreduceError::Protocol {
                            member: prev,
                            detail: "a ring message shorter than its header".into(),
                        })?;
                    verdict.combine(&theirs);
                    &msg.data[VERDICT..]
                } else {
                    &msg.data[..]
                };
                if data.len() == r.len() {
                    op.apply(&mut acc[r], data);
                } else if verdict.is_ok() {
                    // Equal lengths so far, yet a piece of another length.
                    return Err(AllreduceError::Protocol {
                        member: prev,
                        detail: "a ring segment of another length".into(),
                    });
                }
                // Otherwise the buffers differ: every member learns it below.
                if s == n - 2
                    && i == 0
                    && let Some(error) = verdict.error(&self.members, element)
                {
                    // The last step's other pieces are still coming: take
                    // them, so the lanes stay in turn for the next call.
                    for k in k + 1..rs {
                        next_message(&mut ring.from_prev[lane(k)], prev).await?;
                    }
                    ring.turn = (base + rs) % lanes;
                    for send in sends {
                        send.await.map_err(|e| failed(next, e))?;
                    }
                    return Err(error);
                }
            } else {
                copy_exact(&mut acc[r], &msg.data, prev, "a ring segment")?;
            }
            if k + p < total {
                if s >= n - 1 {
                    // Allgather: the next step sends on the piece that just
                    // came, as it came (no copy of it out of `acc`).
                    sends.push(ring.to_next[lane(k + p)].queue(msg.data.clone()).sent());
                } else {
                    sends.push(send(k + p, &acc, &verdict, ring));
                }
            }
            k += 1;
        }
        ring.turn = (base + total) % lanes;
        for send in sends {
            send.await.map_err(|e| failed(next, e))?;
        }
        buf.copy_from_slice(&acc);
        self.ring_acc = acc;
        Ok(())
    }

    async fn tree_allreduce(
        &mut self,
        buf: &mut [u8],
        op: &ReduceOp,
    ) -> Result<(), AllreduceError> {
        let element = op.element_size();
        let len = buf.len() as u64;
        let mut status = if buf.len().is_multiple_of(element) {
            Status::Ok
        } else {
            Status::PartialElement {
                member: self.me,
                len,
                element: element as u64,
            }
        };
        let chunks = Chunks::new(self.chunk, element, buf.len());
        let firsts = self.first_messages(len, &mut status).await?;
        let mut sends: Vec<Sent> = Vec::new();
        let mut root_result = None;
        if status == Status::Ok {
            let acc = self.reduce_up(buf, op, chunks, &firsts, &mut sends).await?;
            if self.rank == 0 {
                root_result = Some(acc);
            }
        } else {
            self.drain_children(chunks, &firsts).await?;
            sends.extend(self.send_up(encode(&status, len, &[])));
        }
        let outcome = if self.rank == 0 {
            status
        } else {
            self.receive_result(buf, chunks).await?
        };
        for (send, peer) in sends.into_iter().map(|s| (s, self.up_peer())) {
            send.await.map_err(|e| failed(peer, e))?;
        }
        outcome.into_result()?;
        if let Some(acc) = root_result {
            buf.copy_from_slice(&acc);
        }
        Ok(())
    }

    /// Every child's first message of a call: its subtree's status and
    /// chunk 0. A call still fine (`status`) takes the first child's error,
    /// or fails on a child's length other than `len`.
    async fn first_messages(
        &mut self,
        len: u64,
        status: &mut Status,
    ) -> Result<Vec<FirstMessage>, AllreduceError> {
        let mut firsts = Vec::with_capacity(self.children.len());
        for (c, group) in &mut self.children {
            let peer = self.members[*c];
            let msg = next_message(group, peer).await?;
            let (child_status, chunk) = decode(&msg.data, peer)?;
            if *status == Status::Ok {
                match child_status {
                    Status::Ok if len_of(&msg) != len => {
                        *status = Status::LengthMismatch {
                            member: peer,
                            len: len_of(&msg),
                            other: self.me,
                            expected: len,
                        };
                    }
                    Status::Ok => {}
                    ref bad => *status = bad.clone(),
                }
            }
            firsts.push(FirstMessage {
                status: child_status,
                len: len_of(&msg),
                chunk,
            });
        }
        Ok(firsts)
    }

    /// A call every subtree found fine: reduce the children's chunks into
    /// a copy of `buf` (the caller's buffer changes only when the whole
    /// call succeeds), queueing each reduced chunk up the tree (at rank 0:
    /// to every member) into `sends`. The reduction.
    async fn reduce_up(
        &mut self,
        buf: &[u8],
        op: &ReduceOp,
        chunks: Chunks,
        firsts: &[FirstMessage],
        sends: &mut Vec<Sent>,
    ) -> Result<Vec<u8>, AllreduceError> {
        let len = buf.len() as u64;
        let mut acc = buf.to_vec();
        for i in 0..chunks.count(len) as usize {
            let r = chunks.range(i);
            for ((c, group), first) in self.children.iter_mut().zip(firsts) {
                let peer = self.members[*c];
                if i == 0 {
                    if first.chunk.len() != r.len() {
                        return Err(AllreduceError::Protocol {
                            member: peer,
                            detail: "a first chunk of another length".into(),
                        });
                    }
                    op.apply(&mut acc[r.clone()], &first.chunk);
                    continue;
                }
                let msg = next_message(group, peer).await?;
                if msg.data.len() != r.len() {
                    return Err(AllreduceError::Protocol {
                        member: peer,
                        detail: format!("chunk of {} bytes, expected {}", msg.data.len(), r.len()),
                    });
                }
                op.apply(&mut acc[r.clone()], &msg.data);
            }
            let out = if i == 0 {
                encode(&Status::Ok, len, &acc[r])
            } else {
                Bytes::copy_from_slice(&acc[r])
            };
            sends.extend(self.send_up(out));
        }
        Ok(acc)
    }

    /// A call that failed below or here: take what the children that were
    /// fine will still send.
    async fn drain_children(
        &mut self,
        chunks: Chunks,
        firsts: &[FirstMessage],
    ) -> Result<(), AllreduceError> {
        for ((c, group), first) in self.children.iter_mut().zip(firsts) {
            if first.status == Status::Ok {
                for _ in 1..chunks.count(first.len) {
                    next_message(group, self.members[*c]).await?;
                }
            }
        }
        Ok(())
    }

    /// Queue `msg` up the tree (at rank 0: to every member, as the result);
    /// `None` with one member.
    fn send_up(&self, msg: Bytes) -> Option<Sent> {
        let target = self.up.as_ref().or(result_sender(&self.result));
        target.map(|group| group.queue(msg).sent())
    }

    /// Not rank 0: the call's result from rank 0 into `buf`, if fine; the
    /// call's outcome (rank 0's status).
    async fn receive_result(
        &mut self,
        buf: &mut [u8],
        chunks: Chunks,
    ) -> Result<Status, AllreduceError> {
        let len = buf.len() as u64;
        let root = self.members[0];
        let Some(Group::Receiver(group)) = self.result.as_mut() else {
            unreachable!("a non-root receives the result")
        };
        let msg = next_message(group, root).await?;
        let (outcome, payload) = decode(&msg.data, root)?;
        if outcome == Status::Ok {
            if len_of(&msg) != len {
                return Err(AllreduceError::Protocol {
                    member: root,
                    detail: "result of another length".into(),
                });
            }
            buf[chunks.range(0)].copy_from_slice(&payload);
            for i in 1..chunks.count(len) as usize {
                let msg = next_message(group, root).await?;
                copy_exact(&mut buf[chunks.range(i)], &msg.data, root, "result chunk")?;
            }
        }
        Ok(outcome)
    }

    fn up_peer(&self) -> NodeId {
        if self.rank == 0 {
            self.members.get(1).copied().unwrap_or(self.me)
        } else {
            self.members[tree_parent(self.rank, self.k)]
        }
    }

    /// Close every group: resolves once every member closed too.
    ///
    /// # Errors
    /// The first member failure seen.
    pub async fn close(self) -> Result<(), AllreduceError> {
        let mut groups: Vec<(NodeId, Group)> = Vec::new();
        let up_peer = self.up_peer();
        if let Some(g) = self.up {
            groups.push((up_peer, Group::Root(g)));
        }
        for (c, g) in self.children {
            groups.push((self.members[c], Group::Receiver(g)));
        }
        if let Some(ring) = self.ring {
            let n = self.members.len();
            let (next, prev) = (
                self.members[(self.rank + 1) % n],
                self.members[(self.rank + n - 1) % n],
            );
            groups.extend(ring.to_next.into_iter().map(|g| (next, Group::Root(g))));
            groups.extend(
                ring.from_prev
                    .into_iter()
                    .map(|g| (prev, Group::Receiver(g))),
            );
        }
        if let Some(halving) = self.halving {
            groups.extend(halving.into_groups());
        }
        if let Some(g) = self.result {
            groups.push((self.members[0], g));
        }
        let results = join_all(groups.iter_mut().map(|(_, g)| g.close())).await;
        for ((peer, _), r) in groups.iter().zip(results) {
            r.map_err(|e| failed(*peer, e))?;
        }
        Ok(())
    }
}

/// The result's group, if this member sends the result (rank 0).
fn result_sender(result: &Option<Group>) -> Option<&Sender> {
    match result {
        Some(Group::Root(s)) => Some(s),
        _ => None,
    }
}
