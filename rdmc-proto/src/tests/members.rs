//! Single members driven by hand: peers that break the protocol (wrong
//! blocks, forged or early control messages, impossible counts), the
//! application's close and the progress timeout, leaving, and local
//! failures.

use std::time::Duration;

use super::{actions, config};
use crate::schedule::Algorithm;
use crate::{Action, Control, FailureKind, GroupMember, READY_WINDOW, Rank};

// ---- misbehaving peers -----------------------------------------------------

/// The victim's actions after `peer` broke the protocol: exactly one
/// `Failed` with a protocol violation naming `peer`, `Control::Failed`
/// relayed to every other member (`peer` included: it is alive, and nobody
/// else would tell it), and no `MessageComplete`.
#[track_caller]
fn assert_violation(actions: &[Action], me: Rank, n: usize, peer: Rank) {
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::MessageComplete { .. })),
        "a partial message was delivered: {actions:?}"
    );
    let failed = the_failure(actions);
    assert_eq!(failed.suspect, Some(peer), "{actions:?}");
    assert!(
        failed.kind == FailureKind::ProtocolViolation && failed.detail.is_some(),
        "{actions:?}"
    );
    let mut told: Vec<Rank> = actions
        .iter()
        .filter_map(|a| match a {
            Action::SendControl {
                to,
                control:
                    Control::Failed {
                        suspect,
                        kind,
                        detector,
                    },
            } => {
                assert_eq!(*suspect, Some(peer));
                assert_eq!(*kind, FailureKind::ProtocolViolation);
                assert_eq!(*detector, me, "the detector reports its own finding");
                Some(*to)
            }
            _ => None,
        })
        .collect();
    told.sort_unstable();
    let others: Vec<Rank> = (0..n).filter(|&r| r != me).collect();
    assert_eq!(told, others, "the failure must reach every other member");
}

/// The one `Failed` among `actions`.
#[track_caller]
fn the_failure(actions: &[Action]) -> &crate::Failure {
    let mut failed = actions.iter().filter_map(|a| match a {
        Action::Failed(f) => Some(f),
        _ => None,
    });
    let first = failed.next();
    assert!(first.is_some() && failed.next().is_none(), "{actions:?}");
    first.unwrap()
}

/// A member after its violation ignores everything.
#[track_caller]
fn assert_inert(member: &mut GroupMember, peer: Rank) {
    member.handle_block(peer, 8, 4);
    member.handle_control(peer, Control::ReadyForBlock);
    member.handle_peer_failure(Some(peer));
    assert_eq!(member.poll_action(), None);
}

/// Chain of `n`, member `rank`, armed and drained.
fn chain_member(n: usize, rank: Rank) -> GroupMember {
    let mut m = GroupMember::new(config(Algorithm::Chain, n, rank)).unwrap();
    actions(&mut m);
    m
}

#[test]
fn first_block_from_the_wrong_peer() {
    let mut m = chain_member(4, 2); // expects its first block from 1
    m.handle_block(3, 8, 4);
    assert_violation(&actions(&mut m), 2, 4, 3);
    assert_inert(&mut m, 1);
}

#[test]
fn later_block_from_the_wrong_peer() {
    let mut m = chain_member(4, 1);
    m.handle_block(0, 12, 4);
    assert!(matches!(
        actions(&mut m)[..],
        [
            Action::BeginMessage { .. },
            Action::PostRecv { from: 0, .. },
            ..
        ]
    ));
    m.handle_block(2, 12, 4);
    assert_violation(&actions(&mut m), 1, 4, 2);
    m.handle_block(0, 12, 4);
    m.handle_block(0, 12, 4);
    assert_eq!(
        m.poll_action(),
        None,
        "the partial message is never delivered"
    );
}

#[test]
fn block_with_the_wrong_length() {
    // First block: 10 bytes in blocks of 4 means a 4-byte first block.
    let mut m = chain_member(3, 1);
    m.handle_block(0, 10, 3);
    assert_violation(&actions(&mut m), 1, 3, 0);

    // Last block: 2 bytes, not 4.
    let mut m = chain_member(3, 2);
    m.handle_block(1, 10, 4);
    m.handle_block(1, 10, 4);
    actions(&mut m);
    m.handle_block(1, 10, 4);
    assert_violation(&actions(&mut m), 2, 3, 1);
    assert_inert(&mut m, 1);
}

