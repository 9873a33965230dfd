//! Failure reports: the cause travels with every report and relay, a
//! report naming members outside the group is a violation (never a
//! panic), and a cause seen from outside waits the report grace.

use std::time::Duration;

use super::{actions, config};
use crate::schedule::Algorithm;
use crate::{Action, Control, Failure, FailureKind, GroupMember, Rank};

const T: Duration = Duration::from_secs(10);

/// The reports `actions` send, as (to, control).
fn reports(actions: &[Action]) -> Vec<(Rank, Control)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::SendControl {
                to,
                control: control @ Control::Failed { .. },
            } => Some((*to, *control)),
            _ => None,
        })
        .collect()
}

/// The one `Failed` among `actions`.
#[track_caller]
fn failed(actions: &[Action]) -> Failure {
    let mut failures = actions.iter().filter_map(|a| match a {
        Action::Failed(f) => Some(f.clone()),
        _ => None,
    });
    let first = failures.next().expect("a failure");
    assert_eq!(failures.next(), None, "{actions:?}");
    first
}

#[test]
fn a_member_told_of_a_failure_fails_with_the_detectors_cause_and_relays_it() {
    let kinds = [
        FailureKind::Unreachable,
        FailureKind::ProtocolViolation,
        FailureKind::LocalShutdown,
        FailureKind::ClosedUnread,
        FailureKind::NoProgress,
        FailureKind::OutOfMemory { size: 1 << 40 },
        FailureKind::DigestMismatch { seq: 7 },
        FailureKind::Stalled { millis: 2500 },
        FailureKind::SlowReader { millis: 9000 },
        FailureKind::ReceiveTarget,
    ];
    for kind in kinds {
        // Member 1 of 4 hears from member 3 that member 2 found the failure.
        let mut m = GroupMember::new(config(Algorithm::BinomialPipeline, 4, 1)).unwrap();
        actions(&mut m);
        let report = Control::Failed {
            suspect: Some(0),
            kind,
            detector: 2,
        };
        m.handle_control(3, report);
        let got = actions(&mut m);
        let f = failed(&got);
        assert_eq!(f.suspect, Some(0), "{kind:?}");
        assert_eq!(f.kind, kind);
        assert_eq!(f.reported_by, Some(2), "the detector, not the relay");
        assert_eq!(f.detail, None, "the detail stays with the detector");
        // It tells every other member, as it was told.
        assert_eq!(reports(&got), [(0, report), (2, report), (3, report)]);
    }
}

#[test]
fn the_detector_reports_its_own_cause_and_keeps_the_detail() {
    let mut m = GroupMember::new(config(Algorithm::Chain, 3, 2)).unwrap();
    actions(&mut m);
    // A block nobody asked for, from member 0.
    m.handle_block(0, 4, 4);
    let got = actions(&mut m);
    let f = failed(&got);
    assert_eq!(f.kind, FailureKind::ProtocolViolation);
    assert_eq!(f.reported_by, None);
    assert!(f.detail.is_some(), "{f:?}");
    let report = Control::Failed {
        suspect: Some(0),
        kind: FailureKind::ProtocolViolation,
        detector: 2,
    };
    assert_eq!(reports(&got), [(0, report), (1, report)]);
    assert!(
        f.to_string()
            .starts_with("rank 0 failed (protocol violation: ")
    );
}

#[test]
fn a_report_naming_members_outside_the_group_is_a_violation_by_its_sender() {
    for (rank, closing) in [(1, false), (1, true), (0, false), (0, true)] {
        let bad = [
            (Some(3), 0),
            (Some(usize::MAX), 0),
            (None, 3),
            (Some(0), usize::MAX),
            // This member detected nothing.
            (Some(0), rank),
        ];
        for (suspect, detector) in bad {
            let mut m = GroupMember::new(config(Algorithm::Chain, 3, rank)).unwrap();
            if closing {
                // The close barrier looks the suspect up (the root in its
                // acknowledgements): it must not index out of the group.
                if rank == 0 {
                    m.close().unwrap();
                } else {
                    m.handle_control(0, Control::Close { messages: 0 });
                }
            }
            actions(&mut m);
            m.handle_control(
                2,
                Control::Failed {
                    suspect,
                    kind: FailureKind::Unreachable,
                    detector,
                },
            );
            let f = failed(&actions(&mut m));
            let context = format!("rank {rank} {suspect:?} {detector}: {f:?}");
            assert_eq!(f.suspect, Some(2), "{context}");
            assert_eq!(f.kind, FailureKind::ProtocolViolation, "{context}");
        }
    }
}

