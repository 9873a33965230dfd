//! Sequential send: the root sends the whole message to member 1, then to
//! member 2, and so on (seed 001 Sec. 4.3, "Sequential Send").

use super::{Schedule, Transfer};

/// Sequential send; `k·(n−1)` steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sequential {
    nodes: usize,
    rank: usize,
}

impl Sequential {
    /// Member `rank`'s schedule in a group of `nodes` (caller checks `rank < nodes`).
    pub fn new(nodes: usize, rank: usize) -> Self {
        Self { nodes, rank }
    }
}

impl Schedule for Sequential {
    fn nodes(&self) -> usize {
        self.nodes
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn total_steps(&self, blocks: usize) -> usize {
        blocks * (self.nodes - 1)
    }
    fn outgoing(&self, blocks: usize, step: usize) -> Option<Transfer> {
        (self.rank == 0 && step < self.total_steps(blocks)).then(|| Transfer {
            peer: 1 + step / blocks,
            block: step % blocks,
        })
    }
    fn incoming(&self, blocks: usize, step: usize) -> Option<Transfer> {
        (self.rank > 0 && step / blocks == self.rank - 1 && step < self.total_steps(blocks)).then(
            || Transfer {
                peer: 0,
                block: step % blocks,
            },
        )
    }
    fn first_block(&self) -> Option<Transfer> {
        (self.rank > 0).then_some(Transfer { peer: 0, block: 0 })
    }
    fn connections(&self) -> Vec<usize> {
        if self.rank == 0 {
            (1..self.nodes).collect()
        } else {
            vec![0]
        }
    }
}
