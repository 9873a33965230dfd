//! The protocol core's storage additions, member by member: each
//! receiver's count of messages its application took and persisted, the
//! root's per-message delivery and persistence at every member, the slow-reader timeout, and the
//! release of blocks a member is done with; batches; and the inputs the
//! core counts as progress or refuses. (The whole-group properties in
//! `cluster` check the same under random orders of events.)

use std::time::Duration;

use crate::schedule::{Algorithm, BlockSize};
use crate::{
    Action, Control, Failure, FailureKind, GroupMember, MemberConfig, Rank, block_count, block_len,
};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

const BLOCK: usize = 4;

fn config(algorithm: Algorithm, n: usize, rank: Rank) -> MemberConfig {
    MemberConfig::new(algorithm, n, rank, BlockSize::Fixed(BLOCK))
        .with_max_message_size(1 << 20)
        .with_announce(crate::Announce::OneSender)
}

fn actions(m: &mut GroupMember) -> Vec<Action> {
    std::iter::from_fn(|| m.poll_action()).collect()
}

fn failure(actions: &[Action]) -> Option<&Failure> {
    actions.iter().find_map(|a| match a {
        Action::Failed(f) => Some(f),
        _ => None,
    })
}

fn delivered(actions: &[Action]) -> Vec<u64> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::MessageDelivered { seq } => Some(*seq),
            _ => None,
        })
        .collect()
}

/// A root of a chain of `n` whose messages of one block each are all
/// locally complete.
fn root_with_sent(n: usize, messages: u64) -> GroupMember {
    let mut root = GroupMember::new(config(Algorithm::Chain, n, 0)).unwrap();
    for _ in 0..messages {
        root.submit(BLOCK as u64).unwrap();
        root.handle_control(1, Control::ReadyForBlock);
        root.handle_send_complete(1);
    }
    let got = actions(&mut root);
    let complete = got
        .iter()
        .filter(|a| matches!(a, Action::MessageComplete { .. }))
        .count();
    assert_eq!(complete as u64, messages, "{got:?}");
    assert_eq!(
        delivered(&got),
        Vec::<u64>::new(),
        "nobody took anything yet"
    );
    root
}

#[test]
fn a_message_is_delivered_once_every_receiver_took_it_in_order() {
    let mut root = root_with_sent(3, 3);
    root.handle_control(1, Control::Taken { messages: 2 });
    assert_eq!(
        delivered(&actions(&mut root)),
        Vec::<u64>::new(),
        "2 took none"
    );
    root.handle_control(2, Control::Taken { messages: 1 });
    assert_eq!(delivered(&actions(&mut root)), [0]);
    root.handle_control(2, Control::Taken { messages: 3 });
    assert_eq!(delivered(&actions(&mut root)), [1], "1 took only two");
    root.handle_control(1, Control::Taken { messages: 3 });
    assert_eq!(delivered(&actions(&mut root)), [2]);
    assert_eq!(root.delivered(), 3);
}

#[test]
fn a_message_taken_before_the_roots_send_completed_is_delivered_after() {
    let mut root = GroupMember::new(config(Algorithm::Chain, 2, 0)).unwrap();
    root.submit(BLOCK as u64).unwrap();
    root.handle_control(1, Control::ReadyForBlock);
    root.handle_control(1, Control::Taken { messages: 1 });
    assert_eq!(delivered(&actions(&mut root)), Vec::<u64>::new());
    root.handle_send_complete(1);
    let got = actions(&mut root);
    let complete = got
        .iter()
        .position(|a| *a == Action::MessageComplete { seq: 0 });
    let done = got
        .iter()
        .position(|a| *a == Action::MessageDelivered { seq: 0 });
    assert!(complete.is_some() && complete < done, "{got:?}");
}

