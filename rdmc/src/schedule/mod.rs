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
mod plan;
mod sequential;

use std::fmt;
use std::str::FromStr;

pub use binomial_pipeline::BinomialPipeline;
pub use binomial_tree::BinomialTree;
pub use chain::Chain;
pub use plan::{Plan, PlanError, PlanTransfer, step_bound, verify_schedules};
pub use sequential::Sequential;

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
}

impl Algorithm {
    /// Every algorithm, in the order of the papers' presentation.
    pub const ALL: [Algorithm; 4] = [
        Algorithm::Sequential,
        Algorithm::Chain,
        Algorithm::BinomialTree,
        Algorithm::BinomialPipeline,
    ];

    /// The name used on the command line and in JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Sequential => "sequential",
            Algorithm::Chain => "chain",
            Algorithm::BinomialTree => "tree",
            Algorithm::BinomialPipeline => "binomial-pipeline",
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
#[error("unknown algorithm {0:?} (expected sequential, chain, tree or binomial-pipeline)")]
pub struct UnknownAlgorithm(pub String);

impl FromStr for Algorithm {
    type Err = UnknownAlgorithm;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "sequential" => Ok(Algorithm::Sequential),
            "chain" => Ok(Algorithm::Chain),
            "tree" | "binomial-tree" => Ok(Algorithm::BinomialTree),
            "binomial-pipeline" | "binomial" | "pipeline" => Ok(Algorithm::BinomialPipeline),
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
}

impl NodeSchedule {
    /// The schedule of member `rank` in a group of `nodes` members.
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
        Ok(match algorithm {
            Algorithm::Sequential => NodeSchedule::Sequential(Sequential::new(group_size, rank)),
            Algorithm::Chain => NodeSchedule::Chain(Chain::new(group_size, rank)),
            Algorithm::BinomialTree => {
                NodeSchedule::BinomialTree(BinomialTree::new(group_size, rank))
            }
            Algorithm::BinomialPipeline => {
                NodeSchedule::BinomialPipeline(BinomialPipeline::new(group_size, rank))
            }
        })
    }

    /// The algorithm this schedule implements.
    pub fn algorithm(&self) -> Algorithm {
        match self {
            NodeSchedule::Sequential(_) => Algorithm::Sequential,
            NodeSchedule::Chain(_) => Algorithm::Chain,
            NodeSchedule::BinomialTree(_) => Algorithm::BinomialTree,
            NodeSchedule::BinomialPipeline(_) => Algorithm::BinomialPipeline,
        }
    }

    fn inner(&self) -> &dyn Schedule {
        match self {
            NodeSchedule::Sequential(s) => s,
            NodeSchedule::Chain(s) => s,
            NodeSchedule::BinomialTree(s) => s,
            NodeSchedule::BinomialPipeline(s) => s,
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
