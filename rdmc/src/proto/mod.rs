//! The sans-IO protocol core: one state machine per (group, member).
//!
//! Nothing here touches a socket, a task or a clock. A [`GroupMember`] is fed
//! events — a block arrived with its immediate value, a send completed, a
//! control message came in, a peer failed, the application submitted or
//! closed — and answers with [`Action`]s for a driver to carry out: post a
//! receive at an offset, send a block, send a control message, deliver a
//! message, report that the group closed or failed. The runtime
//! (one actor task per [`Node`](crate::Node)) is one such driver; the whole-group test harness in
//! `tests/` is another.
//!
//! The protocol follows the papers (seed 001 Sec. 4.2–4.3) and the original
//! implementation (`reference/rdmc-original.md` §3), with the deliberate
//! improvements listed in DESIGN.md §4: exact sizes everywhere (the immediate
//! value of every block is the message's total size in bytes), queued sends,
//! empty messages, failure detection and relay, and an end-to-end close.

mod member;

pub use member::{
    Action, Control, Failure, FailureReason, GroupMember, MemberConfig, MemberError, READY_WINDOW,
    Rank, block_count, block_len,
};
