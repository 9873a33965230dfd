//! The rack-aware hybrid schedule, and the binomial pipeline with slow
//! members as leaves.
//!
//! "Pushing Bytes: Cloud-Scale Data Replication with RDMC" (Sec. 4.3.1,
//! "Hybrid Algorithms") proposes a chain among one leader per rack, so that
//! "any given block would traverse each TOR switch exactly once", and a
//! binomial pipeline inside each rack. This module builds that schedule:
//!
//! * The members of each rack that are not slow form a binomial pipeline
//!   (exactly the one of [`BinomialPipeline`]) rooted at the rack's
//!   *leader*: the root in the root's rack, elsewhere the lowest rank of the
//!   rack. Racks are chained in the order of their lowest rank (the root's
//!   rack first; see below for slow members), whatever order the member list
//!   interleaves them in.
//! * In a binomial pipeline of `m ≥ 2` members (`l = ⌊log2 m⌋`), at every
//!   step `u` one member has a spare send: a member of vertex `2^(u mod l)`,
//!   whose hypercube partner at that step is the root, which never
//!   receives (at the extra last step of a group that is not a power of two
//!   the root itself may be the one that idles; in a rack of one the leader
//!   idles always). That member holds block `u − l` (the verifiers check it
//!   for every size and block count). These spare sends form the rack's
//!   *feed*: one block per step, block `p` at rack step `l + p`.
//! * Rack `i`'s feed carries every block, once, to the leader of rack
//!   `i + 1`, which starts its own rack's pipeline `l_i + 1` steps after
//!   rack `i` started: a leader sends block `b` at its rack's step `b`, one
//!   step after it arrived. Leaders receive only across racks and send only
//!   inside their rack, so the chain costs no one a second send per step.
//! * Members known to be slow, other than the root, never send: they are
//!   *leaves*. A *relay* feeds them: the highest fast rank of the last
//!   rack (if that rack has a second member; else the rack itself) leaves
//!   that rack's pipeline and becomes a rack of one at the end of the
//!   chain, so it receives every block from the last pipeline's spare
//!   sends, one per step, and sends nothing else: a send to a slow member
//!   takes longer than a step, and a member of the pipeline that spent it
//!   would hold up its next pipeline send. The relay's rack feeds the
//!   leaves (from its third position on, see `LEAF_LAG`), round robin, each one block every `max(2, leaves)`
//!   steps, so that a slow member is asked for blocks at no more than half
//!   the pace of the pipeline, and the fast members' own transfers stay
//!   exactly those of the pipeline without it (their last block arrives by
//!   the step the pipeline among them alone would end). A member's message
//!   completes only once its own sends are done too, so once the last
//!   rack's pipeline has ended and the root has nothing else to send, the
//!   root feeds the leaves the rest of their blocks (block 0 always comes
//!   from the spare member, so that a leaf's first block comes from one peer
//!   whatever the message's length): no fast receiver keeps sending at the
//!   leaves' pace, and only the root's send lasts until the leaves have
//!   everything.
//!
//! With one rack and no slow member the schedule is the binomial pipeline
//! itself (the connection order aside).
//!
//! Slow members in one rack, over a transport whose sends complete once
//! buffered ([`Topology::with_buffered_sends`], set for TCP): the fast
//! members other than the relay are cut into runs whose lengths are powers
//! of two, longest first, in rank order (15 fast members: 8, 4, 2 and the
//! relay), chained as racks are; and so are the members of a group without
//! slow members whose size is not a power of two, from 5 on (12: 8 and 4;
//! the binomial pipeline then runs as this layout too). Where sends complete
//! once delivered (RDMA) they stay one pipeline, which is shorter there. A
//! binomial pipeline of a size that is not a power of two pairs members on
//! its vertices, and over TCP, where a send completes once the socket
//! buffered it and a receiver takes blocks from any sender, the twins'
//! forwards overlap the transfers between vertices and hold the root back,
//! so such a pipeline runs well below the rate of one of a power-of-two
//! size (`rdmc simulate --send-buffer` shows by how much). The chain costs
//! `l_i + 1` steps per run, which is why RDMA-like transports, whose one
//! pipeline does not suffer so, keep it (more so for short messages).
//!
//! The chain follows the racks' lowest ranks, except that the rack (other
//! than the root's) with the most slow members goes last, so that its slow
//! members get their blocks from inside their rack.
//!
//! Known limits: the leaves are all fed by the last rack in the chain, so a
//! slow member of another rack (the root's, say) gets its blocks across the
//! racks; with more
//! than two leaves each is fed at `1/leaves` of the pipeline's pace; the
//! chain of leaders adds `l_i + 1` steps per rack, which grows linearly with
//! the number of racks (the paper's alternative, a binomial pipeline among
//! the leaders, is not built).