#[test]
fn bad_taken_counts_are_protocol_violations_by_their_sender() {
    for (before, bad) in [(0, 0), (1, 1), (2, 1), (0, 4)] {
        let mut root = root_with_sent(3, 3);
        if before > 0 {
            root.handle_control(2, Control::Taken { messages: before });
        }
        actions(&mut root);
        root.handle_control(2, Control::Taken { messages: bad });
        let got = actions(&mut root);
        let f = failure(&got).unwrap_or_else(|| panic!("{before} then {bad}: {got:?}"));
        assert_eq!(f.suspect, Some(2));
        assert_eq!(f.kind, FailureKind::ProtocolViolation);
    }
    // To a receiver.
    let mut m = GroupMember::new(config(Algorithm::Chain, 3, 1)).unwrap();
    m.handle_control(2, Control::Taken { messages: 1 });
    assert_eq!(failure(&actions(&mut m)).map(|f| f.suspect), Some(Some(2)));
}

fn persisted(actions: &[Action]) -> Vec<u64> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::MessagePersisted { seq } => Some(*seq),
            _ => None,
        })
        .collect()
}

#[test]
fn a_message_is_persisted_once_every_receiver_persisted_it_in_order() {
    let mut root = root_with_sent(3, 3);
    for r in [1, 2] {
        root.handle_control(r, Control::Taken { messages: 3 });
    }
    assert_eq!(delivered(&actions(&mut root)), [0, 1, 2]);
    root.handle_control(1, Control::Persisted { messages: 2 });
    assert_eq!(persisted(&actions(&mut root)), Vec::<u64>::new(), "2 none");
    root.handle_control(2, Control::Persisted { messages: 1 });
    assert_eq!(persisted(&actions(&mut root)), [0]);
    root.handle_control(2, Control::Persisted { messages: 3 });
    assert_eq!(persisted(&actions(&mut root)), [1], "1 persisted two");
    root.handle_control(1, Control::Persisted { messages: 3 });
    assert_eq!(persisted(&actions(&mut root)), [2]);
    assert_eq!(root.persisted(), 3);
    assert_eq!(root.delivered(), 3, "persisting takes nothing back");
    // Each member's own count; none for the root or outside the group.
    root.handle_control(2, Control::Persisted { messages: 3 });
    assert_eq!(
        [0, 1, 2, 3].map(|r| root.persisted_by(r)),
        [0, 3, 3, 0],
        "as reported"
    );
    let mut root = root_with_sent(3, 3);
    for r in [1, 2] {
        root.handle_control(r, Control::Taken { messages: 3 });
    }
    root.handle_control(2, Control::Persisted { messages: 2 });
    assert_eq!([0, 1, 2].map(|r| root.persisted_by(r)), [0, 0, 2]);
}

#[test]
fn a_root_alone_has_each_message_persisted_once_sent() {
    let mut root = GroupMember::new(config(Algorithm::Chain, 1, 0)).unwrap();
    root.submit(BLOCK as u64).unwrap();
    let got = actions(&mut root);
    assert_eq!(persisted(&got), [0], "{got:?}");
    assert_eq!(delivered(&got), [0], "{got:?}");
}

#[test]
fn bad_persisted_counts_are_protocol_violations_by_their_sender() {
    // (taken, persisted before, the bad count): not counting up, above
    // what the member took.
    for (taken, before, bad) in [(3, 0, 0), (3, 2, 2), (3, 2, 1), (2, 0, 3), (0, 0, 1)] {
        let mut root = root_with_sent(3, 3);
        if taken > 0 {
            root.handle_control(2, Control::Taken { messages: taken });
        }
        if before > 0 {
            root.handle_control(2, Control::Persisted { messages: before });
        }
        let got = actions(&mut root);
        assert!(failure(&got).is_none(), "{got:?}");
        root.handle_control(2, Control::Persisted { messages: bad });
        let got = actions(&mut root);
        let f = failure(&got).unwrap_or_else(|| panic!("{taken}, {before} then {bad}: {got:?}"));
        assert_eq!(f.suspect, Some(2));
        assert_eq!(f.kind, FailureKind::ProtocolViolation);
    }
    // To a receiver.
    let mut m = GroupMember::new(config(Algorithm::Chain, 3, 1)).unwrap();
    m.handle_control(2, Control::Persisted { messages: 1 });
    assert_eq!(failure(&actions(&mut m)).map(|f| f.suspect), Some(Some(2)));
}

