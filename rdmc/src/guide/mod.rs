//! Guides: what a group promises, how to pick and run a transport, and the
//! `rdmc` command, beyond the API reference of each item.
//!
//! - [`semantics`]: sending, receiving, closing, durability, flow control,
//!   failures.
//! - [`transports`]: `mem`, `tcp`, `ofi` and `rdma`, and what each needs.
//! - [`rdma_hardware`]: running on InfiniBand, RoCE or iWARP, and what was
//!   verified where.
//! - [`completion_modes`]: how a node waits for its completions.
//! - [`command_line`]: the `rdmc` command (`plan`, `demo`, `member`,
//!   `push`/`receive`, `keygen`, `bench`, `simulate`, `model`).
//! - [`architecture`]: the layers of the library and the crates of the
//!   workspace.
//!
//! This module holds documentation only.

#[doc = include_str!("semantics.md")]
pub mod semantics {}

#[doc = include_str!("transports.md")]
pub mod transports {}

#[doc = include_str!("rdma_hardware.md")]
pub mod rdma_hardware {}

#[doc = include_str!("completion_modes.md")]
pub mod completion_modes {}

#[doc = include_str!("command_line.md")]
pub mod command_line {}

#[doc = include_str!("architecture.md")]
pub mod architecture {}
