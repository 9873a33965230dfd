//! The sans-IO protocol core: the state machines a driver runs for a node,
//! re-exported from the `rdmc-proto` crate (which says more).
//!
//! Nothing here touches a socket, a task or a clock: a [`GroupMember`] per
//! (group, member) and a [`Rendezvous`] per node, each fed events by a
//! driver and answering with actions ([`Action`], [`RendezvousAction`]) for
//! it to carry out. The runtime (one actor task per [`Node`](crate::Node))
//! is one driver; a deterministic test harness or a simulator can be
//! another.

pub use rdmc_proto::{
    Action, Announce, BATCH_FLAG, Control, CreateFailure, Failure, FailureKind, GroupMember,
    GroupSetting, GroupSummary, MAX_MESSAGES, MemberConfig, MemberError, Mismatch, READY_WINDOW,
    Rank, Rendezvous, RendezvousAction, SettingsFingerprint, SharedSettings, USED_IDS_KEPT,
    block_count, block_len, group_digest,
};
