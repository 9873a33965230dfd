//! Block transfer schedules: pure functions of (algorithm, group size, rank, blocks).
//!
//! A schedule says, for one member of a group of `n` members and a message cut
//! into `k` blocks, which block it receives from whom and which block it sends
//! to whom at each *logical* step. Steps are not a global clock: at run time
//! every member works through its own send steps in order and its own receive
//! steps in order, linked to the others only by data dependencies and the
//! ready-for-block handshake (the RDMC paper, Sec. 4.2).
//!
//! Every member computes only its own part ([`NodeSchedule`]); [`Plan`]
//! assembles the whole group's transfers from the same per-node functions.
//! [`Plan::verify`] and [`verify_schedules`] check plans and schedules against
//! the invariants listed at [`Plan::verify`] and [`verify_schedules`] and the
//! bounds of [`step_bound`].
//!
//! This layer does no I/O, no allocation on the hot path and reads no clock.

mod binomial_pipeline;
mod binomial_tree;
mod chain;
mod hybrid;
mod plan;
mod sequential;
mod topology;
mod verify;

use std::fmt;
use std::str::FromStr;

pub use binomial_pipeline::BinomialPipeline;
pub use binomial_tree::BinomialTree;
pub use chain::Chain;
pub use hybrid::Hybrid;
pub use plan::{Plan, PlanError, PlanTransfer, step_bound, step_bound_in};
pub use sequential::Sequential;
pub use topology::{Topology, TopologyError};
pub use verify::{verify_schedules, verify_schedules_in};

/// A multicast algorithm: how blocks travel from the root to every member.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    /// The root sends the whole message to each member in turn.
    Sequential,
    /// A bucket brigade: member `r` relays every block to `r + 1`.
    Chain,
    /// A binomial tree by recursive doubling; each member receives all blocks
    /// from its parent, then forwards them.
    BinomialTree,
    /// The binomial pipeline (the RDMC paper, Sec. 4.3-4.4; "Pushing Bytes:
    /// Cloud-Scale Data Replication with RDMC", Appendix A).
    BinomialPipeline,
    /// The rack-aware hybrid of "Pushing Bytes: Cloud-Scale Data
    /// Replication with RDMC" (Sec. 4.3.1): a chain among one leader per
    /// rack, so that every block crosses into each rack once, and a binomial
    /// pipeline inside each rack that starts as the blocks arrive. The racks
    /// come from the group's [`Topology`]; in one rack it is the binomial
    /// pipeline. See [`Hybrid`].
    Hybrid,
}

impl Algorithm {
    /// Every algorithm, in the order of the papers' presentation.
    pub const ALL: [Algorithm; 5] = [
        Algorithm::Sequential,
        Algorithm::Chain,
        Algorithm::BinomialTree,
        Algorithm::BinomialPipeline,
        Algorithm::Hybrid,
    ];

    /// The name used on the command line and in JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Sequential => "sequential",
            Algorithm::Chain => "chain",
            Algorithm::BinomialTree => "tree",
            Algorithm::BinomialPipeline => "binomial-pipeline",
            Algorithm::Hybrid => "hybrid",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The name given to [`Algorithm::from_str`] is not an algorithm.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown algorithm {0:?} (expected sequential, chain, tree, binomial-pipeline or hybrid)")]
pub struct UnknownAlgorithm(pub String);

impl FromStr for Algorithm {
    type Err = UnknownAlgorithm;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "sequential" => Ok(Algorithm::Sequential),
            "chain" => Ok(Algorithm::Chain),
            "tree" | "binomial-tree" => Ok(Algorithm::BinomialTree),
            "binomial-pipeline" | "binomial" | "pipeline" => Ok(Algorithm::BinomialPipeline),
            "hybrid" => Ok(Algorithm::Hybrid),
            other => Err(UnknownAlgorithm(other.to_owned())),
        }
    }
}

/// One block transfer as seen by one member: the peer (a rank in the group)
/// on the other end and the block number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Transfer {
    /// Rank of the member on the other end of the transfer.
    pub peer: usize,
    /// Block number, `0..blocks`.
    pub block: usize,
}

