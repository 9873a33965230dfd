//! Whole-group plans: every transfer of every member, assembled from the
//! per-member schedule functions, plus verifiers used by the tests and the CLI.
//!
//! [`Plan::verify`] checks a plan (possibly one read back from JSON) against
//! the invariants every schedule must keep (each block reaches every member
//! exactly once, relayed only after it arrived, within the step bound);
//! [`verify_schedules`](super::verify_schedules) checks the per-member
//! functions against each other (sends match receives, the first block, the
//! connection lists). These are the checks the original C++ RDMC ran in its
//! schedule self-test, extended to all four algorithms.

use super::{
    Algorithm, NodeSchedule, Schedule, ScheduleError, Topology, Transfer, ceil_log2, floor_log2,
};

/// One transfer of a whole-group plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PlanTransfer {
    /// Logical step, from 0.
    pub step: usize,
    /// Sending rank.
    pub from: usize,
    /// Receiving rank.
    pub to: usize,
    /// Block number.
    pub block: usize,
}

/// Every transfer of every member for one (algorithm, n, k), in step order.
///
/// Built by [`Plan::new`] (and its variants) or deserialized; more fields
/// may come, so it cannot be built field by field outside this crate.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Plan {
    /// The algorithm's CLI name.
    pub algorithm: String,
    /// Group size (`"nodes"` in JSON).
    #[cfg_attr(feature = "serde", serde(rename = "nodes"))]
    pub group_size: usize,
    /// Number of blocks.
    pub blocks: usize,
    /// Number of logical steps.
    pub steps: usize,
    /// The rack of each rank ([`Topology::racks`]); empty for one rack.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Vec::is_empty")
    )]
    pub racks: Vec<u32>,
    /// The slow ranks ([`Topology::slow_members`]).
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Vec::is_empty")
    )]
    pub slow: Vec<usize>,
    /// Whether the plan is for a transport whose sends complete once
    /// buffered ([`Topology::buffered_sends`]; it changes the binomial
    /// pipeline's layout with slow members or a size that is not a power of
    /// two).
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "is_false"))]
    pub buffered_sends: bool,
    /// The transfers, sorted by (step, from).
    pub transfers: Vec<PlanTransfer>,
}