#[test]
fn block_with_a_changed_immediate() {
    let mut m = chain_member(3, 2);
    m.handle_block(1, 12, 4);
    actions(&mut m);
    m.handle_block(1, 16, 4);
    assert_violation(&actions(&mut m), 2, 3, 1);
    m.handle_block(1, 12, 4);
    assert_eq!(
        m.poll_action(),
        None,
        "the partial message is never delivered"
    );
}

#[test]
fn more_ready_for_blocks_than_the_window() {
    let mut root = chain_member(3, 0);
    for _ in 0..READY_WINDOW {
        root.handle_control(1, Control::ReadyForBlock);
        assert_eq!(actions(&mut root), []);
    }
    root.handle_control(1, Control::ReadyForBlock);
    assert_violation(&actions(&mut root), 0, 3, 1);

    // Also mid-message: a block sent uses one up.
    let mut root = chain_member(3, 0);
    root.handle_control(1, Control::ReadyForBlock);
    root.submit(8).unwrap();
    assert!(matches!(
        actions(&mut root)[..],
        [Action::SendBlock { to: 1, .. }]
    ));
    for _ in 0..READY_WINDOW {
        root.handle_control(1, Control::ReadyForBlock);
        assert_eq!(
            actions(&mut root),
            [],
            "up to the window, ready-for-blocks wait for blocks to send"
        );
    }
    root.handle_control(1, Control::ReadyForBlock);
    assert_violation(&actions(&mut root), 0, 3, 1);
    root.handle_send_complete(1);
    assert_eq!(
        root.poll_action(),
        None,
        "the send is never reported complete"
    );
}

#[test]
fn ready_for_block_from_a_non_neighbour() {
    let mut root = chain_member(4, 0);
    root.handle_control(2, Control::ReadyForBlock);
    assert_violation(&actions(&mut root), 0, 4, 2);
}

#[test]
fn close_from_a_non_root() {
    let mut m = chain_member(4, 3);
    m.handle_control(2, Control::Close { messages: 0 });
    assert_violation(&actions(&mut m), 3, 4, 2);

    let mut root = chain_member(4, 0);
    root.handle_control(1, Control::Close { messages: 0 });
    assert_violation(&actions(&mut root), 0, 4, 1);
}

#[test]
fn close_ack_before_close() {
    let mut root = chain_member(3, 0);
    root.handle_control(2, Control::CloseAck);
    assert_violation(&actions(&mut root), 0, 3, 2);
}

#[test]
fn closed_before_acknowledging() {
    let mut m = chain_member(3, 2);
    m.handle_control(0, Control::Closed);
    assert_violation(&actions(&mut m), 2, 3, 0);
}

#[test]
fn announced_size_above_the_limit() {
    let mut m = chain_member(3, 1);
    m.handle_block(0, 1001, 4);
    assert_violation(&actions(&mut m), 1, 3, 0);
    assert_inert(&mut m, 0);

    // At the limit is fine.
    let mut m = chain_member(3, 1);
    m.handle_block(0, 1000, 4);
    assert!(matches!(
        actions(&mut m)[..],
        [Action::BeginMessage { size: 1000, .. }, ..]
    ));
}

/// The application closes `m`: it acknowledges the root's close, and
/// does nothing else.
#[track_caller]
fn assert_acknowledges_on_close(m: &mut GroupMember) {
    m.close().unwrap();
    assert_eq!(
        actions(m),
        [Action::SendControl {
            to: 0,
            control: Control::CloseAck
        }]
    );
}

#[test]
fn a_message_beyond_the_close_count() {
    let mut m = chain_member(3, 1);
    m.handle_control(0, Control::Close { messages: 0 });
    assert_eq!(actions(&mut m), [Action::AllDelivered]);
    // The acknowledgement waits for the application's close.
    assert_acknowledges_on_close(&mut m);
    m.handle_block(0, 4, 4);
    assert_violation(&actions(&mut m), 1, 3, 0);
}

#[test]
fn waiting_for_ready_means_a_block_is_held_for_an_unready_target() {
    let mut root = chain_member(3, 0);
    assert!(!root.waiting_for_ready(), "nothing to send yet");
    root.submit(8).unwrap();
    actions(&mut root);
    assert!(
        root.waiting_for_ready(),
        "a block to send, no ready-for-block"
    );
    root.handle_control(1, Control::ReadyForBlock);
    assert!(matches!(
        actions(&mut root)[..],
        [Action::SendBlock { to: 1, .. }]
    ));
    assert!(!root.waiting_for_ready(), "a send is outstanding");
    root.handle_send_complete(1);
    actions(&mut root);
    assert!(root.waiting_for_ready(), "the second block waits again");
}