#[test]
fn a_receiver_reports_what_its_application_persisted_up_to_its_close() {
    let reports = |m: &mut GroupMember| -> Vec<(Rank, u64)> {
        actions(m)
            .into_iter()
            .filter_map(|a| match a {
                Action::SendControl {
                    to,
                    control: Control::Persisted { messages },
                } => Some((to, messages)),
                _ => None,
            })
            .collect()
    };
    let mut m = receiver_with(3, None);
    assert!(!m.application_persisted(1), "nothing taken yet");
    m.message_consumed();
    m.message_consumed();
    assert!(!m.application_persisted(3), "two taken");
    assert!(m.application_persisted(1));
    assert!(!m.application_persisted(1), "not counting up");
    assert!(m.application_persisted(2));
    assert_eq!(reports(&mut m), [(0, 1), (0, 2)]);
    // Once the close is acknowledged, the root has heard the last.
    m.handle_control(0, Control::Close { messages: 3 });
    m.message_consumed();
    m.close().unwrap();
    assert!(m.application_persisted(3));
    assert_eq!(reports(&mut m), [], "after the close acknowledgement");
    // The root persists nothing for the others.
    let mut root = root_with_sent(2, 1);
    assert!(!root.application_persisted(1));
    assert!(actions(&mut root).is_empty());
}

/// Member 2 of a chain of 3 with `messages` one-block messages delivered.
fn receiver_with(messages: u64, slow_reader: Option<Duration>) -> GroupMember {
    let mut m =
        GroupMember::new(config(Algorithm::Chain, 3, 2).with_slow_reader_timeout(slow_reader))
            .unwrap();
    for _ in 0..messages {
        m.handle_block(1, BLOCK as u64, BLOCK);
    }
    actions(&mut m);
    m
}

#[test]
fn a_receiver_reports_each_take_to_the_root() {
    let mut m = receiver_with(2, None);
    m.message_consumed();
    m.message_consumed();
    let taken: Vec<_> = actions(&mut m)
        .into_iter()
        .filter_map(|a| match a {
            Action::SendControl {
                to,
                control: Control::Taken { messages },
            } => Some((to, messages)),
            _ => None,
        })
        .collect();
    assert_eq!(taken, [(0, 1), (0, 2)]);
}

#[test]
fn a_slow_reader_fails_the_group_naming_itself() {
    const T: Duration = Duration::from_secs(5);
    let mut m = receiver_with(2, Some(T));
    let t0 = Duration::from_secs(100);
    m.handle_timeout(t0);
    assert_eq!(m.poll_timeout(), Some(t0 + T));
    m.handle_timeout(t0 + T - Duration::from_millis(1));
    assert!(!m.is_finished());
    // Taking one restarts the clock for the next.
    m.message_consumed();
    m.handle_timeout(t0 + T - Duration::from_millis(1));
    m.handle_timeout(t0 + T + Duration::from_secs(1));
    assert!(!m.is_finished(), "the second message waited less than T");
    m.handle_timeout(t0 + 2 * T);
    let got = actions(&mut m);
    let f = failure(&got).expect("failed");
    assert_eq!(f.suspect, Some(2));
    assert!(
        matches!(f.kind, FailureKind::SlowReader { millis } if millis >= 5000),
        "{f:?}"
    );
    // Everyone else hears of it, naming the reader.
    let told: Vec<Rank> = got
        .iter()
        .filter_map(|a| match a {
            Action::SendControl {
                to,
                control:
                    Control::Failed {
                        suspect: Some(2),
                        kind: FailureKind::SlowReader { .. },
                        detector: 2,
                    },
            } => Some(*to),
            _ => None,
        })
        .collect();
    assert_eq!(told, [0, 1]);
}