use std::sync::Arc;

use super::{Algorithm, BinomialPipeline, Schedule, Topology, Transfer, floor_log2};

/// The message length with which the first block is computed: long enough
/// that every member's first transfer comes before the end of its rack's
/// pipeline.
const FIRST_BLOCK_SCAN_BLOCKS: usize = 1 << 16;

/// How many steps of the relay's rack (the last, of one member) pass
/// before the leaves' first position. The relay takes the blocks one per
/// step from the previous rack's feed; a leaf's block `b` leaves at position
/// `gap · b` or later, by which time the relay holds it (the verifiers check
/// every send's block has arrived, exhaustively, in the schedule tests).
/// Kept at 2, the value of the layout before the relay, so that plans did
/// not change.
const LEAF_LAG: usize = 2;

/// One rack's binomial pipeline and where it sits in the chain.
#[derive(Debug, PartialEq, Eq)]
struct Rack {
    /// Global ranks of the rack's fast members; `members[0]` is its leader.
    members: Vec<usize>,
    /// The global step at which the rack's pipeline takes its step 0.
    offset: usize,
    /// `l = ⌊log2 m⌋` (0 for a rack of one).
    dim: usize,
    /// `P = 2^l`.
    cube: usize,
    /// Each member's binomial pipeline schedule, by local rank.
    pipes: Vec<BinomialPipeline>,
}

impl Rack {
    fn new(members: Vec<usize>, offset: usize) -> Self {
        let m = members.len();
        let dim = floor_log2(m);
        let pipes = (0..m)
            .map(|local| BinomialPipeline::new(m, local))
            .collect();
        Rack {
            members,
            offset,
            dim,
            cube: 1 << dim,
            pipes,
        }
    }

    /// The local ranks that may take the rack's feed: the members of the
    /// vertices `2^i` (lower, then upper if paired) and the leader.
    fn spare_candidates(&self) -> Vec<usize> {
        let m = self.members.len();
        let mut out = Vec::with_capacity(2 * self.dim + 1);
        for i in 0..self.dim {
            let v = 1usize << i;
            out.push(v);
            if v <= m - self.cube {
                out.push(v + self.cube - 1);
            }
        }
        out.push(0);
        out
    }

    /// The local rank that sends the feed at rack step `u` of a `k`-block
    /// message: the first of the members of vertex `2^(u mod l)` and the
    /// leader that sends nothing else at `u`.
    fn spare(&self, u: usize, k: usize) -> usize {
        let m = self.members.len();
        if m == 1 {
            return 0;
        }
        let v = 1usize << (u % self.dim);
        let upper = (v <= m - self.cube).then_some(v + self.cube - 1);
        [Some(v), upper, Some(0)]
            .into_iter()
            .flatten()
            .find(|&c| self.pipes[c].outgoing(k, u).is_none())
            // Never reached (some candidate idles at every step: checked
            // exhaustively); the verifiers would report a double send.
            .unwrap_or(v)
    }
}

/// A member's place in the layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// Local rank `local` of the pipeline of rack `rack` (chain order).
    Member { rack: usize, local: usize },
    /// The `index`-th slow leaf.
    Leaf { index: usize },
}

/// The whole group's layout, computed once per [`Topology`] and shared by
/// every member's schedule.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    group_size: usize,
    /// Racks in chain order, the root's first.
    racks: Vec<Rack>,
    /// Global ranks of the slow leaves.
    leaves: Vec<usize>,
    /// Steps between two blocks of one leaf.
    gap: usize,
    roles: Vec<Role>,
}

