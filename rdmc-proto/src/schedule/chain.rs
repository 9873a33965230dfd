//! Chain send: a bucket brigade in which member `r` relays every block to
//! `r + 1` (the RDMC paper, Sec. 4.3, "Chain Send").

use super::{Schedule, Transfer};

/// Chain send; `k + n − 2` steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chain {
    group_size: usize,
    rank: usize,
}

impl Chain {
    /// Member `rank`'s schedule in a group of `nodes` (caller checks `rank < nodes`).
    pub fn new(group_size: usize, rank: usize) -> Self {
        Self { group_size, rank }
    }
}

impl Schedule for Chain {
    fn group_size(&self) -> usize {
        self.group_size
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn total_steps(&self, blocks: usize) -> usize {
        if self.group_size < 2 {
            0
        } else {
            blocks + self.group_size - 2
        }
    }
    fn outgoing(&self, blocks: usize, step: usize) -> Option<Transfer> {
        let block = step.checked_sub(self.rank)?;
        (self.rank + 1 < self.group_size && block < blocks).then_some(Transfer {
            peer: self.rank + 1,
            block,
        })
    }
    fn incoming(&self, blocks: usize, step: usize) -> Option<Transfer> {
        if self.rank == 0 {
            return None;
        }
        let block = (step + 1).checked_sub(self.rank)?;
        (block < blocks).then_some(Transfer {
            peer: self.rank - 1,
            block,
        })
    }
    fn first_block(&self) -> Option<Transfer> {
        // Lazily: `rank - 1` underflows on the root.
        (self.rank > 0).then(|| Transfer {
            peer: self.rank - 1,
            block: 0,
        })
    }
    fn connections(&self) -> Vec<usize> {
        let mut peers = Vec::with_capacity(2);
        if self.rank > 0 {
            peers.push(self.rank - 1);
        }
        if self.rank + 1 < self.group_size {
            peers.push(self.rank + 1);
        }
        peers
    }
}