#[test]
fn the_slow_reader_timeout_is_exact_and_only_a_live_receivers() {
    const T: Duration = Duration::from_secs(5);
    let t0 = Duration::from_secs(100);
    let mut m = receiver_with(1, Some(T));
    m.handle_timeout(t0);
    m.handle_timeout(t0 + T - Duration::from_nanos(1));
    assert!(!m.is_finished());
    m.handle_timeout(t0 + T);
    assert!(m.is_finished(), "at the timeout exactly");
    // A receiver that failed otherwise is not failed again, nor counted.
    let mut m = receiver_with(1, Some(T));
    m.handle_timeout(t0);
    m.handle_peer_failure(Some(1));
    actions(&mut m);
    m.handle_timeout(t0 + 2 * T);
    assert_eq!(m.failure().map(|f| f.kind), Some(FailureKind::Unreachable));
    assert_eq!(m.poll_timeout(), None);
    // The root has no reader.
    let tuned = config(Algorithm::Chain, 2, 0).with_slow_reader_timeout(Some(T));
    let mut root = GroupMember::new(tuned).unwrap();
    root.submit(BLOCK as u64).unwrap();
    root.handle_control(1, Control::ReadyForBlock);
    root.handle_send_complete(1);
    assert_eq!(root.completed(), 1);
    root.handle_timeout(t0);
    root.handle_timeout(t0 + 2 * T);
    assert!(!root.is_finished());
}

#[test]
fn a_reader_that_keeps_up_never_times_out() {
    let mut m = receiver_with(1, Some(Duration::from_secs(1)));
    m.handle_timeout(Duration::ZERO);
    m.message_consumed();
    m.handle_timeout(Duration::from_secs(3600));
    assert!(!m.is_finished());
    assert_eq!(m.poll_timeout(), None);
}

/// Drive one message through a whole group of `n`, delivering every
/// action at once (sends complete immediately, every block arrives), and
/// check each member's releases: every block once, after it is here and
/// after the completion of its last send.
fn check_releases(algorithm: Algorithm, n: usize, size: u64) {
    let mut members: Vec<GroupMember> = (0..n)
        .map(|r| GroupMember::new(config(algorithm, n, r)).unwrap())
        .collect();
    members[0].submit(size).unwrap();
    let blocks = block_count(size, BLOCK);
    // Per member: blocks here, sends in flight (to, offset), released.
    let mut here = vec![vec![false; blocks]; n];
    here[0] = vec![true; blocks];
    let mut in_flight: Vec<Vec<(Rank, usize)>> = vec![Vec::new(); n];
    let mut released = vec![vec![0u32; blocks]; n];
    let mut queue: std::collections::VecDeque<(Rank, Action)> = Default::default();
    let mut steps = 0;
    loop {
        for (r, m) in members.iter_mut().enumerate() {
            while let Some(a) = m.poll_action() {
                queue.push_back((r, a));
            }
        }
        let Some((me, action)) = queue.pop_front() else {
            break;
        };
        steps += 1;
        assert!(steps < 1_000_000, "no end");
        match action {
            Action::SendBlock {
                to,
                offset,
                len,
                immediate,
                ..
            } => {
                let b = offset / BLOCK;
                assert!(
                    here[me][b] && released[me][b] == 0,
                    "{me} sent block {b} it does not hold"
                );
                in_flight[me].push((to, offset));
                // The receiver's block arrives, then the send completes.
                members[to].handle_block(me, immediate, len);
                here[to][b] = true;
                in_flight[me].retain(|&x| x != (to, offset));
                members[me].handle_send_complete(to);
            }
            Action::SendControl { to, control } => members[to].handle_control(me, control),
            Action::ReleaseBlock { offset, len, .. } => {
                let b = offset / BLOCK;
                assert_eq!(len, block_len(size, BLOCK, b));
                assert!(here[me][b], "{me} released block {b} before it arrived");
                assert!(
                    !in_flight[me].iter().any(|&(_, o)| o == offset),
                    "{me} released block {b} with a send of it in flight"
                );
                released[me][b] += 1;
            }
            Action::Failed(f) => panic!("{algorithm} n={n} size={size}: {f}"),
            _ => {}
        }
    }
    for (r, rel) in released.iter().enumerate() {
        assert!(
            rel.iter().all(|&c| c == 1),
            "{algorithm} n={n} size={size}: member {r} released {rel:?}"
        );
    }
}