impl Layout {
    /// The layout of `topology`: by racks if `by_rack`, else one rack.
    pub(crate) fn new(topology: &Topology, by_rack: bool) -> Self {
        let n = topology.group_size();
        let mut rack_ids: Vec<u32> = Vec::new();
        let mut members: Vec<Vec<usize>> = Vec::new();
        let mut leaves = Vec::new();
        for rank in 0..n {
            if rank != 0 && topology.is_slow(rank) {
                leaves.push(rank);
                continue;
            }
            let id = if by_rack { topology.rack_of(rank) } else { 0 };
            match rack_ids.iter().position(|&r| r == id) {
                Some(i) => members[i].push(rank),
                None => {
                    rack_ids.push(id);
                    members.push(vec![rank]);
                }
            }
        }
        // The last rack feeds the leaves: the rack (other than the root's)
        // with the most slow members goes last, so that their blocks need
        // not cross between racks (ties: the earlier rack in rank order).
        let slow_in = |id: u32| {
            leaves
                .iter()
                .filter(|&&r| topology.rack_of(r) == id)
                .count()
        };
        if by_rack && members.len() > 2 {
            let most = (1..members.len())
                .rev()
                .max_by_key(|&i| slow_in(rack_ids[i]))
                .expect("more than one rack");
            if slow_in(rack_ids[most]) > 0 {
                let list = members.remove(most);
                members.push(list);
            }
        }
        // The relay: the last rack's highest fast rank (not the root)
        // leaves that rack's pipeline and becomes a rack of its own at the
        // end of the chain. It receives every block from the last rack's
        // spare sends, one per step, as a next rack's leader does, and it
        // feeds the slow leaves: a send to a slow member takes it longer
        // than a step, and only a member with nothing else to send can
        // spend that time without holding up the pipeline.
        if !leaves.is_empty()
            && let Some(last) = members.last_mut()
            && last.len() >= 2
        {
            let relay = last.pop().expect("two members");
            if members.len() == 1 && topology.buffered_sends() {
                members = split_power_of_two(members.pop().expect("the root's rack"));
            }
            members.push(vec![relay]);
        } else if leaves.is_empty()
            && members.len() == 1
            && topology.buffered_sends()
            && runs_pay(members[0].len())
        {
            // No slow member, one rack whose size is not a power of two,
            // sends that complete once buffered: runs of powers of two too
            // (module documentation).
            members = split_power_of_two(members.pop().expect("the root's rack"));
        }
        let mut racks = Vec::with_capacity(members.len());
        let mut offset = 0;
        for list in members {
            let rack = Rack::new(list, offset);
            offset += rack.dim + 1;
            racks.push(rack);
        }
        let mut roles = vec![Role::Leaf { index: 0 }; n];
        for (rack, r) in racks.iter().enumerate() {
            for (local, &rank) in r.members.iter().enumerate() {
                roles[rank] = Role::Member { rack, local };
            }
        }
        for (index, &rank) in leaves.iter().enumerate() {
            roles[rank] = Role::Leaf { index };
        }
        Layout {
            group_size: n,
            racks,
            gap: leaves.len().max(2),
            leaves,
            roles,
        }
    }

    /// Total steps for `k` blocks: the end of every rack's pipeline, of
    /// every leader's receipts and of every leaf's.
    pub(crate) fn steps(&self, k: usize) -> usize {
        if self.group_size < 2 || k == 0 {
            return 0;
        }
        let mut end = 0;
        for (i, r) in self.racks.iter().enumerate() {
            end = end.max(r.offset + r.pipes[0].total_steps(k));
            if i > 0 {
                end = end.max(r.offset + k - 1);
            }
        }
        if !self.leaves.is_empty() {
            // The relay's rack (of one) feeds the leaves, the last one its
            // last block at this position.
            let relay = self.racks.last().expect("the root's rack");
            let final_position = self.gap * (k - 1) + self.leaves.len() - 1;
            end = end.max(relay.offset + LEAF_LAG + final_position + 1);
        }
        end
    }

    /// The first global step from which the root sends nothing else: after
    /// its rack's pipeline and its rack's feed to the next leader.
    fn root_free(&self, k: usize) -> usize {
        let first = &self.racks[0];
        let chain = if self.racks.len() > 1 {
            first.dim + k
        } else {
            0
        };
        first.pipes[0].total_steps(k).max(chain)
    }

