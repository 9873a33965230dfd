//! Collective operations over groups: allreduce on a pipelined k-ary tree
//! ([`Allreduce`]) and the latency [`model`] that picks its degree.

pub mod model;

mod allreduce;
mod op;

pub use allreduce::{
    Allreduce, AllreduceAlgorithm, AllreduceConfig, AllreduceError, DEFAULT_CHUNK_SIZE,
    tree_children, tree_parent,
};
pub use op::{CustomReduce, DType, ReduceOp};
