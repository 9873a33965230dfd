//! Sequential send: the root sends the whole message to member 1, then to
//! member 2, and so on (the RDMC paper, Sec. 4.3, "Sequential Send").

use super::{Schedule, Transfer};

/// Sequential send; `k·(n−1)` steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sequential {
    group_size: usize,
    rank: usize,
}

impl Sequential {
    /// Member `rank`'s schedule in a group of `nodes` (caller checks `rank < nodes`).
    pub fn new(group_size: usize, rank: usize) -> Self {
        Self { group_size, rank }
    }
}

impl Schedule for Sequential {
    fn group_size(&self) -> usize {
        self.group_size
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn total_steps(&self, blocks: usize) -> usize {
        blocks * (self.group_size - 1)
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
    fn next_incoming(&self, blocks: usize, step: usize) -> Option<(usize, Transfer)> {
        // A receiver's steps are one contiguous run: (rank − 1)·k .. rank·k.
        let first = (self.rank.checked_sub(1)?).checked_mul(blocks)?;
        let s = step.max(first);
        self.incoming(blocks, s).map(|t| (s, t))
    }
    fn next_outgoing(&self, blocks: usize, step: usize) -> Option<(usize, Transfer)> {
        self.outgoing(blocks, step).map(|t| (step, t))
    }
    fn first_block(&self) -> Option<Transfer> {
        (self.rank > 0).then_some(Transfer { peer: 0, block: 0 })
    }
    fn connections(&self) -> Vec<usize> {
        if self.rank == 0 {
            (1..self.group_size).collect()
        } else {
            vec![0]
        }
    }
}