    /// Rack `i`'s feed at rack step `u`: `(sender, receiver, block)`, as
    /// global ranks.
    ///
    /// The next leader gets block `u − l` from the spare member of the
    /// message. The last rack feeds the leaves, if any: it is then the
    /// relay alone (or the root, in a group of the root and leaves only).
    /// The leaves take positions `q = u − LEAF_LAG = 0, 1, …` round robin,
    /// one block per leaf every `gap` positions.
    fn feed(&self, i: usize, u: usize, k: usize) -> Option<(usize, usize, usize)> {
        let rack = &self.racks[i];
        if let Some(next) = self.racks.get(i + 1) {
            let p = u.checked_sub(rack.dim)?;
            return (p < k).then(|| (rack.members[rack.spare(u, k)], next.members[0], p));
        }
        if self.leaves.is_empty() {
            return None;
        }
        debug_assert_eq!(rack.members.len(), 1, "the relay's rack is of one");
        let q = u.checked_sub(LEAF_LAG)?;
        let (index, block) = (q % self.gap, q / self.gap);
        // One leaf: every other position is nobody's.
        let leaf = *self.leaves.get(index)?;
        if block >= k {
            return None;
        }
        // A member's message completes once its own sends are done too:
        // once the root has nothing else to send, it feeds the leaves, so
        // that the relay's completion does not wait for the leaves' slow
        // pace. Block 0 stays with the relay, so that a leaf's first block
        // comes from one peer whatever the length.
        let root_free = rack.offset + u >= self.root_free(k);
        let from = if block >= 1 && root_free {
            0
        } else {
            rack.members[0]
        };
        Some((from, leaf, block))
    }
}

/// Whether a group of `n` members without slow ones, over buffered sends,
/// is laid out as runs of powers of two: when `n` is not a power of two,
/// from 5 members on (a binomial pipeline of 3 loses nothing to its twin:
/// the layout would only add steps).
pub(crate) fn runs_pay(n: usize) -> bool {
    n > 4 && !n.is_power_of_two()
}

/// One rack's fast members (rank order, the root first) cut into runs whose
/// lengths are powers of two, longest first (14 members: 8, 4 and 2), so
/// that each run's binomial pipeline is the power-of-two one; see the
/// module documentation ("Slow members in one rack").
fn split_power_of_two(mut members: Vec<usize>) -> Vec<Vec<usize>> {
    let mut runs = Vec::new();
    while !members.is_empty() {
        let len = 1usize << floor_log2(members.len());
        let rest = members.split_off(len);
        runs.push(std::mem::replace(&mut members, rest));
    }
    runs
}

/// The hybrid schedule (rack-aware, two-level), or the binomial pipeline
/// with slow members as leaves; see the module documentation. Built by
/// [`NodeSchedule::with_topology`](super::NodeSchedule::with_topology).
#[derive(Clone, PartialEq, Eq)]
pub struct Hybrid {
    algorithm: Algorithm,
    layout: Arc<Layout>,
    rank: usize,
    role: Role,
    first: Option<Transfer>,
}

impl std::fmt::Debug for Hybrid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hybrid")
            .field("algorithm", &self.algorithm)
            .field("group_size", &self.layout.group_size)
            .field("rank", &self.rank)
            .field("role", &self.role)
            .finish()
    }
}

impl Hybrid {
    /// Member `rank`'s schedule under `algorithm` (the hybrid by racks, or
    /// the binomial pipeline in one rack); the caller checks
    /// `rank < topology.group_size()`.
    pub(crate) fn new(algorithm: Algorithm, topology: &Topology, rank: usize) -> Self {
        let layout = topology.layout(algorithm == Algorithm::Hybrid);
        let role = layout.roles[rank];
        let mut schedule = Hybrid {
            algorithm,
            layout,
            rank,
            role,
            first: None,
        };
        schedule.first = schedule.scan_first_block();
        schedule
    }

    /// The algorithm this schedule implements.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The earliest incoming transfer of a long message (stops at the first).
    fn scan_first_block(&self) -> Option<Transfer> {
        if self.rank == 0 {
            return None;
        }
        let k = FIRST_BLOCK_SCAN_BLOCKS;
        (0..self.total_steps(k)).find_map(|t| self.incoming(k, t))
    }

