//! Binomial tree by recursive doubling: in stage `s` every member `r < 2^s`
//! that holds the message sends all of it, block by block, to `r + 2^s`
//! (the RDMC paper, Sec. 4.3, "Binomial Tree"; Fig. 3 left).

use super::{Schedule, Transfer, ceil_log2, floor_log2};

/// Binomial tree; `k·⌈log2 n⌉` steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BinomialTree {
    group_size: usize,
    rank: usize,
}

impl BinomialTree {
    /// Member `rank`'s schedule in a group of `nodes` (caller checks `rank < nodes`).
    pub fn new(group_size: usize, rank: usize) -> Self {
        Self { group_size, rank }
    }

    /// The stage (`⌊log2 rank⌋`) in which a non-root member receives.
    fn receive_stage(&self) -> Option<usize> {
        (self.rank > 0).then(|| floor_log2(self.rank))
    }
}

impl Schedule for BinomialTree {
    fn group_size(&self) -> usize {
        self.group_size
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn total_steps(&self, blocks: usize) -> usize {
        blocks * ceil_log2(self.group_size)
    }
    fn outgoing(&self, blocks: usize, step: usize) -> Option<Transfer> {
        if step >= self.total_steps(blocks) {
            return None;
        }
        let stage = step / blocks;
        let span = 1usize << stage;
        let peer = self.rank + span;
        (self.rank < span && peer < self.group_size).then_some(Transfer {
            peer,
            block: step - stage * blocks,
        })
    }
    fn incoming(&self, blocks: usize, step: usize) -> Option<Transfer> {
        let stage = self.receive_stage()?;
        (step / blocks == stage && step < self.total_steps(blocks)).then(|| Transfer {
            peer: self.rank - (1 << stage),
            block: step - stage * blocks,
        })
    }
    fn first_block(&self) -> Option<Transfer> {
        self.receive_stage().map(|stage| Transfer {
            peer: self.rank - (1 << stage),
            block: 0,
        })
    }
    fn connections(&self) -> Vec<usize> {
        let mut peers = Vec::new();
        if let Some(stage) = self.receive_stage() {
            peers.push(self.rank - (1 << stage));
        }
        let mut span = 1usize;
        while self.rank + span < self.group_size {
            if span > self.rank {
                peers.push(self.rank + span);
            }
            span <<= 1;
        }
        peers
    }
}
