//! Binomial pipeline (placeholder while the schedule lands).

use super::{Schedule, Transfer};

/// Binomial pipeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BinomialPipeline {
    nodes: usize,
    rank: usize,
}

impl BinomialPipeline {
    /// Member `rank`'s schedule in a group of `nodes`.
    pub fn new(nodes: usize, rank: usize) -> Self {
        Self { nodes, rank }
    }
}

impl Schedule for BinomialPipeline {
    fn nodes(&self) -> usize {
        self.nodes
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn total_steps(&self, _blocks: usize) -> usize {
        todo!("binomial pipeline")
    }
    fn outgoing(&self, _blocks: usize, _step: usize) -> Option<Transfer> {
        todo!("binomial pipeline")
    }
    fn incoming(&self, _blocks: usize, _step: usize) -> Option<Transfer> {
        todo!("binomial pipeline")
    }
    fn first_block(&self) -> Option<Transfer> {
        todo!("binomial pipeline")
    }
    fn connections(&self) -> Vec<usize> {
        todo!("binomial pipeline")
    }
}
