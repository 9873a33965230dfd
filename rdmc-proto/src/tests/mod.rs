//! The protocol core driven whole: a deterministic harness of many members
//! over modelled links ([`harness`]), and the tests it drives, with the
//! crate's internals (its tuning constants) in reach.

mod cluster;
mod delivery;
mod harness;
mod rendezvous;