    /// What this member sends to a leaf at `step`: a member of the last
    /// rack, or the root.
    fn leaf_feed(&self, step: usize, k: usize) -> Option<Transfer> {
        let rack = self.layout.racks.last()?;
        let u = step.checked_sub(rack.offset)?;
        let (from, to, block) = self.layout.feed(self.layout.racks.len() - 1, u, k)?;
        (from == self.rank).then_some(Transfer { peer: to, block })
    }

    /// The incoming transfer that position `p` of rack `i`'s feed at
    /// rack step `u` makes.
    fn fed(&self, i: usize, u: usize, k: usize) -> Option<Transfer> {
        let (from, to, block) = self.layout.feed(i, u, k)?;
        (to == self.rank).then_some(Transfer { peer: from, block })
    }
}

impl Schedule for Hybrid {
    fn group_size(&self) -> usize {
        self.layout.group_size
    }

    fn rank(&self) -> usize {
        self.rank
    }

    fn total_steps(&self, blocks: usize) -> usize {
        self.layout.steps(blocks)
    }

    fn outgoing(&self, blocks: usize, step: usize) -> Option<Transfer> {
        let Role::Member { rack: i, local } = self.role else {
            return None;
        };
        if step >= self.layout.steps(blocks) {
            return None;
        }
        let rack = &self.layout.racks[i];
        let u = step.checked_sub(rack.offset)?;
        if let Some(t) = rack.pipes[local].outgoing(blocks, u) {
            return Some(Transfer {
                peer: rack.members[t.peer],
                block: t.block,
            });
        }
        // Its rack's feed: to the next leader, or (the relay) to a leaf.
        if let Some((from, to, block)) = self.layout.feed(i, u, blocks)
            && from == self.rank
        {
            return Some(Transfer { peer: to, block });
        }
        // The root, once free, feeds the leaves too.
        if self.rank != 0 {
            return None;
        }
        self.leaf_feed(step, blocks)
    }

    fn incoming(&self, blocks: usize, step: usize) -> Option<Transfer> {
        if step >= self.layout.steps(blocks) {
            return None;
        }
        match self.role {
            Role::Leaf { .. } => {
                let last = self.layout.racks.len() - 1;
                let u = step.checked_sub(self.layout.racks[last].offset)?;
                self.fed(last, u, blocks)
            }
            Role::Member { rack: i, local: 0 } if i > 0 => {
                let u = step.checked_sub(self.layout.racks[i - 1].offset)?;
                self.fed(i - 1, u, blocks)
            }
            Role::Member { rack: i, local } => {
                let rack = &self.layout.racks[i];
                let u = step.checked_sub(rack.offset)?;
                rack.pipes[local].incoming(blocks, u).map(|t| Transfer {
                    peer: rack.members[t.peer],
                    block: t.block,
                })
            }
        }
    }

    /// The first transfer of a long message; its peer is the same for
    /// every message length (checked by the verifiers).
    fn first_block(&self) -> Option<Transfer> {
        self.first
    }

    /// The rack's pipeline peers, the previous rack's feeders (a leader),
    /// the feed's receivers (a possible feeder), the last rack's feeders (a
    /// leaf); in ascending rank order, which every member following builds
    /// without deadlock.
    fn connections(&self) -> Vec<usize> {
        let layout = &self.layout;
        let mut peers = Vec::new();
        let global = |rack: &Rack, locals: Vec<usize>| -> Vec<usize> {
            locals.into_iter().map(|c| rack.members[c]).collect()
        };
        match self.role {
            Role::Leaf { .. } => {
                let last = layout.racks.last().expect("the root's rack");
                peers.extend(global(last, last.spare_candidates()));
                peers.push(0);
            }
            Role::Member { rack: i, local } => {
                let rack = &layout.racks[i];
                peers.extend(global(rack, rack.pipes[local].connections()));
                if local == 0 && i > 0 {
                    let prev = &layout.racks[i - 1];
                    peers.extend(global(prev, prev.spare_candidates()));
                }
                if self.rank == 0 {
                    peers.extend(&layout.leaves);
                }
                if rack.spare_candidates().contains(&local) {
                    match layout.racks.get(i + 1) {
                        Some(next) => peers.push(next.members[0]),
                        None => peers.extend(&layout.leaves),
                    }
                }
            }
        }
        peers.sort_unstable();
        peers.dedup();
        peers
    }
}