/// A plan or a set of per-member schedules breaks an invariant every
/// schedule must keep. Each variant names the offending step, member and
/// block where there is one.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The plan's algorithm name is not an [`Algorithm`].
    #[error("unknown algorithm {0:?}")]
    UnknownAlgorithm(String),
    /// The plan has no members.
    #[error("a group needs at least one member")]
    EmptyGroup,
    /// The plan's racks or slow members do not fit its group.
    #[error("bad topology: {0}")]
    Topology(#[from] super::TopologyError),
    /// The plan has no blocks.
    #[error("a message needs at least one block")]
    NoBlocks,
    /// The plan takes more steps than the algorithm's [`step_bound`].
    #[error("{steps} steps exceed the bound of {bound}")]
    TooManySteps {
        /// The plan's step count.
        steps: usize,
        /// The algorithm's bound.
        bound: usize,
    },
    /// A transfer is scheduled at or after the plan's last step.
    #[error("transfer at step {step} but the plan has only {steps} steps")]
    StepOutOfRange {
        /// The transfer's step.
        step: usize,
        /// The plan's step count.
        steps: usize,
    },
    /// A transfer names a rank outside the group.
    #[error("step {step}: rank {rank} is not in a group of {group_size}")]
    RankOutOfRange {
        /// The transfer's step.
        step: usize,
        /// The bad rank.
        rank: usize,
        /// The group size.
        group_size: usize,
    },
    /// A transfer names a block outside the message.
    #[error("step {step}: block {block} is not in a message of {blocks} blocks")]
    BlockOutOfRange {
        /// The transfer's step.
        step: usize,
        /// The bad block.
        block: usize,
        /// The message's block count.
        blocks: usize,
    },
    /// A member sends to itself.
    #[error("step {step}: member {node} sends block {block} to itself")]
    SelfTransfer {
        /// The transfer's step.
        step: usize,
        /// The member.
        node: usize,
        /// The block.
        block: usize,
    },
    /// The root receives a block (nobody ever sends to the root).
    #[error("step {step}: the root receives block {block} from {from}")]
    RootReceives {
        /// The transfer's step.
        step: usize,
        /// The sender.
        from: usize,
        /// The block.
        block: usize,
    },
    /// A non-root member sends a block it did not receive at an earlier step.
    #[error("step {step}: member {node} sends block {block} before receiving it")]
    BlockNotHeld {
        /// The transfer's step.
        step: usize,
        /// The sender.
        node: usize,
        /// The block.
        block: usize,
    },
    /// A member sends more than once in one step.
    #[error("step {step}: member {node} sends more than once")]
    MultipleSends {
        /// The step.
        step: usize,
        /// The member.
        node: usize,
    },
    /// A member receives more than once in one step.
    #[error("step {step}: member {node} receives more than once")]
    MultipleReceives {
        /// The step.
        step: usize,
        /// The member.
        node: usize,
    },
    /// A member receives a block it already received.
    #[error("step {step}: member {node} receives block {block} a second time")]
    DuplicateBlock {
        /// The step of the second receipt.
        step: usize,
        /// The member.
        node: usize,
        /// The block.
        block: usize,
    },
    /// A non-root member never receives a block.
    #[error("member {node} never receives block {block}")]
    MissingBlock {
        /// The member.
        node: usize,
        /// The block.
        block: usize,
    },
    /// Members disagree on the number of steps.
    #[error("member {node} has {steps} steps, member 0 has {expected}")]
    StepCountMismatch {
        /// The member.
        node: usize,
        /// Its step count.
        steps: usize,
        /// Member 0's step count.
        expected: usize,
    },
    /// A member's outgoing transfer has no matching incoming transfer at the
    /// target, or an incoming one no matching outgoing one at the source.
    #[error("step {step}: {from} → {to} block {block} is not seen by both ends")]
    UnmatchedTransfer {
        /// The step.
        step: usize,
        /// The sender.
        from: usize,
        /// The receiver.
        to: usize,
        /// The block.
        block: usize,
    },
    /// A member's first incoming transfer differs from
    /// [`Schedule::first_block_for`].
    #[error(
        "member {node}: first incoming transfer {actual:?} but first_block_for gives {expected:?}"
    )]
    FirstBlockMismatch {
        /// The member.
        node: usize,
        /// What [`Schedule::first_block_for`] says.
        expected: Option<Transfer>,
        /// The first transfer of [`Schedule::incoming`].
        actual: Option<Transfer>,
    },
    /// A transfer uses a pair missing from one of the two connection lists.
    #[error("step {step}: {from} → {to} is not in both members' connection lists")]
    NotConnected {
        /// The step.
        step: usize,
        /// The sender.
        from: usize,
        /// The receiver.
        to: usize,
    },
    /// A connection list names a peer twice, names the member itself or a
    /// rank outside the group.
    #[error("member {node}: bad connection to {peer} (duplicate, self or out of range)")]
    BadConnection {
        /// The member.
        node: usize,
        /// The peer.
        peer: usize,
    },
    /// Building the connections in list order by pairwise blocking
    /// rendezvous gets stuck: `node` waits for `peer`, which waits for
    /// someone else.
    #[error("connection rendezvous deadlocks: member {node} waits for {peer}")]
    ConnectionDeadlock {
        /// A member that cannot finish its connection list.
        node: usize,
        /// The peer it is stuck waiting for.
        peer: usize,
    },
    /// `peer` is in `node`'s connection list but not the other way round.
    #[error("member {node} connects to {peer} but not the other way round")]
    AsymmetricConnection {
        /// The member whose list names the peer.
        node: usize,
        /// The peer.
        peer: usize,
    },
}