// ---- the application's close, impossible close counts, progress ---------

#[test]
fn an_impossible_close_count_is_a_violation() {
    let mut m = chain_member(3, 1);
    m.handle_control(0, Control::Close { messages: u64::MAX });
    assert_violation(&actions(&mut m), 1, 3, 0);
    let mut m = chain_member(3, 1);
    m.handle_control(
        0,
        Control::Close {
            messages: crate::MAX_MESSAGES + 1,
        },
    );
    assert_violation(&actions(&mut m), 1, 3, 0);
    // The most is possible.
    let mut m = chain_member(3, 1);
    let messages = crate::MAX_MESSAGES;
    m.handle_control(0, Control::Close { messages });
    assert!(!m.is_finished(), "{:?}", actions(&mut m));
}

#[test]
fn a_receiver_acknowledges_only_after_its_application_took_everything_and_closed() {
    // Chain 0 -> 1 -> 2; member 2 gets two one-block messages.
    let mut m = chain_member(3, 2);
    for _ in 0..2 {
        m.handle_block(1, 4, 4);
    }
    let got = actions(&mut m);
    assert_eq!(
        got.iter()
            .filter(|a| matches!(a, Action::MessageComplete { .. }))
            .count(),
        2,
        "{got:?}"
    );
    m.handle_control(0, Control::Close { messages: 2 });
    assert_eq!(actions(&mut m), [Action::AllDelivered]);
    m.message_consumed();
    let taken = |messages| Action::SendControl {
        to: 0,
        control: Control::Taken { messages },
    };
    assert_eq!(actions(&mut m), [taken(1)], "one message not taken yet");
    m.message_consumed();
    assert_eq!(
        actions(&mut m),
        [taken(2)],
        "taken, but the application has not closed"
    );
    assert_acknowledges_on_close(&mut m);
}

#[test]
fn a_receiver_closing_with_messages_unread_fails_naming_itself() {
    // Delivered but not taken.
    let mut m = chain_member(3, 2);
    m.handle_block(1, 4, 4);
    actions(&mut m);
    m.close().unwrap();
    assert_closed_unread(&actions(&mut m), 2, 3);

    // Taken, closed, then another message comes.
    let mut m = chain_member(3, 2);
    m.handle_block(1, 4, 4);
    m.message_consumed();
    m.close().unwrap();
    actions(&mut m);
    m.handle_block(1, 4, 4);
    assert_closed_unread(&actions(&mut m), 2, 3);

    // Taken, closed, then the close count says there were more.
    let mut m = chain_member(3, 2);
    m.close().unwrap();
    actions(&mut m);
    m.handle_control(0, Control::Close { messages: 1 });
    assert_closed_unread(&actions(&mut m), 2, 3);
}

#[track_caller]
fn assert_closed_unread(actions: &[Action], me: Rank, n: usize) {
    let failed = the_failure(actions);
    assert_eq!(failed.suspect, Some(me), "{actions:?}");
    assert_eq!(failed.kind, FailureKind::ClosedUnread, "{actions:?}");
    let told = actions
        .iter()
        .filter(|a| {
            matches!(
                a,
                Action::SendControl {
                    control: Control::Failed {
                        suspect: Some(s),
                        kind: FailureKind::ClosedUnread,
                        detector,
                    },
                    ..
                } if *s == me && *detector == me
            )
        })
        .count();
    assert_eq!(told, n - 1, "every other member is told: {actions:?}");
    assert!(
        !actions.iter().any(|a| matches!(
            a,
            Action::SendControl {
                control: Control::CloseAck,
                ..
            }
        )),
        "{actions:?}"
    );
}

const T: Duration = Duration::from_secs(10);

fn timed_member(algorithm: Algorithm, n: usize, rank: Rank) -> GroupMember {
    let mut m =
        GroupMember::new(config(algorithm, n, rank).with_progress_timeout(Some(T))).unwrap();
    actions(&mut m);
    m
}

