//! rdmc-proto: the sans-IO core of rdmc, reliable multicast of large
//! objects after "RDMC: A Reliable RDMA Multicast for Large Objects"
//! (Behrens, Jha, Birman, Tremel) and "Pushing Bytes: Cloud-Scale Data
//! Replication with RDMC".
//!
//! Nothing here touches a socket, a task or a clock, and nothing depends on
//! an async runtime: the [`schedule`]s say which block goes where at each
//! step, and two state machines make up the protocol, each fed events by a
//! driver and answering with actions for it to carry out:
//!
//! * [`GroupMember`], one per (group, member): fed a block that arrived with
//!   its immediate value, a completed send, a control message, a peer's
//!   failure, the application's submit, take and close, the passing of
//!   time (the progress timeout); it answers with
//!   [`Action`]s — post a receive at an offset, send a block, send a control
//!   message, deliver a message, report that the group closed or failed.
//! * [`Rendezvous`], one per node: the creation of the node's groups. Fed
//!   local creations, other members' `Join`s and `JoinRejected`s, failed
//!   peers and the passing of time; it answers with
//!   [`RendezvousAction`]s — send a `Join` or a refusal, hand over control
//!   messages that came before the group existed here, the group is ready,
//!   its creation failed (a mismatch, or a timeout naming the missing
//!   members).
//!
//! The `rdmc` crate's runtime (one actor task per node, over TCP,
//! libfabric, RDMA verbs or memory) is one driver; the `rdmc-sim`
//! simulator and this crate's deterministic whole-group test harness are
//! others: everything the protocol decides is decided here, so it can be
//! exercised under any order of events without a network.
//!
//! The data path follows the RDMC paper (Sec. 4.2–4.3), with deliberate
//! additions: exact sizes everywhere (the immediate value of every block is
//! the message's total size in bytes), queued sends, empty messages,
//! failure detection and relay, an end-to-end close that completes only
//! once every receiver's application has taken every message and closed, a
//! progress timeout, a window of receives announced ahead, and the creation
//! rendezvous.

#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]
#![forbid(unsafe_code)]

/// The crate's hash maps and sets: std's, except in the whole-node
/// simulator's build (`--cfg rdmc_sim`), where they iterate in the same
/// order in every run, so that a simulated run replays exactly from its
/// seed.
mod collections {
    #[cfg(not(rdmc_sim))]
    type State = std::collections::hash_map::RandomState;
    #[cfg(rdmc_sim)]
    type State = std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>;
    pub(crate) type HashMap<K, V> = std::collections::HashMap<K, V, State>;
    #[allow(dead_code)]
    pub(crate) type HashSet<T> = std::collections::HashSet<T, State>;
}
mod ids;
mod member;
mod rendezvous;
pub mod schedule;
#[cfg(test)]
mod tests;

pub use ids::{GroupId, NodeId};
pub use member::{
    Action, Announce, BATCH_FLAG, Control, Failure, FailureKind, GroupMember, MAX_MESSAGES,
    MemberConfig, MemberError, READY_WINDOW, Rank, block_count, block_len, write_cause,
};
pub use rendezvous::{
    CreateFailure, GroupSetting, GroupSummary, Mismatch, Rendezvous, RendezvousAction,
    SettingsFingerprint, SharedSettings, USED_IDS_KEPT, group_digest,
};
pub use schedule::{Algorithm, BlockSize};