/// One member's part of a schedule.
///
/// `blocks` (k) is always at least 1; `step` is in `0..total_steps(blocks)`.
/// Implementations must be pure: the same arguments always give the same
/// answer, on every member.
pub trait Schedule {
    /// Number of members in the group (n ≥ 1).
    fn group_size(&self) -> usize;
    /// This member's rank; rank 0 is the root.
    fn rank(&self) -> usize;
    /// Number of logical steps needed to move `blocks` blocks to every member.
    fn total_steps(&self, blocks: usize) -> usize;
    /// What this member sends at `step`, if anything.
    fn outgoing(&self, blocks: usize, step: usize) -> Option<Transfer>;
    /// What this member receives at `step`, if anything.
    fn incoming(&self, blocks: usize, step: usize) -> Option<Transfer>;
    /// Where the first block of every message comes from, independent of the
    /// message's length; `None` on the root (and in a group of one).
    ///
    /// The peer is exact for every `blocks`; the block number must be clamped
    /// to `blocks - 1` (see [`Schedule::first_block_for`]).
    fn first_block(&self) -> Option<Transfer>;
    /// The peers this member exchanges blocks with, in connection order.
    fn connections(&self) -> Vec<usize>;

    /// The first step at or after `step` at which this member receives, and
    /// what. The default scans; a schedule whose steps are mostly empty for
    /// a member (sequential send) answers directly.
    fn next_incoming(&self, blocks: usize, step: usize) -> Option<(usize, Transfer)> {
        (step..self.total_steps(blocks)).find_map(|s| self.incoming(blocks, s).map(|t| (s, t)))
    }

    /// The first step at or after `step` at which this member sends, and
    /// what (see [`Schedule::next_incoming`]).
    fn next_outgoing(&self, blocks: usize, step: usize) -> Option<(usize, Transfer)> {
        (step..self.total_steps(blocks)).find_map(|s| self.outgoing(blocks, s).map(|t| (s, t)))
    }

    /// [`Schedule::first_block`] with the block clamped for a `blocks`-block message.
    fn first_block_for(&self, blocks: usize) -> Option<Transfer> {
        self.first_block().map(|t| Transfer {
            peer: t.peer,
            block: t.block.min(blocks.saturating_sub(1)),
        })
    }
}

/// A schedule was asked for with impossible parameters.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// A group needs at least one member.
    #[error("a group needs at least one member")]
    EmptyGroup,
    /// The rank is not a member of the group.
    #[error("rank {rank} is not in a group of {group_size}")]
    RankOutOfRange {
        /// The rank asked for.
        rank: usize,
        /// The group size.
        group_size: usize,
    },
    /// The topology describes a group of another size.
    #[error("the topology describes {topology} members, the group has {group_size}")]
    TopologySize {
        /// The topology's group size.
        topology: usize,
        /// The group size.
        group_size: usize,
    },
}

/// One member's schedule for any [`Algorithm`]; dispatches without boxing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeSchedule {
    /// See [`Sequential`].
    Sequential(Sequential),
    /// See [`Chain`].
    Chain(Chain),
    /// See [`BinomialTree`].
    BinomialTree(BinomialTree),
    /// See [`BinomialPipeline`].
    BinomialPipeline(BinomialPipeline),
    /// See [`Hybrid`]: the hybrid, or the binomial pipeline with slow members.
    Hybrid(Hybrid),
}