proptest! {

    #![proptest_config(ProptestConfig { failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))), ..ProptestConfig::default() })]

    #[test]
    fn every_member_releases_every_block_once_after_its_sends(
        algorithm in prop::sample::select(Algorithm::ALL.to_vec()),
        n in 1usize..9,
        size in 0u64..200,
    ) {
        check_releases(algorithm, n, size);
    }
}

#[test]
fn a_batch_travels_flagged_and_begins_as_a_batch_at_every_receiver() {
    use crate::{BATCH_FLAG, MemberError};
    let batches = |rank| config(Algorithm::Chain, 3, rank).with_max_batch(Some(16));
    // Without batches, or above the most, a batch is refused at the root.
    let mut plain = GroupMember::new(config(Algorithm::Chain, 3, 0)).unwrap();
    assert_eq!(plain.submit_batch(10), Err(MemberError::NoBatches));
    // The root of a chain of three: a batch's blocks carry the flag, a
    // plain message's do not.
    let mut root = GroupMember::new(batches(0)).unwrap();
    actions(&mut root);
    assert_eq!(
        root.submit_batch(17),
        Err(MemberError::TooLarge { size: 17, max: 16 })
    );
    for _ in 0..2 {
        root.handle_control(1, Control::ReadyForBlock);
    }
    assert_eq!(root.submit_batch(16), Ok(0));
    assert_eq!(root.submit(10), Ok(1));
    let mut immediates = Vec::new();
    for _ in 0..10 {
        for a in actions(&mut root) {
            if let Action::SendBlock { immediate, seq, .. } = a {
                immediates.push((seq, immediate));
                root.handle_send_complete(1);
                root.handle_control(1, Control::ReadyForBlock);
            }
        }
    }
    immediates.dedup_by_key(|&mut (seq, _)| seq);
    assert_eq!(immediates, [(0, 16 | BATCH_FLAG), (1, 10)]);
    // A receiver: the flag makes the message a batch of the flagless size,
    // and it forwards the flag.
    let mut m = GroupMember::new(batches(1)).unwrap();
    actions(&mut m);
    m.handle_control(2, Control::ReadyForBlock);
    m.handle_block(0, 16 | BATCH_FLAG, BLOCK);
    let got = actions(&mut m);
    let begun = got.iter().find_map(|a| match *a {
        Action::BeginMessage { size, batch, .. } => Some((size, batch)),
        _ => None,
    });
    assert_eq!(begun, Some((16, true)), "{got:?}");
    let forwarded = got.iter().find_map(|a| match *a {
        Action::SendBlock {
            to: 2, immediate, ..
        } => Some(immediate),
        _ => None,
    });
    assert_eq!(forwarded, Some(16 | BATCH_FLAG), "{got:?}");
    // A batch larger than the group allows, or in a group without
    // batches, is the sender's violation.
    for (tuned, size) in [(batches(1), 17), (config(Algorithm::Chain, 3, 1), 4)] {
        let mut m = GroupMember::new(tuned).unwrap();
        actions(&mut m);
        m.handle_block(0, size | BATCH_FLAG, BLOCK);
        let failure = failure(&actions(&mut m)).cloned().expect("a violation");
        assert_eq!(failure.suspect, Some(0));
        assert_eq!(failure.kind, FailureKind::ProtocolViolation, "{failure:?}");
    }
}

// ---- inputs the core counts, and those it refuses --------------------------

