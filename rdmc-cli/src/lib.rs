//! The internals of the `rdmc` command that the workspace's benchmark
//! harness (`rdmc-bench`) shares with it: the cluster setup every member
//! process makes, sizes on the command line, cluster keys, the workload
//! files of `rdmc member --bench --workload`, what `rdmc member --bench`
//! and its driver agree on, the clocks their events are on, and the report
//! drawn from measurements (`rdmc simulate --plot` draws the same).
//!
//! Not a stable API: the command is the product (`rdmc --help`); this
//! library only lets the harness drive the same code without a copy.

#![warn(missing_docs, rust_2018_idioms)]

pub mod bench_protocol;
pub mod clocks;
pub mod cluster;
pub mod identity;
pub mod keygen;
pub mod members;
pub mod metrics_addr;
pub mod report;
pub mod signals;
pub mod size;
pub mod workload;

/// The tests' scratch directories (one helper for the whole workspace).
#[cfg(test)]
#[path = "../../rdmc/tests/common/scratch.rs"]
mod scratch;