impl NodeSchedule {
    /// The schedule of member `rank` in a group of `group_size` members
    /// in one rack, none of them known to be slow ([`Topology::flat`]).
    pub fn new(
        algorithm: Algorithm,
        group_size: usize,
        rank: usize,
    ) -> Result<Self, ScheduleError> {
        if group_size == 0 {
            return Err(ScheduleError::EmptyGroup);
        }
        if rank >= group_size {
            return Err(ScheduleError::RankOutOfRange { rank, group_size });
        }
        if algorithm == Algorithm::Hybrid {
            let topology = Topology::flat(group_size).map_err(|_| ScheduleError::EmptyGroup)?;
            return Self::with_topology(algorithm, &topology, rank);
        }
        Ok(match algorithm {
            Algorithm::Sequential => NodeSchedule::Sequential(Sequential::new(group_size, rank)),
            Algorithm::Chain => NodeSchedule::Chain(Chain::new(group_size, rank)),
            Algorithm::BinomialTree => {
                NodeSchedule::BinomialTree(BinomialTree::new(group_size, rank))
            }
            Algorithm::BinomialPipeline => {
                NodeSchedule::BinomialPipeline(BinomialPipeline::new(group_size, rank))
            }
            Algorithm::Hybrid => unreachable!("handled above"),
        })
    }

    /// The schedule of member `rank` in a group laid out as `topology`
    /// says. The hybrid takes its racks from it; the binomial pipeline and
    /// the hybrid make its slow members leaves that never send (see
    /// [`Hybrid`]); the other algorithms ignore it. Every member must use
    /// the same topology.
    pub fn with_topology(
        algorithm: Algorithm,
        topology: &Topology,
        rank: usize,
    ) -> Result<Self, ScheduleError> {
        let group_size = topology.group_size();
        if rank >= group_size {
            return Err(ScheduleError::RankOutOfRange { rank, group_size });
        }
        match algorithm {
            Algorithm::Hybrid => Ok(NodeSchedule::Hybrid(Hybrid::new(algorithm, topology, rank))),
            Algorithm::BinomialPipeline if topology.lays_out_pipeline() => {
                Ok(NodeSchedule::Hybrid(Hybrid::new(algorithm, topology, rank)))
            }
            _ => Self::new(algorithm, group_size, rank),
        }
    }

    /// The algorithm this schedule implements.
    pub fn algorithm(&self) -> Algorithm {
        match self {
            NodeSchedule::Sequential(_) => Algorithm::Sequential,
            NodeSchedule::Chain(_) => Algorithm::Chain,
            NodeSchedule::BinomialTree(_) => Algorithm::BinomialTree,
            NodeSchedule::BinomialPipeline(_) => Algorithm::BinomialPipeline,
            NodeSchedule::Hybrid(s) => s.algorithm(),
        }
    }

    fn inner(&self) -> &dyn Schedule {
        match self {
            NodeSchedule::Sequential(s) => s,
            NodeSchedule::Chain(s) => s,
            NodeSchedule::BinomialTree(s) => s,
            NodeSchedule::BinomialPipeline(s) => s,
            NodeSchedule::Hybrid(s) => s,
        }
    }
}

impl Schedule for NodeSchedule {
    fn group_size(&self) -> usize {
        self.inner().group_size()
    }
    fn rank(&self) -> usize {
        self.inner().rank()
    }
    fn total_steps(&self, blocks: usize) -> usize {
        self.inner().total_steps(blocks)
    }
    fn outgoing(&self, blocks: usize, step: usize) -> Option<Transfer> {
        self.inner().outgoing(blocks, step)
    }
    fn incoming(&self, blocks: usize, step: usize) -> Option<Transfer> {
        self.inner().incoming(blocks, step)
    }
    fn first_block(&self) -> Option<Transfer> {
        self.inner().first_block()
    }
    fn connections(&self) -> Vec<usize> {
        self.inner().connections()
    }
    fn next_incoming(&self, blocks: usize, step: usize) -> Option<(usize, Transfer)> {
        self.inner().next_incoming(blocks, step)
    }
    fn next_outgoing(&self, blocks: usize, step: usize) -> Option<(usize, Transfer)> {
        self.inner().next_outgoing(blocks, step)
    }
}