#[test]
fn every_input_is_progress() {
    let timeout = Duration::from_secs(1);
    let tuned = |algorithm, n, rank| {
        config(algorithm, n, rank)
            .with_progress_timeout(Some(timeout))
            .with_report_grace(Duration::ZERO)
    };
    let ms = Duration::from_millis;
    let quiet = |m: &mut GroupMember, at: &str| {
        assert_eq!(failure(&actions(m)), None, "{at}");
        assert!(m.failure().is_none(), "{at}");
    };
    // The root of two: its application's send, then ready-for-blocks and
    // send completions 600 ms apart (each alone, and both at once), each
    // looked at 599 ms later: a timeout of 1 s never passes.
    let mut root = GroupMember::new(tuned(Algorithm::Chain, 2, 0)).unwrap();
    root.handle_timeout(ms(0));
    let mut now = 900;
    root.submit(400).unwrap();
    root.handle_timeout(ms(now));
    root.handle_timeout(ms(now + 599));
    quiet(&mut root, "after the send");
    for round in 0..20 {
        now += 600;
        if round % 3 == 2 {
            root.handle_control(1, Control::ReadyForBlock);
            root.handle_send_complete(1);
        } else if round % 3 == 0 {
            root.handle_control(1, Control::ReadyForBlock);
        } else {
            root.handle_send_complete(1);
        }
        root.handle_timeout(ms(now));
        root.handle_timeout(ms(now + 599));
        quiet(&mut root, &format!("round {round}"));
    }
    // It waits on member 1's ready-for-block: without one, it fails.
    root.handle_timeout(ms(now + 1000));
    assert_eq!(root.failure().map(|f| f.suspect), Some(Some(1)));
    // The last of a chain of three, its blocks 1.5 s apart (it waits twice
    // the timeout for a block).
    let mut last = GroupMember::new(tuned(Algorithm::Chain, 3, 2)).unwrap();
    actions(&mut last);
    last.handle_timeout(ms(0));
    for block in 0..10 {
        let now = 1500 * (block + 1);
        last.handle_block(1, 400, BLOCK);
        last.handle_timeout(ms(now));
        last.handle_timeout(ms(now + 1499));
        quiet(&mut last, &format!("block {block}"));
    }
}

#[test]
fn control_from_itself_or_outside_the_group_is_ignored() {
    let mut m = GroupMember::new(config(Algorithm::Chain, 3, 1)).unwrap();
    actions(&mut m);
    for from in [1, 3, 7] {
        m.handle_control(from, Control::ReadyForBlock);
        m.handle_control(from, Control::Close { messages: 0 });
    }
    assert_eq!(actions(&mut m), []);
    assert!(!m.is_finished());
}

#[test]
fn a_send_completion_not_outstanding_is_the_peers_violation() {
    // The root of a binomial tree of four sends to 1, then 2.
    let mut root = GroupMember::new(config(Algorithm::BinomialTree, 4, 0)).unwrap();
    actions(&mut root);
    root.handle_control(2, Control::ReadyForBlock);
    root.handle_control(1, Control::ReadyForBlock);
    root.submit(4).unwrap();
    let sent: Vec<Rank> = actions(&mut root)
        .iter()
        .filter_map(|a| match *a {
            Action::SendBlock { to, .. } => Some(to),
            _ => None,
        })
        .collect();
    assert_eq!(sent.len(), 1, "one send at a time");
    let other = if sent[0] == 1 { 2 } else { 1 };
    root.handle_send_complete(other);
    let failed = failure(&actions(&mut root)).cloned().expect("a violation");
    assert_eq!(failed.suspect, Some(other));
    assert_eq!(failed.kind, FailureKind::ProtocolViolation);
    // And with nothing sent at all.
    let mut idle = GroupMember::new(config(Algorithm::Chain, 3, 1)).unwrap();
    actions(&mut idle);
    idle.handle_send_complete(2);
    assert_eq!(
        failure(&actions(&mut idle)).map(|f| f.suspect),
        Some(Some(2))
    );
}