#[track_caller]
fn assert_no_progress(actions: &[Action], suspect: Rank) {
    assert!(
        actions.iter().any(|a| matches!(
            a,
            Action::Failed(f) if f.suspect == Some(suspect) && f.kind == FailureKind::NoProgress
        )),
        "{actions:?}"
    );
    assert!(
        actions.iter().any(|a| matches!(
            a,
            Action::SendControl {
                to,
                control: Control::Failed { kind: FailureKind::NoProgress, .. },
            } if *to == suspect
        )),
        "the stalled member is alive and must be told: {actions:?}"
    );
}

#[test]
fn a_peer_that_stops_consuming_is_named_after_the_progress_timeout() {
    let mut root = timed_member(Algorithm::Chain, 3, 0);
    root.submit(8).unwrap();
    root.handle_timeout(Duration::ZERO);
    assert_eq!(root.poll_timeout(), Some(T));
    root.handle_control(1, Control::ReadyForBlock);
    actions(&mut root);
    root.handle_timeout(T / 2); // progress: the clock restarts
    root.handle_send_complete(1);
    actions(&mut root);
    root.handle_timeout(T / 2 + T / 4);
    assert_eq!(root.waiting_on(), Some((1, 1)));
    root.handle_timeout(T / 2 + T / 4 + T - Duration::from_nanos(1));
    assert_eq!(actions(&mut root), [], "not before the timeout");
    root.handle_timeout(T / 2 + T / 4 + T);
    assert_no_progress(&actions(&mut root), 1);
    assert!(root.is_finished());
    assert_eq!(root.poll_timeout(), None);
}

#[test]
fn a_member_waiting_for_blocks_gives_its_sender_twice_the_timeout() {
    // Member 2 of a chain got the first block of two from member 1.
    let mut m = timed_member(Algorithm::Chain, 3, 2);
    m.handle_block(1, 8, 4);
    actions(&mut m);
    m.handle_timeout(Duration::ZERO);
    m.handle_timeout(T);
    assert_eq!(actions(&mut m), []);
    assert_eq!(m.waiting_on(), Some((1, 2)));
    assert_eq!(m.poll_timeout(), Some(2 * T));
    m.handle_timeout(2 * T);
    assert_no_progress(&actions(&mut m), 1);
}

#[test]
fn an_idle_group_or_one_waiting_on_its_own_application_never_times_out() {
    // The root sends nothing.
    let mut root = timed_member(Algorithm::Chain, 3, 0);
    root.handle_timeout(Duration::ZERO);
    root.handle_timeout(T);
    assert_eq!(root.poll_timeout(), None);
    root.handle_timeout(1000 * T);
    assert!(!root.is_finished());

    // A receiver with everything, whose application has not closed.
    let mut m = timed_member(Algorithm::Chain, 3, 2);
    m.handle_block(1, 4, 4);
    m.handle_control(0, Control::Close { messages: 1 });
    actions(&mut m);
    m.handle_timeout(Duration::ZERO);
    m.handle_timeout(T);
    assert_eq!(m.waiting_on(), None);
    m.handle_timeout(1000 * T);
    assert_eq!(actions(&mut m), []);

    // Once it acknowledged, it waits on the root's verdict (four times).
    m.message_consumed();
    m.close().unwrap();
    actions(&mut m);
    m.handle_timeout(1000 * T);
    assert_eq!(m.waiting_on(), Some((0, 4)));
    m.handle_timeout(1003 * T);
    assert_eq!(actions(&mut m), []);
    m.handle_timeout(1004 * T);
    assert_no_progress(&actions(&mut m), 0);
}

/// A member's topology must describe its group: another size is an error,
/// not a schedule of the wrong group.
#[test]
fn a_topology_of_another_size_is_refused() {
    use crate::schedule::{ScheduleError, Topology};
    let mut c = config(Algorithm::Hybrid, 4, 1);
    c.topology = Some(
        Topology::flat(5)
            .unwrap()
            .with_racks(vec![0, 1, 0, 1, 0])
            .unwrap(),
    );
    assert_eq!(
        GroupMember::new(c).err(),
        Some(ScheduleError::TopologySize {
            topology: 5,
            group_size: 4
        })
    );
    let mut c = config(Algorithm::Hybrid, 4, 1);
    c.topology = Some(
        Topology::flat(4)
            .unwrap()
            .with_racks(vec![0, 1, 0, 1])
            .unwrap(),
    );
    assert!(GroupMember::new(c).is_ok());
}