/// Smallest block the automatic block size picks: 48 KiB, the one size
/// of the choice that is not a power of two. Every block costs every
/// member a few wake-ups (its arrival, its ready-for-block, its send and
/// that send's completion) and a block must stay well above a link's
/// bandwidth-delay product. Over TCP a block's frame also leaves in whole
/// TCP segments plus one partial one: on Ethernet (1448 payload bytes per
/// segment with TCP timestamps) a 48 KiB block's frame, with a
/// ready-for-block riding along, fills 34 segments to 99.9 % (32 KiB:
/// 23 segments, the last two-thirds full), and a third fewer blocks than
/// 32 KiB draw a third fewer ACKs and signals. On the project's emulated
/// TCP cluster 48 KiB blocks beat both smaller and larger ones
/// (BENCHMARKS.md in the repository has the runs). With sends completed on
/// delivery the choice rarely goes below 64 KiB.
pub const AUTO_BLOCK_SIZE_MIN: usize = 48 << 10;

/// Largest block the automatic block size picks: 256 KiB, and the bounce
/// buffer every receiver holds per group. Larger blocks cut per-block costs
/// further but make every step of a pipeline longer, so one late transfer
/// holds its partners back longer, and two blocks converging on one
/// receiver overflow a shallow switch queue sooner.
/// The papers used 1 MiB over RDMA, where both costs are small; a group on
/// such a fabric can fix its block size with
/// `GroupConfig::with_block_size`.
pub const AUTO_BLOCK_SIZE_MAX: usize = 256 << 10;

/// The automatic block size keeps a pipelined schedule's extra steps (the
/// steps beyond one per block: `l − 1` or `l` for the binomial pipeline,
/// `n − 2` for the chain) at about this fraction, 1/64 (≈ 1.6 %), of its
/// blocks.
const AUTO_EXTRA_STEP_SHARE: u64 = 64;

/// Where sends complete once buffered (TCP), blocks at about this many per
/// extra step (≈ 0.02 %): there a member runs ahead to its next partner
/// while its last block still leaves, the two share its link, and what a
/// step loses so grows with the block, so smaller blocks pay well beyond
/// the extra steps they save.
const AUTO_EXTRA_STEP_SHARE_BUFFERED: u64 = 4096;

/// How a group cuts its messages into blocks.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockSize {
    /// Every message in blocks of this many bytes (≥ 1).
    Fixed(usize),
    /// Each message in blocks chosen from its size and the schedule (see
    /// [`BlockSize::for_message`]), between `min` and `max` bytes
    /// (`1 ≤ min ≤ max`).
    Automatic {
        /// Smallest block.
        min: usize,
        /// Largest block (every receiver's bounce buffer).
        max: usize,
    },
}

impl BlockSize {
    /// The automatic choice between [`AUTO_BLOCK_SIZE_MIN`] and
    /// [`AUTO_BLOCK_SIZE_MAX`]: the default of a group.
    pub const AUTOMATIC: BlockSize = BlockSize::Automatic {
        min: AUTO_BLOCK_SIZE_MIN,
        max: AUTO_BLOCK_SIZE_MAX,
    };

    /// The largest block any message can have (what a receiver's bounce
    /// buffer, which takes every message's first block, must hold).
    pub fn largest(self) -> usize {
        match self {
            BlockSize::Fixed(size) => size,
            BlockSize::Automatic { max, .. } => max,
        }
    }

