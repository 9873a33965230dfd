//! The sans-IO protocol core: the state machines a driver runs for a node.
//!
//! Nothing here touches a socket, a task or a clock. Two state machines make
//! up the protocol, each fed events by a driver and answering with actions
//! for it to carry out:
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
//! The runtime (one actor task per [`Node`](crate::Node)) is one driver; a
//! deterministic whole-group test harness or a simulator can be another:
//! everything the protocol decides is decided here, so it can be exercised
//! under any order of events without a network.
//!
//! The data path follows the RDMC paper ("RDMC: A Reliable RDMA Multicast
//! for Large Objects", Behrens, Jha, Birman, Tremel; Sec. 4.2–4.3), with
//! deliberate additions: exact sizes everywhere (the immediate value of
//! every block is the message's total size in bytes), queued sends, empty
//! messages, failure detection and relay, an end-to-end close that
//! completes only once every receiver's application has taken every
//! message and closed, a progress timeout, a window of receives announced
//! ahead, and the creation rendezvous.

mod member;
mod rendezvous;

pub use member::{
    ANNOUNCE_BATCH, Action, Announce, BATCH_FLAG, Control, Failure, FailureReason, GroupMember,
    MAX_MESSAGES, MemberConfig, MemberError, READY_WINDOW, Rank, block_count, block_len,
};
pub use rendezvous::{
    ABANDONED_KEPT, CreateFailure, MAX_EARLY, Rendezvous, RendezvousAction, SharedSettings,
    USED_IDS_KEPT, group_digest,
};
