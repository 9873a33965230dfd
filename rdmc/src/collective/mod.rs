//! Collective operations over groups: [`Allreduce`] — a pipelined k-ary
//! tree reduce followed by a multicast of the result, or a ring
//! (reduce-scatter then allgather) for large buffers, or on request
//! recursive halving and doubling — and the latency [`model`] that picks
//! the tree's degree and chooses between the tree and the ring.
//!
//! ```
//! use futures::future::try_join_all;
//! use rdmc::collective::{Allreduce, AllreduceConfig, DType, ReduceOp};
//! use rdmc::{GroupId, MemCluster, Node, NodeConfig, NodeId};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cluster = MemCluster::new(3);
//! let nodes = Node::in_memory_all(&cluster, NodeConfig::new())?;
//! let members = [NodeId(0), NodeId(1), NodeId(2)];
//! // Every member joins once; the groups it needs are made here.
//! let mut all = try_join_all(nodes.iter().map(|node| {
//!     Allreduce::new(node, GroupId(100), &members, AllreduceConfig::new())
//! }))
//! .await?;
//! // Member r holds [r, 10 r] as i32; each gets the element-wise sum.
//! let sum = ReduceOp::sum(DType::I32);
//! let mut bufs: Vec<Vec<u8>> = (0..3i32)
//!     .map(|r| [r, 10 * r].iter().flat_map(|v| v.to_ne_bytes()).collect())
//!     .collect();
//! try_join_all(all.iter_mut().zip(bufs.iter_mut()).map(|(a, b)| a.allreduce(b, &sum))).await?;
//! let want: Vec<u8> = [3i32, 30].iter().flat_map(|v| v.to_ne_bytes()).collect();
//! assert!(bufs.iter().all(|b| *b == want));
//! try_join_all(all.into_iter().map(Allreduce::close)).await?;
//! # Ok(())
//! # }
//! ```

pub mod model;

mod allreduce;
mod edge;
mod halving;
mod op;
mod tree_wire;

pub use allreduce::{
    Allreduce, AllreduceAlgorithm, AllreduceConfig, DEFAULT_CHUNK_SIZE, DEFAULT_RING_LANES,
    DEFAULT_RING_PIECES, tree_children, tree_parent,
};
pub use edge::AllreduceError;
pub use op::{CustomReduce, DType, ReduceOp};