#[test]
fn after_its_acknowledgement_a_receiver_fails_only_when_cut_off_from_the_root() {
    let acked = || {
        let mut m = chain_member(4, 2);
        m.handle_control(0, Control::Close { messages: 0 });
        actions(&mut m);
        assert_acknowledges_on_close(&mut m);
        m
    };
    // Member 1 fails: the root's verdict still comes (moot here); the
    // root, which may not reach member 1 itself, hears of it.
    let mut m = acked();
    m.handle_peer_failure_cutting_off(Some(1), &[], None);
    assert_eq!(
        actions(&mut m),
        [Action::SendControl {
            to: 0,
            control: Control::Suspect { suspect: 1 }
        }]
    );
    assert!(m.failure().is_none());
    // Member 1 carried the root's signals here: the verdict cannot come.
    let mut m = acked();
    m.handle_peer_failure_cutting_off(Some(1), &[0, 3], Some("it relayed".into()));
    let done = actions(&mut m);
    let failed = the_failure(&done);
    assert_eq!(
        (failed.suspect, failed.kind, failed.detail.as_deref()),
        (Some(1), FailureKind::Unreachable, Some("it relayed"))
    );
    // Cut off from another receiver only: still moot.
    let mut m = acked();
    m.handle_peer_failure_cutting_off(Some(1), &[3], None);
    assert!(m.failure().is_none());
}

#[test]
fn the_root_fails_when_an_acknowledgement_it_waits_for_is_cut_off() {
    let closing = || {
        let mut root = chain_member(4, 0);
        root.close().unwrap();
        actions(&mut root);
        root.handle_control(1, Control::CloseAck);
        root.handle_control(2, Control::CloseAck);
        actions(&mut root);
        root
    };
    // 1 and 2 acknowledged: losing 1, which relayed 2's signals, is moot.
    let mut root = closing();
    root.handle_peer_failure_cutting_off(Some(1), &[2], None);
    assert!(root.failure().is_none());
    // 3 has not: losing 1, through which 3's acknowledgement comes, fails.
    let mut root = closing();
    root.handle_peer_failure_cutting_off(Some(1), &[3], None);
    assert_eq!(root.failure().map(|f| f.suspect), Some(Some(1)));
}

#[test]
fn the_root_takes_a_receivers_suspicion_as_its_own_finding_and_no_one_else_does() {
    let closing = || {
        let mut root = chain_member(4, 0);
        root.close().unwrap();
        actions(&mut root);
        root.handle_control(1, Control::CloseAck);
        actions(&mut root);
        root
    };
    // Member 1 acknowledged: its loss changes nothing.
    let mut root = closing();
    root.handle_control(2, Control::Suspect { suspect: 1 });
    assert!(root.failure().is_none());
    // Member 3 has not: the group fails, naming it, found by the root.
    let mut root = closing();
    root.handle_control(2, Control::Suspect { suspect: 3 });
    let done = actions(&mut root);
    let failed = the_failure(&done);
    assert_eq!(
        (failed.suspect, failed.kind, failed.reported_by),
        (Some(3), FailureKind::Unreachable, None)
    );
    // The root suspected, or a suspicion sent to a receiver: violations.
    let mut root = closing();
    root.handle_control(2, Control::Suspect { suspect: 0 });
    assert_eq!(
        root.failure().map(|f| f.kind),
        Some(FailureKind::ProtocolViolation)
    );
    let mut m = chain_member(4, 2);
    m.handle_control(1, Control::Suspect { suspect: 3 });
    assert_eq!(
        m.failure().map(|f| f.kind),
        Some(FailureKind::ProtocolViolation)
    );
}

#[test]
fn cut_off_from_the_root_a_receiver_fails_with_the_failure_it_heard_of() {
    let mut m = chain_member(4, 2);
    m.handle_control(0, Control::Close { messages: 0 });
    actions(&mut m);
    assert_acknowledges_on_close(&mut m);
    // Member 1 reports member 3 failed: moot, the root's verdict decides.
    let report = Control::Failed {
        suspect: Some(3),
        kind: FailureKind::Stalled { millis: 5 },
        detector: 1,
    };
    m.handle_control(1, report);
    assert!(m.failure().is_none());
    // Member 3 reports member 1 failed: moot too; the first report heard
    // stays the cause.
    let second = Control::Failed {
        suspect: Some(1),
        kind: FailureKind::Unreachable,
        detector: 3,
    };
    m.handle_control(3, second);
    assert!(m.failure().is_none());
    // Then member 1, which carried the root's signals, is gone: the cause
    // is what member 1 found, not member 1.
    m.handle_peer_failure_cutting_off(Some(1), &[0], None);
    let failure = m.failure().expect("failed");
    assert_eq!(
        (failure.suspect, failure.kind, failure.reported_by),
        (Some(3), FailureKind::Stalled { millis: 5 }, Some(1))
    );
    // Losing the root itself, no relay between: the root is the cause.
    let mut m = chain_member(4, 2);
    m.handle_control(0, Control::Close { messages: 0 });
    actions(&mut m);
    assert_acknowledges_on_close(&mut m);
    m.handle_control(1, report);
    m.handle_peer_failure_cutting_off(Some(0), &[], None);
    let failure = m.failure().expect("failed");
    assert_eq!((failure.suspect, failure.reported_by), (Some(0), None));
}