const GRACE: Duration = Duration::from_millis(100);

/// The root of a chain of 3 that sent its one block to member 1, which
/// acknowledges nothing more: it waits on member 1, with a report grace.
fn root_waiting_on_1() -> GroupMember {
    let mut root = GroupMember::new(
        config(Algorithm::Chain, 3, 0)
            .with_progress_timeout(Some(T))
            .with_report_grace(GRACE),
    )
    .unwrap();
    root.submit(4).unwrap();
    root.handle_control(1, Control::ReadyForBlock);
    actions(&mut root);
    root.handle_timeout(Duration::ZERO);
    assert_eq!(root.waiting_on(), Some((1, 1)));
    root
}

#[test]
fn no_progress_waits_the_report_grace_after_the_timeout() {
    let mut root = root_waiting_on_1();
    assert_eq!(root.poll_timeout(), Some(T + GRACE));
    root.handle_timeout(T);
    assert_eq!(actions(&mut root), [], "the timeout passed, the grace not");
    root.handle_timeout(T + GRACE);
    let f = failed(&actions(&mut root));
    assert_eq!((f.suspect, f.kind), (Some(1), FailureKind::NoProgress));
}

#[test]
fn a_report_within_the_report_grace_decides_the_cause() {
    let mut root = root_waiting_on_1();
    root.handle_timeout(T + GRACE / 2);
    assert_eq!(actions(&mut root), []);
    // Member 2 says member 1's application closed early.
    root.handle_control(
        2,
        Control::Failed {
            suspect: Some(1),
            kind: FailureKind::ClosedUnread,
            detector: 1,
        },
    );
    let f = failed(&actions(&mut root));
    assert_eq!(f.kind, FailureKind::ClosedUnread);
    assert_eq!(f.reported_by, Some(1));
    root.handle_timeout(T + GRACE);
    assert_eq!(actions(&mut root), [], "failed once");
}

#[test]
fn failure_kinds_have_stable_wire_codes_that_read_back() {
    let kinds = [
        (FailureKind::Unreachable, (0, 0)),
        (FailureKind::ProtocolViolation, (1, 0)),
        (FailureKind::LocalShutdown, (2, 0)),
        (FailureKind::ClosedUnread, (3, 0)),
        (FailureKind::NoProgress, (4, 0)),
        (FailureKind::OutOfMemory { size: 77 }, (5, 77)),
        (FailureKind::DigestMismatch { seq: 5 }, (6, 5)),
        (FailureKind::Stalled { millis: 1500 }, (7, 1500)),
        (FailureKind::SlowReader { millis: 9 }, (8, 9)),
        (FailureKind::ReceiveTarget, (9, 0)),
    ];
    for (kind, code) in kinds {
        assert_eq!(kind.to_code(), code, "{kind:?}");
        assert_eq!(FailureKind::from_code(code.0, code.1), Some(kind));
        // A number on a kind without one is not its canonical form.
        if code.1 == 0 && ![5, 6, 7, 8].contains(&code.0) {
            assert_eq!(FailureKind::from_code(code.0, 1), None, "{kind:?}");
        }
        let outside = matches!(kind, FailureKind::Unreachable | FailureKind::NoProgress);
        assert_eq!(kind.is_seen_from_outside(), outside, "{kind:?}");
    }
    assert_eq!(FailureKind::from_code(10, 0), None);
    assert_eq!(FailureKind::from_code(u8::MAX, 0), None);
}