    /// The block size of a `size`-byte message under `schedule`.
    ///
    /// Automatic: a pipelined schedule takes one step per block plus a
    /// fixed number of extra steps, so a message of few blocks pays for the
    /// extra steps in proportion (the binomial pipeline of "Pushing Bytes:
    /// Cloud-Scale Data Replication with RDMC" takes `k + l − 1` steps for
    /// `k` blocks: an 8 MiB message in 256 KiB blocks to 16 members is 32
    /// blocks in 35 steps, 9 % over one unicast before any other cost).
    /// The choice is the smallest power of two that gives the message at
    /// least 64 blocks per extra step (extra steps ≈ 1.6 % of the transfer),
    /// kept within `min..=max` (by default [`AUTO_BLOCK_SIZE_MIN`] and
    /// [`AUTO_BLOCK_SIZE_MAX`], 48 KiB and 256 KiB: per-block costs rule
    /// out smaller blocks and pipeline steps' lock-step larger ones). Schedules that are not pipelined
    /// (sequential, binomial tree: every block costs the same number of
    /// steps) and groups without extra steps (two members) get `max`, which
    /// has the least per-block overhead. Then the blocks are evened out:
    /// the message is cut into as many blocks as that size gives, all of
    /// one size (the last shorter by less than a byte per block) rather
    /// than full ones and a short last one, so the choice can be a little
    /// below the power of two (a
    /// 64 MiB message in 48 KiB blocks: 1,366 blocks of 49,129 bytes, the
    /// last of 47,779, not 1,365 of 49,152 and one of 16 KiB); a message
    /// smaller than the size is one block.
    ///
    /// The answer depends only on the algorithm, the group size and the
    /// message size, never on the rank, so every member computes the same.
    ///
    /// This is the choice for a transport whose sends complete when
    /// delivered (RDMA); [`for_message_over`](Self::for_message_over) also
    /// serves transports whose sends complete once buffered (TCP).
    pub fn for_message(self, schedule: &impl Schedule, size: u64) -> usize {
        self.for_message_over(schedule, size, false)
    }

    /// [`for_message`](Self::for_message), on a transport whose sends
    /// complete once buffered if `buffered_sends` (TCP: see
    /// [`Topology::with_buffered_sends`]). There the automatic choice aims
    /// at 4096 blocks per extra step instead of 64, so pipelined schedules
    /// take `min` (48 KiB by default) up to messages of 128 MiB per extra
    /// step: a member's blocks to two partners then share its link, and
    /// the time that costs a step grows with the block (`rdmc simulate
    /// --send-buffer` shows it). Every member of a group must pass the
    /// same `buffered_sends`.
    pub fn for_message_over(
        self,
        schedule: &impl Schedule,
        size: u64,
        buffered_sends: bool,
    ) -> usize {
        let (min, max) = match self {
            BlockSize::Fixed(size) => return size,
            BlockSize::Automatic { min, max } => (min.min(max), max),
        };
        const PROBE: usize = 1 << 12;
        let steps = schedule.total_steps(PROBE);
        let pipelined = schedule.total_steps(2 * PROBE).checked_sub(steps) == Some(PROBE);
        let extra = steps.saturating_sub(PROBE) as u64;
        if !pipelined || extra == 0 {
            return equal_blocks(size, max as u64) as usize;
        }
        let share = if buffered_sends {
            AUTO_EXTRA_STEP_SHARE_BUFFERED
        } else {
            AUTO_EXTRA_STEP_SHARE
        };
        let blocks = extra.saturating_mul(share);
        let block = size
            .div_ceil(blocks)
            .checked_next_power_of_two()
            .unwrap_or(u64::MAX)
            .clamp(min as u64, max as u64);
        // Bounded by `max`, a usize, so the cast back is lossless.
        equal_blocks(size, block) as usize
    }
}

/// The size of the blocks that cut a `size`-byte message into as many
/// blocks as `block`-byte ones would, all of one size but the last, which
/// is shorter than the others by less than one byte per block (one block
/// of `size` bytes for a message smaller than `block`): never larger than
/// `block`.
///
/// A pipeline's last block is the one its busiest forwarders never send
/// on, so a short last block leaves them the most to send: in the binomial
/// pipeline of four members the member the root never sends to forwards
/// every block but the last, after waiting two hops for the first. In
/// blocks of 48 KiB a 64 MiB message ends in a 16 KiB block, and that
/// member forwards 32 KiB more than with equal blocks (about 1 ms at
/// 250 Mbit/s).
fn equal_blocks(size: u64, block: u64) -> u64 {
    if size == 0 {
        return block;
    }
    size.div_ceil(size.div_ceil(block))
}

/// ⌈log2 n⌉ for n ≥ 1.
pub(crate) fn ceil_log2(n: usize) -> usize {
    debug_assert!(n >= 1);
    (usize::BITS - (n - 1).leading_zeros()) as usize
}