#[test]
fn the_root_sends_its_verdicts_highest_rank_first() {
    let mut root = chain_member(6, 0);
    root.close().unwrap();
    actions(&mut root);
    for from in 1..6 {
        root.handle_control(from, Control::CloseAck);
    }
    let verdicts: Vec<Rank> = actions(&mut root)
        .into_iter()
        .filter_map(|a| match a {
            Action::SendControl {
                to,
                control: Control::Closed,
            } => Some(to),
            _ => None,
        })
        .collect();
    assert_eq!(verdicts, [5, 4, 3, 2, 1]);
}

#[test]
fn a_receiver_that_acknowledged_leaves_quietly_others_tell_everyone() {
    let reports = |actions: &[Action]| {
        let mut to: Vec<Rank> = actions
            .iter()
            .filter_map(|a| match *a {
                Action::SendControl {
                    to,
                    control: Control::Failed { .. },
                } => Some(to),
                _ => None,
            })
            .collect();
        to.sort_unstable();
        to
    };
    let mut m = chain_member(4, 2);
    m.handle_control(0, Control::Close { messages: 0 });
    actions(&mut m);
    assert_acknowledges_on_close(&mut m);
    m.shutdown();
    let got = actions(&mut m);
    assert_eq!(reports(&got), Vec::<Rank>::new(), "{got:?}");
    assert_eq!(
        m.failure().map(|f| f.kind),
        Some(FailureKind::LocalShutdown)
    );
    // Not acknowledged yet: every other member hears it left.
    let mut m = chain_member(4, 2);
    m.shutdown();
    assert_eq!(reports(&actions(&mut m)), [0, 1, 3]);
    // Nor the root, even after its close.
    let mut root = chain_member(4, 0);
    root.close().unwrap();
    actions(&mut root);
    root.shutdown();
    assert_eq!(reports(&actions(&mut root)), [1, 2, 3]);
}

#[test]
fn a_local_failure_names_the_suspect_or_this_member_and_keeps_the_detail() {
    for (suspect, named) in [(None, 2), (Some(1), 1)] {
        let mut m = chain_member(4, 2);
        m.handle_local_failure(
            suspect,
            FailureKind::OutOfMemory { size: 9 },
            Some("no room".into()),
        );
        let failure = m.failure().expect("failed").clone();
        assert_eq!(failure.suspect, Some(named));
        assert_eq!(failure.kind, FailureKind::OutOfMemory { size: 9 });
        assert_eq!(failure.detail.as_deref(), Some("no room"));
    }
}

#[test]
fn after_the_close_count_a_receiver_waits_on_its_first_peer_only_while_asking() {
    // Member 2 of a chain of three: its first blocks come from member 1.
    let receiver = |window| {
        let mut m =
            GroupMember::new(config(Algorithm::Chain, 3, 2).with_receive_window(window)).unwrap();
        actions(&mut m);
        m.handle_block(1, 4, 4);
        actions(&mut m);
        m
    };
    // One message of two here: it waits (twice the timeout) for the next.
    let mut m = receiver(None);
    m.handle_control(0, Control::Close { messages: 2 });
    assert_eq!(m.waiting_on(), Some((1, 2)));
    // Every message here: it waits on its own application.
    let mut m = receiver(None);
    m.handle_control(0, Control::Close { messages: 1 });
    assert_eq!(m.waiting_on(), None);
    // Its window full, it does not ask: it waits on its application too.
    let mut m = receiver(Some(1));
    m.handle_control(0, Control::Close { messages: 2 });
    assert_eq!(m.waiting_on(), None);
    m.message_consumed();
    assert_eq!(m.waiting_on(), Some((1, 2)), "asking again");
}