/// The most steps `algorithm` may take for `nodes` members and `blocks`
/// blocks (`0` for a group of one):
///
/// * binomial pipeline: `l + k − 1` for `n = 2^l`, `l + k` otherwise,
///   with `l = ⌊log2 n⌋`;
/// * chain: `n + k − 2`;
/// * binomial tree: `⌈log2 n⌉·k`;
/// * sequential: `(n − 1)·k`;
/// * hybrid in one rack: as the binomial pipeline (see [`step_bound_in`]).
pub fn step_bound(algorithm: Algorithm, group_size: usize, blocks: usize) -> usize {
    if group_size < 2 {
        return 0;
    }
    match algorithm {
        Algorithm::BinomialPipeline | Algorithm::Hybrid => {
            let l = floor_log2(group_size);
            let extra = usize::from(!group_size.is_power_of_two());
            l + blocks + extra - 1
        }
        Algorithm::Chain => group_size + blocks - 2,
        Algorithm::BinomialTree => ceil_log2(group_size) * blocks,
        Algorithm::Sequential => (group_size - 1) * blocks,
    }
}

/// [`step_bound`] for a group laid out as `topology` says. The hybrid and
/// the binomial pipeline with slow members take, with racks of `m_0, m_1,
/// …` fast members in chain order (`l_i = ⌊log2 m_i⌋`, rack `i` starting at
/// step `o_i = Σ_{j<i} (l_j + 1)`), the largest of: each rack's binomial
/// pipeline end `o_i + step_bound(m_i, k)`; each leader's last receipt
/// `o_i + k − 1`; the last receipt of the `s` slow leaves, fed one block
/// each every `max(2, s)` steps by the last rack from its step
/// `l_last + 2` on (a few steps later in a rack that is not a power of two,
/// see [`Hybrid`](super::Hybrid)). In one rack without slow members that is
/// the binomial pipeline's bound.
pub fn step_bound_in(algorithm: Algorithm, topology: &Topology, blocks: usize) -> usize {
    let layered = match algorithm {
        Algorithm::Hybrid => true,
        Algorithm::BinomialPipeline => topology.lays_out_pipeline(),
        _ => false,
    };
    if layered {
        topology
            .layout(algorithm == Algorithm::Hybrid)
            .steps(blocks)
    } else {
        step_bound(algorithm, topology.group_size(), blocks)
    }
}

impl Plan {
    /// Assemble the plan from each member's [`Schedule::outgoing`] (one
    /// rack, no slow member).
    pub fn new(
        algorithm: Algorithm,
        group_size: usize,
        blocks: usize,
    ) -> Result<Self, ScheduleError> {
        let topology = Topology::flat(group_size).map_err(|_| ScheduleError::EmptyGroup)?;
        Self::with_topology(algorithm, &topology, blocks)
    }

    /// Assemble the plan of a group laid out as `topology` says (see
    /// [`NodeSchedule::with_topology`]).
    pub fn with_topology(
        algorithm: Algorithm,
        topology: &Topology,
        blocks: usize,
    ) -> Result<Self, ScheduleError> {
        let group_size = topology.group_size();
        let schedules = (0..group_size)
            .map(|rank| NodeSchedule::with_topology(algorithm, topology, rank))
            .collect::<Result<Vec<_>, _>>()?;
        let steps = schedules.first().map_or(0, |s| s.total_steps(blocks));
        let mut transfers = Vec::new();
        for step in 0..steps {
            for (from, schedule) in schedules.iter().enumerate() {
                if let Some(t) = schedule.outgoing(blocks, step) {
                    transfers.push(PlanTransfer {
                        step,
                        from,
                        to: t.peer,
                        block: t.block,
                    });
                }
            }
        }
        Ok(Plan {
            algorithm: algorithm.name().to_owned(),
            group_size,
            blocks,
            steps,
            racks: topology.racks().to_vec(),
            slow: topology.slow_members().to_vec(),
            buffered_sends: topology.buffered_sends(),
            transfers,
        })
    }