/// ⌊log2 n⌋ for n ≥ 1.
pub(crate) fn floor_log2(n: usize) -> usize {
    debug_assert!(n >= 1);
    (usize::BITS - 1 - n.leading_zeros()) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: usize = 1 << 10;
    const MIB: u64 = 1 << 20;

    /// An algorithm prints as its command-line name, which parses back;
    /// any other name is refused, naming it.
    #[test]
    fn algorithm_names_print_and_parse_back() {
        for algorithm in Algorithm::ALL {
            assert_eq!(algorithm.to_string(), algorithm.name());
            assert_eq!(algorithm.name().parse::<Algorithm>(), Ok(algorithm));
        }
        let err = "binomial-chain".parse::<Algorithm>().unwrap_err();
        assert_eq!(err, UnknownAlgorithm("binomial-chain".into()));
        assert!(err.to_string().contains("\"binomial-chain\""), "{err}");
    }

    fn choice(algorithm: Algorithm, n: usize, rank: usize, size: u64) -> usize {
        let schedule = NodeSchedule::new(algorithm, n, rank).unwrap();
        BlockSize::AUTOMATIC.for_message(&schedule, size)
    }

    /// The evened-out block of a `size`-byte message that `block`-byte
    /// blocks do not divide: `size` over their count, rounded up (the
    /// property test below checks what that gives).
    fn even(size: u64, block: usize) -> usize {
        let blocks = size.div_ceil(block as u64);
        assert_ne!(
            size % block as u64,
            0,
            "{size} in {block}: nothing to even out"
        );
        let even = size.div_ceil(blocks) as usize;
        assert!(even < block);
        even
    }

    /// The choice where sends complete once buffered (TCP).
    fn buffered(algorithm: Algorithm, n: usize, rank: usize, size: u64) -> usize {
        let schedule = NodeSchedule::new(algorithm, n, rank).unwrap();
        BlockSize::AUTOMATIC.for_message_over(&schedule, size, true)
    }

    #[test]
    fn automatic_block_size_follows_message_and_group_size() {
        use Algorithm::*;
        // 16 members: 3 extra steps, so at least 192 blocks when possible.
        assert_eq!(choice(BinomialPipeline, 16, 0, 8 * MIB), 64 * KIB);
        assert_eq!(choice(BinomialPipeline, 16, 0, 12 * MIB), 64 * KIB);
        assert_eq!(
            choice(BinomialPipeline, 16, 0, 12 * MIB + 1),
            even(12 * MIB + 1, 128 * KIB)
        );
        assert_eq!(choice(BinomialPipeline, 16, 0, 24 * MIB), 128 * KIB);
        assert_eq!(
            choice(BinomialPipeline, 16, 0, 24 * MIB + 1),
            even(24 * MIB + 1, 256 * KIB)
        );
        assert_eq!(choice(BinomialPipeline, 16, 0, 256 * MIB), 256 * KIB);
        // 4 members: one extra step, 64 blocks.
        assert_eq!(choice(BinomialPipeline, 4, 0, 8 * MIB), 128 * KIB);
        assert_eq!(choice(BinomialPipeline, 4, 0, 64 * MIB), 256 * KIB);
        // Two members, and schedules that are not pipelined: the largest.
        assert_eq!(choice(BinomialPipeline, 2, 0, 8 * MIB), 256 * KIB);
        assert_eq!(choice(Sequential, 16, 0, 8 * MIB), 256 * KIB);
        assert_eq!(choice(BinomialTree, 16, 0, 8 * MIB), 256 * KIB);
        assert_eq!(choice(BinomialPipeline, 1, 0, 8 * MIB), 256 * KIB);
        // The chain's n − 2 extra steps call for small blocks sooner.
        assert_eq!(choice(Chain, 16, 0, 64 * MIB), 128 * KIB);
        assert_eq!(choice(Chain, 16, 0, 256 * MIB), 256 * KIB);
        // Empty messages: the smallest block (one empty block); tiny ones:
        // one block of their size.
        assert_eq!(choice(BinomialPipeline, 16, 0, 0), 48 * KIB);
        assert_eq!(choice(BinomialPipeline, 16, 0, 1), 1);
        assert_eq!(
            choice(BinomialPipeline, 16, 0, 48 * KIB as u64 - 1),
            48 * KIB - 1
        );
        assert_eq!(choice(BinomialPipeline, 16, 0, 6 * MIB), 48 * KIB);
        assert_eq!(
            choice(BinomialPipeline, 16, 0, 6 * MIB + 1),
            even(6 * MIB + 1, 64 * KIB)
        );
        // Fixed sizes are fixed.
        let s = NodeSchedule::new(BinomialPipeline, 16, 3).unwrap();
        assert_eq!(BlockSize::Fixed(3).for_message(&s, 8 * MIB), 3);
        assert_eq!(BlockSize::Fixed(3).for_message_over(&s, 8 * MIB, true), 3);
        assert_eq!(BlockSize::Fixed(3).largest(), 3);
        assert_eq!(BlockSize::AUTOMATIC.largest(), AUTO_BLOCK_SIZE_MAX);
    }

    #[test]
    fn buffered_sends_keep_pipelines_in_small_blocks_longer() {
        use Algorithm::*;
        // 4096 blocks per extra step: 16 members (3 extra steps) stay at
        // the 48 KiB minimum up to 384 MiB, 8 members (2) up to 256 MiB.
        assert_eq!(
            buffered(BinomialPipeline, 16, 0, 8 * MIB),
            even(8 * MIB, 48 * KIB)
        );
        assert_eq!(
            buffered(BinomialPipeline, 16, 0, 256 * MIB),
            even(256 * MIB, 48 * KIB)
        );
        assert_eq!(buffered(BinomialPipeline, 16, 0, 384 * MIB), 48 * KIB);
        assert_eq!(
            buffered(BinomialPipeline, 16, 0, 384 * MIB + 1),
            even(384 * MIB + 1, 64 * KIB)
        );
        assert_eq!(
            buffered(BinomialPipeline, 8, 0, 64 * MIB),
            even(64 * MIB, 48 * KIB)
        );
        assert_eq!(
            buffered(BinomialPipeline, 8, 0, 256 * MIB + 1),
            even(256 * MIB + 1, 64 * KIB)
        );
        // 64 MiB is not a multiple of 48 KiB: 1,366 equal blocks.
        assert_eq!(buffered(BinomialPipeline, 4, 0, 64 * MIB), 49_129);
        assert_eq!(buffered(Chain, 16, 0, 256 * MIB), even(256 * MIB, 48 * KIB));
        assert_eq!(buffered(BinomialPipeline, 16, 0, 1 << 40), 256 * KIB);
        // Nothing to gain without extra steps: the largest, as before.
        assert_eq!(buffered(BinomialPipeline, 2, 0, 8 * MIB), 256 * KIB);
        assert_eq!(buffered(Sequential, 16, 0, 8 * MIB), 256 * KIB);
        assert_eq!(buffered(BinomialTree, 16, 0, 8 * MIB), 256 * KIB);
        // Never larger than with sends completed on delivery: see
        // `every_rank_makes_the_same_choice`, which sweeps both.
    }

    #[test]
    fn every_rank_makes_the_same_choice() {
        for algorithm in Algorithm::ALL {
            for n in 1..=40 {
                for size in [0, 1, 5 << 20, 8 << 20, 100 << 20, 1 << 40, u64::MAX] {
                    let first = choice(algorithm, n, 0, size);
                    assert!(first <= AUTO_BLOCK_SIZE_MAX);
                    assert_nominal(first, size);
                    // Where sends complete once buffered: never larger.
                    let over_tcp = buffered(algorithm, n, 0, size);
                    assert!(over_tcp <= first, "{algorithm} n={n} size={size}");
                    assert_nominal(over_tcp, size);
                    for rank in 1..n {
                        assert_eq!(choice(algorithm, n, rank, size), first, "{algorithm} n={n}");
                        assert_eq!(
                            buffered(algorithm, n, rank, size),
                            over_tcp,
                            "{algorithm} n={n}"
                        );
                    }
                }
            }
        }
    }

    /// Blocks of a `size`-byte message in `block`-byte blocks (an empty
    /// message is one empty block).
    fn count(size: u64, block: u64) -> u64 {
        size.div_ceil(block).max(1)
    }

    /// `block`, the automatic choice for a `size`-byte message, is the
    /// evened-out form of a nominal size in `AUTO_BLOCK_SIZE_MIN..=MAX`
    /// that is a power of two or the minimum.
    fn assert_nominal(block: usize, size: u64) {
        let nominal = (AUTO_BLOCK_SIZE_MIN..=AUTO_BLOCK_SIZE_MAX)
            .filter(|b| b.is_power_of_two() || *b == AUTO_BLOCK_SIZE_MIN)
            .any(|b| block == equal_blocks(size, b as u64) as usize);
        assert!(nominal, "{block} for {size} bytes");
    }

    proptest::proptest! {
        /// Evened-out blocks: as many as the nominal size gives, none
        /// larger, all of one size but the last, which is shorter than
        /// the others by less than one byte per block.
        #[test]
        fn even_blocks_keep_the_count_and_differ_by_less_than_the_count(
            size in 0u64..(1 << 34),
            block in 1u64..(1 << 20),
        ) {
            let even = equal_blocks(size, block);
            let blocks = count(size, block);
            proptest::prop_assert!(even >= 1 && even <= block);
            proptest::prop_assert_eq!(count(size, even), blocks);
            if size > 0 {
                let last = size - (blocks - 1) * even;
                proptest::prop_assert!(last <= even);
                proptest::prop_assert!(last + blocks > even, "last {} of {}", last, even);
            }
            if size % block == 0 {
                proptest::prop_assert_eq!(even, block);
            }
        }
    }

    /// The shortcuts of `next_incoming`/`next_outgoing` (sequential's) give
    /// what a scan of `incoming`/`outgoing` gives, at every step.
    #[test]
    fn next_transfers_match_a_scan() {
        for algorithm in Algorithm::ALL {
            for n in 1..=20 {
                for rank in 0..n {
                    let s = NodeSchedule::new(algorithm, n, rank).unwrap();
                    for k in 1..=5 {
                        let steps = s.total_steps(k);
                        for step in 0..=steps + 1 {
                            let scan_in =
                                (step..steps).find_map(|t| s.incoming(k, t).map(|x| (t, x)));
                            let scan_out =
                                (step..steps).find_map(|t| s.outgoing(k, t).map(|x| (t, x)));
                            let at = format!("{algorithm} n={n} rank={rank} k={k} step={step}");
                            assert_eq!(s.next_incoming(k, step), scan_in, "{at}");
                            assert_eq!(s.next_outgoing(k, step), scan_out, "{at}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn automatic_bounds_are_kept_when_min_and_max_are_odd() {
        let s = NodeSchedule::new(Algorithm::Chain, 5, 0).unwrap();
        let policy = BlockSize::Automatic { min: 3, max: 7 };
        let mut seen = std::collections::BTreeSet::new();
        for size in 0..2000 {
            let b = policy.for_message(&s, size);
            // 3, then the powers of two 4, then the bound 7, evened out.
            let nominal = [3, 4, 7]
                .into_iter()
                .find(|&n| equal_blocks(size, n) == b as u64)
                .unwrap_or_else(|| panic!("size {size}: {b}"));
            assert!(b <= 7, "size {size}: {b}");
            seen.insert(nominal);
        }
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), [3, 4, 7]);
        assert_eq!(policy.for_message(&s, 10_000), 7);
        assert_eq!(policy.for_message(&s, 1), 1);
        assert_eq!(policy.for_message(&s, 0), 3);
    }
}
