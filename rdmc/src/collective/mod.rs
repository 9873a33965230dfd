//! Collective operations over groups: allreduce on a pipelined k-ary tree
//! ([`Allreduce`]) and the latency [`model`] that picks its degree.

pub mod model;