    /// Check the plan against the invariants every schedule keeps and the
    /// algorithm's [`step_bound_in`] for the plan's racks and slow members:
    ///
    /// * ranks and blocks are in range, nobody sends to itself, and no
    ///   transfer is at or after step `steps`;
    /// * the root never receives;
    /// * a non-root member only sends a block it received at an earlier step;
    /// * each member sends at most once and receives at most once per step;
    /// * every non-root member receives every block exactly once.
    ///
    /// The transfers may be in any order. Returns the first violation found,
    /// in step order.
    pub fn verify(&self) -> Result<(), PlanError> {
        let algorithm: Algorithm = self
            .algorithm
            .parse()
            .map_err(|_| PlanError::UnknownAlgorithm(self.algorithm.clone()))?;
        let (n, k, steps) = (self.group_size, self.blocks, self.steps);
        if n == 0 {
            return Err(PlanError::EmptyGroup);
        }
        if k == 0 {
            return Err(PlanError::NoBlocks);
        }
        let mut topology = Topology::flat(n)?;
        if !self.racks.is_empty() {
            topology = topology.with_racks(self.racks.clone())?;
        }
        let topology = topology
            .with_slow_members(self.slow.iter().copied())?
            .with_buffered_sends(self.buffered_sends);
        let bound = step_bound_in(algorithm, &topology, k);
        if steps > bound {
            return Err(PlanError::TooManySteps { steps, bound });
        }

        let mut order: Vec<&PlanTransfer> = self.transfers.iter().collect();
        order.sort_by_key(|t| t.step);
        for t in &order {
            let step = t.step;
            if step >= steps {
                return Err(PlanError::StepOutOfRange { step, steps });
            }
            for rank in [t.from, t.to] {
                if rank >= n {
                    return Err(PlanError::RankOutOfRange {
                        step,
                        rank,
                        group_size: n,
                    });
                }
            }
            if t.block >= k {
                return Err(PlanError::BlockOutOfRange {
                    step,
                    block: t.block,
                    blocks: k,
                });
            }
            if t.from == t.to {
                return Err(PlanError::SelfTransfer {
                    step,
                    node: t.from,
                    block: t.block,
                });
            }
            if t.to == 0 {
                return Err(PlanError::RootReceives {
                    step,
                    from: t.from,
                    block: t.block,
                });
            }
        }

        // received[node * k + block] = step at which node got block.
        let mut received: Vec<Option<usize>> = vec![None; n * k];
        let mut last_send: Vec<Option<usize>> = vec![None; n];
        let mut last_receive: Vec<Option<usize>> = vec![None; n];
        for group in order.chunk_by(|a, b| a.step == b.step) {
            let step = group[0].step;
            // Sends are checked against receipts of earlier steps only.
            for t in group {
                if last_send[t.from] == Some(step) {
                    return Err(PlanError::MultipleSends { step, node: t.from });
                }
                last_send[t.from] = Some(step);
                if t.from != 0 && received[t.from * k + t.block].is_none() {
                    return Err(PlanError::BlockNotHeld {
                        step,
                        node: t.from,
                        block: t.block,
                    });
                }
            }
            for t in group {
                if last_receive[t.to] == Some(step) {
                    return Err(PlanError::MultipleReceives { step, node: t.to });
                }
                last_receive[t.to] = Some(step);
                let slot = &mut received[t.to * k + t.block];
                if slot.is_some() {
                    return Err(PlanError::DuplicateBlock {
                        step,
                        node: t.to,
                        block: t.block,
                    });
                }
                *slot = Some(step);
            }
        }
        for node in 1..n {
            for block in 0..k {
                if received[node * k + block].is_none() {
                    return Err(PlanError::MissingBlock { node, block });
                }
            }
        }
        Ok(())
    }
}

#[cfg(feature = "serde")]
fn is_false(b: &bool) -> bool {
    !b
}
