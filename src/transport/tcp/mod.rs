//! The TCP transport and control plane (DESIGN.md §3.3 and §3.5).
//!
//! In progress: so far only the [`handshake`] that admits a connection into
//! the cluster's mesh.

pub(crate) mod handshake;