#[test]
fn no_message_reaches_the_batch_flag() {
    use crate::{BATCH_FLAG, MemberError};
    let root =
        GroupMember::new(config(Algorithm::Chain, 2, 0).with_max_message_size(u64::MAX)).unwrap();
    let most = BATCH_FLAG - 1;
    assert_eq!(root.check_submit(most), Ok(()));
    assert_eq!(
        root.check_submit(BATCH_FLAG),
        Err(MemberError::TooLarge {
            size: BATCH_FLAG,
            max: most
        })
    );
}

#[test]
fn the_receive_window_holds_the_next_first_block_until_the_application_takes_one() {
    let armed = |actions: &[Action]| {
        actions
            .iter()
            .filter(|a| matches!(a, Action::PostFirstBlockRecv { from: 0 }))
            .count()
    };
    for window in 1..=3u64 {
        // The receiver of two, one-block messages.
        let tuned = config(Algorithm::Chain, 2, 1).with_receive_window(Some(window));
        let mut m = GroupMember::new(tuned).unwrap();
        assert_eq!(armed(&actions(&mut m)), 1, "window {window}: armed at once");
        for seq in 1..=window {
            m.handle_block(0, 4, BLOCK);
            let got = actions(&mut m);
            // After `seq` messages not taken, the next is asked for only
            // while the window has room.
            let room = usize::from(seq < window);
            assert_eq!(armed(&got), room, "window {window}, message {seq}: {got:?}");
        }
        // The application takes one: room again.
        m.message_consumed();
        assert_eq!(armed(&actions(&mut m)), 1, "window {window}: room again");
    }
}

#[test]
fn the_application_takes_each_delivered_message_once_and_nothing_after_a_failure() {
    // The receiver of two.
    let mut m = GroupMember::new(config(Algorithm::Chain, 2, 1)).unwrap();
    actions(&mut m);
    m.message_consumed();
    assert_eq!(m.consumed(), 0, "nothing delivered yet");
    m.handle_block(0, 4, BLOCK);
    actions(&mut m);
    for _ in 0..3 {
        m.message_consumed();
    }
    assert_eq!(m.consumed(), 1, "never more than delivered");
    m.handle_block(0, 4, BLOCK);
    actions(&mut m);
    // Failed with a message not taken yet: taking it tells the root
    // nothing and asks for nothing more.
    m.handle_peer_failure(Some(0));
    actions(&mut m);
    m.message_consumed();
    assert_eq!(m.consumed(), 2);
    assert_eq!(actions(&mut m), []);
}

#[test]
fn the_applications_close_and_takes_are_progress() {
    let timeout = Duration::from_secs(1);
    let ms = Duration::from_millis;
    let tuned = |rank| {
        config(Algorithm::Chain, 2, rank)
            .with_progress_timeout(Some(timeout))
            .with_report_grace(Duration::ZERO)
    };
    // The root closes at 900 ms; then it waits on member 1's
    // acknowledgement, for the timeout from the close.
    let mut root = GroupMember::new(tuned(0)).unwrap();
    root.handle_timeout(ms(0));
    root.close().unwrap();
    root.handle_timeout(ms(900));
    root.handle_timeout(ms(1800));
    assert!(root.failure().is_none(), "the close is progress");
    root.handle_timeout(ms(1900));
    assert_eq!(root.failure().map(|f| f.suspect), Some(Some(1)));
    // A receiver mid-message (it waits twice the timeout for a block)
    // whose application takes the previous message at 1.5 s.
    let mut m = GroupMember::new(tuned(1)).unwrap();
    actions(&mut m);
    m.handle_block(0, 4, BLOCK);
    m.handle_block(0, 8, BLOCK);
    actions(&mut m);
    m.handle_timeout(ms(0));
    m.message_consumed();
    m.handle_timeout(ms(1500));
    m.handle_timeout(ms(3400));
    assert!(m.failure().is_none(), "the take is progress");
    m.handle_timeout(ms(3500));
    assert_eq!(m.failure().map(|f| f.suspect), Some(Some(0)));
}
