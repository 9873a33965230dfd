//! The group-creation rendezvous (`Rendezvous`) under the
//! deterministic whole-group harness (`harness`): members that
//! create at random times, signals that arrive before the group exists,
//! mismatches, members that never come or come too late, crashes during the
//! rendezvous; and the machine alone.

use super::harness::{Cluster, Crash, CreateAt, Creation, LONG_TIMEOUT, Notify, Scenario};
use crate::rendezvous::MAX_EARLY;
use crate::schedule::Algorithm;
use crate::{
    Control, CreateFailure, FailureKind, GroupSetting, GroupSummary, Mismatch, Rank, Rendezvous,
    RendezvousAction, SettingsFingerprint,
};
use crate::{GroupId, NodeId};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

/// A run whose nodes create the group before any event or, where `later`
/// says so, at a random point of the run.
#[derive(Clone, Debug)]
struct LateScenario {
    run: Scenario,
    later: Vec<bool>,
}

prop_compose! {
    /// A group of at least `min_n` members, most of them creating late; the
    /// root's application acts as soon as it has the group, or at random
    /// points after.
    fn scenario(min_n: usize)(
        algorithm in prop::sample::select(&Algorithm::ALL[..]),
        n in prop_oneof![3 => min_n..=6usize, 1 => min_n..=16usize],
    )(
        later in prop::collection::vec(prop::bool::weighted(0.7), n),
        slow in prop::option::weighted(0.3, 0..n),
        block_size in 1usize..=8,
        sizes in prop::collection::vec(0u64..=40, 0..=4),
        close in prop::bool::weighted(0.8),
        upfront in 0usize..=5,
        seed in any::<u64>(),
        algorithm in Just(algorithm),
        n in Just(n),
    ) -> LateScenario {
        let run = Scenario {
            algorithm, n, block_size, auto_min: None, racks: Vec::new(), slow_members: Vec::new(),
            sizes, close, upfront, slow, seed,
        };
        LateScenario { run, later }
    }
}

impl LateScenario {
    fn creation(&self) -> Creation {
        Creation {
            at: self
                .later
                .iter()
                .map(|&l| {
                    if l {
                        CreateAt::Later
                    } else {
                        CreateAt::Upfront
                    }
                })
                .collect(),
            odd: None,
            timeout: LONG_TIMEOUT,
        }
    }

    fn build(&self, creation: &Creation) -> Cluster {
        self.run.build(creation)
    }
}

fn nodes(ranks: impl IntoIterator<Item = Rank>) -> Vec<NodeId> {
    ranks.into_iter().map(|r| NodeId(r as u32)).collect()
}

/// Members create at random times, so a node often gets a peer's `Join`,
/// and even its ready-for-block, before it created the group: every
/// creation completes, and every member gets every message, in order,
/// byte-exact, and closes iff the root closed.
fn check_late_joins(s: &LateScenario) {
    let mut cluster = s.build(&s.creation());
    cluster.run(cluster.event_bound());
    cluster.assert_quiescent();
    cluster.assert_clean_outcome();
    assert_eq!(cluster.submitted(), s.run.sizes.len() as u64);
}

/// One node creates the group with another configuration: every node's
/// creation fails with a mismatch naming another node, whatever the order
/// of creations and signals; nobody completes its creation, delivers or
/// fails otherwise (no protocol violation shows up instead).
fn check_mismatch(s: &LateScenario, odd: Rank) {
    let mut creation = s.creation();
    creation.odd = Some(odd);
    let mut cluster = s.build(&creation);
    cluster.run(cluster.event_bound());
    cluster.assert_quiescent();
    for rank in 0..s.run.n {
        let context = format!("{s:?} odd {odd} rank {rank}");
        match cluster.create_failure(rank) {
            Some(CreateFailure::Mismatch { peer, mismatch }) => {
                assert_ne!(*peer, NodeId(rank as u32), "{context}");
                assert!((peer.0 as usize) < s.run.n, "{context}");
                // The odd node and the others disagree about the block
                // size; the others among themselves only pass its refusal on.
                let want = if rank == odd || peer.0 as usize == odd {
                    Mismatch::Settings(vec![GroupSetting::BlockSize])
                } else {
                    Mismatch::Refused
                };
                assert_eq!(*mismatch, want, "{context}");
            }
            other => panic!("{context}: creation ended with {other:?}"),
        }
        assert!(!cluster.is_ready(rank), "{context}");
        assert!(cluster.failures(rank).is_empty(), "{context}");
        assert_eq!(cluster.completed(rank), 0, "{context}");
        assert_eq!(cluster.closed(rank), 0, "{context}");
    }
    assert_eq!(cluster.submitted(), 0);
}

/// Some members never create the group: every other member's creation
/// times out naming exactly the missing members, in rank order, or fails
/// first (told by the root, which heard from a member that timed out)
/// naming one of them; nobody delivers. If the missing members then create
/// it after all, each of them fails once, told by a member that gave up or
/// of the failure.
fn check_missing(s: &LateScenario, missing: &[bool], come_late: bool) {
    let mut creation = s.creation();
    for (rank, &m) in missing.iter().enumerate() {
        if m {
            creation.at[rank] = CreateAt::Never;
        }
    }
    let want = nodes((0..s.run.n).filter(|&r| missing[r]));
    let mut cluster = s.build(&creation);
    let bound = cluster.event_bound();
    cluster.run(bound);
    cluster.assert_quiescent();
    let creators: Vec<Rank> = (0..s.run.n).filter(|&r| !missing[r]).collect();
    for &rank in &creators {
        let context = format!("{s:?} missing {want:?} rank {rank}");
        let failures = cluster.failures(rank);
        match cluster.create_failure(rank) {
            Some(CreateFailure::TimedOut { missing }) if *missing == want => {
                assert!(failures.is_empty(), "{context}: {failures:?}");
            }
            None => {
                assert_eq!(failures.len(), 1, "{context}: {failures:?}");
                let named = failures[0].suspect.is_some_and(|r| missing[r]);
                assert!(named, "{context}: {failures:?}");
                assert_eq!(failures[0].kind, FailureKind::Unreachable, "{context}");
            }
            other => panic!("{context}: {other:?}"),
        }
        assert!(!cluster.is_ready(rank), "{context}");
        assert_eq!(cluster.completed(rank), 0, "{context}");
    }
    if !come_late {
        return;
    }
    for rank in (0..s.run.n).filter(|&r| missing[r]) {
        cluster.create(rank);
    }
    cluster.run(2 * bound);
    cluster.assert_quiescent();
    for rank in (0..s.run.n).filter(|&r| missing[r]) {
        let context = format!("{s:?} late {want:?} rank {rank}");
        assert!(!cluster.is_ready(rank), "{context}");
        assert_eq!(cluster.create_failure(rank), None, "{context}");
        let failures = cluster.failures(rank);
        assert_eq!(failures.len(), 1, "{context}: {failures:?}");
        let Some(suspect) = failures[0].suspect else {
            panic!("{context}: {failures:?}");
        };
        if creators.contains(&suspect) {
            // The creator that gave up left the group, and said so.
            assert_eq!(failures[0].kind, FailureKind::LocalShutdown, "{context}");
            assert_eq!(failures[0].reported_by, Some(suspect), "{context}");
        } else {
            // Told of the group's failure, which named a missing member.
            assert!(missing[suspect], "{context}: {failures:?}");
            assert_eq!(failures[0].kind, FailureKind::Unreachable, "{context}");
        }
        assert_eq!(cluster.completed(rank), 0, "{context}");
    }
    assert_eq!(cluster.submitted(), 0);
}

/// A member crashes while the group is being created (or soon after):
/// every survivor ends with exactly one terminal event — its group failed
/// naming the crashed member (the failure reaches it before any deadline,
/// whether or not it created the group yet), or the group closed with every
/// message — and nothing hangs.
fn check_crash(s: &LateScenario, victim: Rank, at_event: u64, notify: Notify) {
    let mut cluster = s.build(&s.creation());
    let bound = cluster.event_bound();
    cluster.set_crash(Crash {
        victim,
        at_event,
        notify,
    });
    cluster.run(bound);
    cluster.assert_quiescent();
    cluster.assert_crash_outcome();
}

fn missing_scenario() -> impl Strategy<Value = (LateScenario, Vec<bool>, bool)> {
    scenario(2).prop_flat_map(|s| {
        let n = s.run.n;
        (
            Just(s),
            prop::collection::vec(prop::bool::weighted(0.3), n)
                .prop_filter("some members come, some do not", |m| {
                    m.iter().any(|&x| x) && !m.iter().all(|&x| x)
                }),
            any::<bool>(),
        )
    })
}

fn crash_scenario() -> impl Strategy<Value = (LateScenario, Rank, u64, Notify)> {
    scenario(2).prop_flat_map(|s| {
        let n = s.run.n;
        let events = 3 * (n * n) as u64;
        (
            Just(s),
            0..n,
            0..=events,
            prop_oneof![
                Just(Notify::AllSurvivors),
                Just(Notify::LinkPeers),
                Just(Notify::OneSurvivor),
            ],
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))), ..ProptestConfig::with_cases(3000) })]

    #[test]
    fn members_creating_at_random_times_deliver_everything(s in scenario(1)) {
        check_late_joins(&s);
    }

    #[test]
    fn a_mismatch_fails_every_creator(
        (s, odd) in scenario(2).prop_flat_map(|s| { let n = s.run.n; (Just(s), 0..n) })
    ) {
        check_mismatch(&s, odd);
    }

    #[test]
    fn members_that_never_come_time_the_others_out(
        (s, missing, come_late) in missing_scenario()
    ) {
        check_missing(&s, &missing, come_late);
    }

    #[test]
    fn a_crash_during_the_rendezvous_fails_every_survivor_once(
        (s, victim, at_event, notify) in crash_scenario()
    ) {
        check_crash(&s, victim, at_event, notify);
    }
}

/// The late-join property does exercise early signals: over a few seeds,
/// `Join`s and control messages (ready-for-blocks) reach nodes that have
/// not created the group yet.
#[test]
fn early_joins_and_early_ready_for_blocks_happen() {
    let (mut joins, mut controls) = (0, 0);
    for seed in 0..50 {
        let s = LateScenario {
            run: Scenario {
                algorithm: Algorithm::BinomialPipeline,
                n: 5,
                block_size: 4,
                auto_min: None,
                racks: Vec::new(),
                slow_members: Vec::new(),
                sizes: vec![17, 3],
                close: true,
                upfront: 3,
                slow: None,
                seed,
            },
            later: vec![true; 5],
        };
        let mut cluster = s.build(&s.creation());
        cluster.run(cluster.event_bound());
        cluster.assert_quiescent();
        cluster.assert_clean_outcome();
        joins += cluster.early_joins();
        controls += cluster.early_controls();
    }
    assert!(joins > 0, "no Join arrived before its group was created");
    assert!(
        controls > 0,
        "no control arrived before its group was created"
    );
}

// ---- the machine alone ----------------------------------------------------

const G: GroupId = GroupId(7);

/// A group's summary with digest `digest` (and a fingerprint that says as
/// much).
fn summary(digest: u128) -> GroupSummary {
    GroupSummary {
        digest,
        fingerprint: SettingsFingerprint(digest),
    }
}

fn actions(r: &mut Rendezvous<u64>) -> Vec<RendezvousAction> {
    std::iter::from_fn(|| r.poll_action()).collect()
}

#[test]
fn joins_go_out_first_and_the_last_join_completes_the_creation() {
    let mut r = Rendezvous::new(NodeId(1));
    r.create(G, nodes([0, 1, 2]), summary(42), 100);
    assert_eq!(
        actions(&mut r),
        [
            RendezvousAction::SendJoin {
                group: G,
                to: NodeId(0),
                summary: summary(42)
            },
            RendezvousAction::SendJoin {
                group: G,
                to: NodeId(2),
                summary: summary(42)
            },
        ]
    );
    assert_eq!(r.poll_timeout(), Some(100));
    r.handle_join(NodeId(2), G, 42);
    assert_eq!(actions(&mut r), []);
    r.handle_join(NodeId(0), G, 42);
    assert_eq!(actions(&mut r), [RendezvousAction::Ready { group: G }]);
    assert_eq!(r.poll_timeout(), None);
    assert!(r.is_used(G));
}

#[test]
fn early_signals_are_handed_over_in_order_after_the_joins_go_out() {
    let mut r = Rendezvous::new(NodeId(0));
    r.handle_join(NodeId(1), G, 42);
    r.handle_early_control(NodeId(1), G, Control::ReadyForBlock);
    assert_eq!(actions(&mut r), []);
    r.create(G, nodes([0, 1]), summary(42), 10);
    assert_eq!(
        actions(&mut r),
        [
            RendezvousAction::SendJoin {
                group: G,
                to: NodeId(1),
                summary: summary(42)
            },
            RendezvousAction::DeliverEarly {
                group: G,
                from: NodeId(1),
                control: Control::ReadyForBlock
            },
            RendezvousAction::Ready { group: G },
        ]
    );
}

#[test]
fn the_only_missing_member_hears_that_this_one_gave_up() {
    let mut r = Rendezvous::new(NodeId(2));
    r.create(G, nodes([3, 0, 2]), summary(42), 50);
    actions(&mut r);
    r.handle_join(NodeId(0), G, 42);
    r.handle_timeout(50);
    let to_3: Vec<Control> = actions(&mut r)
        .into_iter()
        .filter_map(|a| match a {
            RendezvousAction::SendControl {
                to: NodeId(3),
                control,
                ..
            } => Some(control),
            _ => None,
        })
        .collect();
    let gave_up = Control::Failed {
        suspect: Some(2),
        kind: FailureKind::LocalShutdown,
        detector: 2,
    };
    assert_eq!(to_3, [gave_up]);
}

#[test]
fn the_timeout_names_the_missing_members_in_rank_order_and_tells_them() {
    let mut r = Rendezvous::new(NodeId(2));
    r.create(G, nodes([3, 0, 2, 1]), summary(42), 50);
    actions(&mut r);
    r.handle_join(NodeId(0), G, 42);
    r.handle_timeout(49);
    assert_eq!(actions(&mut r), []);
    r.handle_timeout(50);
    let failed = Control::Failed {
        suspect: Some(2),
        kind: FailureKind::LocalShutdown,
        detector: 2,
    };
    // Node 0, which joined, hears that the group failed, node 3 (rank 0,
    // the first missing) the cause; so does node 1, missing too. Node 3,
    // missing, hears of node 1 (rank 3), the first other missing member:
    // its `Join` may have been lost on its way through that one.
    let cause = |rank| Control::Failed {
        suspect: Some(rank),
        kind: FailureKind::Unreachable,
        detector: 2,
    };
    let send = |to, control| RendezvousAction::SendControl {
        group: G,
        to: NodeId(to),
        control,
    };
    assert_eq!(
        actions(&mut r),
        [
            send(3, cause(3)),
            send(0, cause(0)),
            send(1, cause(0)),
            RendezvousAction::CreateFailed {
                group: G,
                failure: CreateFailure::TimedOut {
                    missing: nodes([3, 1])
                }
            },
        ]
    );
    // A late Join with the same digest: every member hears the group failed.
    r.handle_join(NodeId(1), G, 42);
    let told: Vec<NodeId> = actions(&mut r)
        .into_iter()
        .map(|a| match a {
            RendezvousAction::SendControl { to, control, .. } if control == failed => to,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(told, nodes([3, 0, 1]));
    // A late Join with another digest is refused.
    r.handle_join(NodeId(3), G, 43);
    assert_eq!(
        actions(&mut r),
        [RendezvousAction::SendJoinRejected {
            group: G,
            to: NodeId(3),
            summary: summary(42)
        }]
    );
}

/// A member whose rendezvous may have completed (it heard from a member
/// this one never did: a link cut between the two) would wait for this one
/// for good, or blame it when it leaves: when this one times out, every
/// member that joined is told that the group failed, the first missing
/// member the cause; the missing ones that this one gave up.
#[test]
fn every_member_that_joined_is_told_of_the_timeout() {
    let mut r = Rendezvous::new(NodeId(2));
    r.create(G, nodes([2, 0, 1, 3]), summary(42), 50);
    actions(&mut r);
    r.handle_join(NodeId(0), G, 42);
    r.handle_join(NodeId(1), G, 42);
    r.handle_timeout(50);
    // Nodes 0 and 1 hear that the group failed, node 3 (rank 3, missing)
    // the cause; node 3 that this member (rank 0) gave up.
    let told: Vec<(NodeId, Control)> = actions(&mut r)
        .into_iter()
        .filter_map(|a| match a {
            RendezvousAction::SendControl { to, control, .. } => Some((to, control)),
            RendezvousAction::CreateFailed { failure, .. } => {
                assert_eq!(
                    failure,
                    CreateFailure::TimedOut {
                        missing: nodes([3])
                    }
                );
                None
            }
            other => panic!("{other:?}"),
        })
        .collect();
    let failed = |suspect, kind| Control::Failed {
        suspect: Some(suspect),
        kind,
        detector: 0,
    };
    assert_eq!(
        told,
        [
            (NodeId(0), failed(3, FailureKind::Unreachable)),
            (NodeId(1), failed(3, FailureKind::Unreachable)),
            (NodeId(3), failed(0, FailureKind::LocalShutdown)),
        ]
    );
}

#[test]
fn a_down_member_gets_no_join() {
    let mut r = Rendezvous::new(NodeId(0));
    r.handle_peer_down(NodeId(1));
    r.create(G, nodes([0, 1, 2]), summary(42), 10);
    assert_eq!(
        actions(&mut r),
        [RendezvousAction::SendJoin {
            group: G,
            to: NodeId(2),
            summary: summary(42)
        }]
    );
}

#[test]
fn early_signals_are_bounded_over_all_groups_and_the_oldest_make_way() {
    let mut r = Rendezvous::new(NodeId(0));
    // Signals for groups 100, 101, 102 that never come here fill the table.
    for i in 0..MAX_EARLY as u64 + 10 {
        r.handle_early_control(NodeId(1), GroupId(100 + i % 3), Control::ReadyForBlock);
    }
    assert!(r.table_len() <= 3 * MAX_EARLY, "{}", r.table_len());
    // A fresh Join for a group created here later is still kept: group
    // 100's signals, the oldest, made way.
    r.handle_join(NodeId(1), GroupId(0), 1);
    r.create(GroupId(0), nodes([0, 1]), summary(1), 10);
    assert_eq!(
        actions(&mut r)
            .into_iter()
            .filter(|a| matches!(a, RendezvousAction::Ready { .. }))
            .count(),
        1,
        "the early Join completes the creation"
    );
    // Group 101's signals are there (it was heard of after group 100).
    r.create(GroupId(101), nodes([0, 1]), summary(1), 10);
    let delivered = actions(&mut r)
        .iter()
        .filter(|a| matches!(a, RendezvousAction::DeliverEarly { .. }))
        .count();
    assert!(delivered > 0);
    r.create(GroupId(100), nodes([0, 1]), summary(1), 10);
    let delivered = actions(&mut r)
        .iter()
        .filter(|a| matches!(a, RendezvousAction::DeliverEarly { .. }))
        .count();
    assert!(
        delivered <= 4,
        "group 100's early signals were dropped: {delivered}"
    );
}

#[test]
fn a_closed_group_completes_its_creation() {
    let mut r = Rendezvous::new(NodeId(1));
    r.create(G, nodes([0, 1, 2]), summary(42), 10);
    actions(&mut r);
    r.handle_join(NodeId(0), G, 42);
    r.handle_group_closed(G);
    assert_eq!(actions(&mut r), [RendezvousAction::Ready { group: G }]);
    assert_eq!(r.poll_timeout(), None);
    // The Join still on its way changes nothing.
    r.handle_join(NodeId(2), G, 42);
    assert_eq!(actions(&mut r), []);
}

#[test]
fn a_members_second_join_of_a_running_group_is_a_new_run_and_refused() {
    let mut r = Rendezvous::new(NodeId(1));
    r.create(G, nodes([0, 1, 2]), summary(42), 10);
    actions(&mut r);
    r.handle_join(NodeId(0), G, 42);
    r.handle_join(NodeId(2), G, 42);
    assert_eq!(actions(&mut r), [RendezvousAction::Ready { group: G }]);
    // Node 2 restarted and makes the group again, the same way: its new
    // run is told the id is in use (it would wait for Joins otherwise).
    r.handle_join(NodeId(2), G, 42);
    assert_eq!(
        actions(&mut r),
        [RendezvousAction::SendIdInUse {
            group: G,
            to: NodeId(2)
        }]
    );
}

// ---- what a mismatch says --------------------------------------------------

/// The fingerprint of a group differing from [`summary`]'s in `settings`
/// (hashes 1 apart in each of their 16-bit fields).
fn differing(digest: u128, settings: &[GroupSetting]) -> SettingsFingerprint {
    let mut fingerprint = digest;
    for setting in settings {
        let i = GroupSetting::ALL.iter().position(|s| s == setting).unwrap();
        fingerprint ^= 1 << (16 * i);
    }
    SettingsFingerprint(fingerprint)
}

/// The one `CreateFailed` among `actions`, and what else was sent.
fn mismatch_of(actions: &[RendezvousAction]) -> (NodeId, Mismatch) {
    let failed: Vec<_> = actions
        .iter()
        .filter_map(|a| match a {
            RendezvousAction::CreateFailed {
                failure: CreateFailure::Mismatch { peer, mismatch },
                ..
            } => Some((*peer, mismatch.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(failed.len(), 1, "{actions:?}");
    failed[0].clone()
}

#[test]
fn a_join_of_another_group_names_the_settings_that_differ() {
    let differ = [GroupSetting::Members, GroupSetting::BlockSize];
    let mut r = Rendezvous::new(NodeId(0));
    r.create(G, nodes([0, 1, 2]), summary(42), 10);
    actions(&mut r);
    r.handle_join_settings(NodeId(1), G, differing(42, &differ));
    r.handle_join(NodeId(1), G, 43);
    let got = actions(&mut r);
    assert_eq!(
        mismatch_of(&got),
        (NodeId(1), Mismatch::Settings(differ.to_vec()))
    );
    // Node 1 is answered, node 2 told: both with this node's summary.
    let rejected: Vec<NodeId> = got
        .iter()
        .filter_map(|a| match a {
            RendezvousAction::SendJoinRejected { to, summary: s, .. } if *s == summary(42) => {
                Some(*to)
            }
            _ => None,
        })
        .collect();
    assert_eq!(rejected, nodes([1, 2]));

    // Without a fingerprint it cannot tell which.
    let mut r = Rendezvous::new(NodeId(0));
    r.create(G, nodes([0, 1]), summary(42), 10);
    r.handle_join(NodeId(1), G, 43);
    assert_eq!(
        mismatch_of(&actions(&mut r)),
        (NodeId(1), Mismatch::Settings(Vec::new()))
    );
}

#[test]
fn early_fingerprints_go_with_their_joins() {
    let mut r = Rendezvous::new(NodeId(0));
    r.handle_join_settings(NodeId(1), G, differing(42, &[GroupSetting::Algorithm]));
    r.handle_join(NodeId(1), G, 43);
    r.create(G, nodes([0, 1]), summary(42), 10);
    let expected = Mismatch::Settings(vec![GroupSetting::Algorithm]);
    assert_eq!(mismatch_of(&actions(&mut r)), (NodeId(1), expected));
}

#[test]
fn a_join_from_a_non_member_is_not_a_member() {
    let mut r = Rendezvous::new(NodeId(0));
    r.create(G, nodes([0, 1]), summary(42), 10);
    let before = r.table_len();
    r.handle_join_settings(NodeId(5), G, SettingsFingerprint(7));
    assert_eq!(
        r.table_len(),
        before,
        "a non-member's fingerprint is not kept"
    );
    r.handle_join(NodeId(5), G, 42);
    assert_eq!(
        mismatch_of(&actions(&mut r)),
        (NodeId(5), Mismatch::NotAMember)
    );
}

#[test]
fn a_refusal_says_whether_the_refuser_disagrees_or_passes_a_refusal_on() {
    // Node 1 created the group as this node did, and refused it because of
    // a third member: nothing to pass on.
    let mut r = Rendezvous::new(NodeId(0));
    r.create(G, nodes([0, 1, 2]), summary(42), 10);
    actions(&mut r);
    r.handle_join_settings(NodeId(1), G, SettingsFingerprint(42));
    r.handle_join_rejected(NodeId(1), G, 42);
    let got = actions(&mut r);
    assert_eq!(mismatch_of(&got), (NodeId(1), Mismatch::Refused));
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        Mismatch::Refused.to_string().contains("another member"),
        "{}",
        Mismatch::Refused
    );

    // Node 1 created it otherwise: the difference, passed on to node 2.
    let mut r = Rendezvous::new(NodeId(0));
    r.create(G, nodes([0, 1, 2]), summary(42), 10);
    actions(&mut r);
    let differ = [GroupSetting::MaxMessageSize];
    r.handle_join_settings(NodeId(1), G, differing(42, &differ));
    r.handle_join_rejected(NodeId(1), G, 43);
    let got = actions(&mut r);
    let expected = Mismatch::Settings(differ.to_vec());
    assert_eq!(mismatch_of(&got), (NodeId(1), expected));
    assert!(got.contains(&RendezvousAction::SendJoinRejected {
        group: G,
        to: NodeId(2),
        summary: summary(42)
    }));
}

#[test]
fn a_join_for_an_id_used_here_is_refused_and_the_joiner_says_so() {
    // Node 0 ran group G, which ended.
    let mut r0 = Rendezvous::new(NodeId(0));
    r0.create(G, nodes([0]), summary(42), 10);
    actions(&mut r0);
    r0.handle_group_ended(G, None);
    // Node 1 creates a group G with it: node 0 refuses the id.
    let mut r1 = Rendezvous::new(NodeId(1));
    r1.create(G, nodes([0, 1]), summary(42), 10);
    actions(&mut r1);
    r0.handle_join(NodeId(1), G, 42);
    assert_eq!(
        actions(&mut r0),
        [RendezvousAction::SendIdInUse {
            group: G,
            to: NodeId(1)
        }]
    );
    r1.handle_id_in_use(NodeId(0), G);
    assert_eq!(
        mismatch_of(&actions(&mut r1)),
        (NodeId(0), Mismatch::IdInUse)
    );
    assert!(Mismatch::IdInUse.to_string().contains("in use"));
    // Too late, or from a stranger: ignored.
    r1.handle_id_in_use(NodeId(0), G);
    let mut r2 = Rendezvous::new(NodeId(2));
    r2.create(G, nodes([2, 0]), summary(42), 10);
    actions(&mut r2);
    r2.handle_id_in_use(NodeId(7), G);
    r2.handle_join(NodeId(0), G, 42);
    assert_eq!(actions(&mut r2), [RendezvousAction::Ready { group: G }]);
    r2.handle_id_in_use(NodeId(0), G);
    assert_eq!(actions(&mut r1), []);
    assert_eq!(actions(&mut r2), []);
    // Node 2's group runs: a Join of another creation with its id (from a
    // member or not) is refused the same way, and the group runs on.
    for joiner in [0, 3] {
        r2.handle_join_settings(NodeId(joiner), G, SettingsFingerprint(1));
        r2.handle_join(NodeId(joiner), G, 43);
        assert_eq!(
            actions(&mut r2),
            [RendezvousAction::SendIdInUse {
                group: G,
                to: NodeId(joiner)
            }]
        );
    }
    assert!(r2.is_used(G) && !r2.is_pending(G));
}

/// The group failed here before every member joined (a member crashed): a
/// member whose `Join` comes after is told of that failure, not refused as
/// reusing the id, and only it is told (the others heard as it happened).
#[test]
fn a_join_after_the_group_failed_in_creation_hears_the_failure() {
    let mut r = Rendezvous::new(NodeId(1));
    r.create(G, nodes([0, 1, 2, 3]), summary(42), 50);
    r.handle_join(NodeId(0), G, 42);
    actions(&mut r);
    let failure = crate::member::Failure::new(Some(3), FailureKind::Unreachable);
    r.handle_group_ended(G, Some(&failure));
    assert_eq!(actions(&mut r), []);
    r.handle_join(NodeId(2), G, 42);
    assert_eq!(
        actions(&mut r),
        [RendezvousAction::SendControl {
            group: G,
            to: NodeId(2),
            control: Control::Failed {
                suspect: Some(3),
                kind: FailureKind::Unreachable,
                detector: 1
            }
        }]
    );
    // Another creation with the id: refused.
    r.handle_join(NodeId(2), G, 43);
    assert!(matches!(
        actions(&mut r)[..],
        [RendezvousAction::SendJoinRejected { .. }]
    ));
}

#[test]
fn the_tables_count_every_entry_and_forget_the_oldest_ended_ids() {
    use crate::rendezvous::{ABANDONED_KEPT, USED_IDS_KEPT};
    const H: GroupId = GroupId(8);
    let mut r = Rendezvous::new(NodeId(0));
    assert_eq!(r.table_len(), 0);
    // A Join and its settings for a group not created yet: one early entry
    // each, counted, listed once in the order of arrival.
    r.handle_join_settings(NodeId(1), H, SettingsFingerprint(42));
    r.handle_join(NodeId(1), H, 42);
    assert_eq!(r.table_len(), 1 + 2 + 1, "early: map, count, order");
    // Created: the group, its id, its deadline, two Joins to send and the
    // replay of what came early (two signals and the end).
    r.create(H, nodes([0, 1, 2]), summary(42), 50);
    assert!(r.is_pending(H));
    assert_eq!(r.table_len(), 3 + 2 + 3);
    actions(&mut r);
    r.handle_join_settings(NodeId(2), H, SettingsFingerprint(42));
    assert_eq!(r.table_len(), 3 + 1, "node 2's fingerprint, heard");
    r.handle_join(NodeId(2), H, 42);
    assert!(!r.is_pending(H));
    assert_eq!(r.table_len(), 3, "the group, its id, its ready");
    assert_eq!(actions(&mut r), [RendezvousAction::Ready { group: H }]);
    r.handle_group_ended(H, None);
    assert_eq!(r.table_len(), 2, "its id, used and ended");
    // Settings, a Join or a refusal for an id used here are not kept.
    r.handle_join_settings(NodeId(1), H, SettingsFingerprint(42));
    r.handle_join_rejected(NodeId(1), H, 42);
    actions(&mut r);
    assert_eq!(r.table_len(), 2);
    // A node down is an entry until it is up again.
    r.handle_peer_down(NodeId(3));
    assert!(r.is_down(NodeId(3)));
    assert_eq!(r.table_len(), 3);
    r.handle_peer_up(NodeId(3));
    assert!(!r.is_down(NodeId(3)));
    // A creation that timed out: its id, used and ended, and its failure
    // kept for late Joins, in order.
    r.create(GroupId(9), nodes([0, 1]), summary(7), 50);
    r.handle_timeout(50);
    actions(&mut r);
    assert_eq!(r.table_len(), 2 + 4);
    // Ids of ended groups (failed creations) are kept up to the most, the
    // oldest forgotten; so are the failed creations.
    for g in 0..USED_IDS_KEPT as u64 {
        r.create(GroupId(1000 + g), nodes([0, 1]), summary(1), 50);
        r.handle_timeout(50);
    }
    actions(&mut r);
    assert!(!r.is_used(H), "the oldest forgotten");
    assert!(r.is_used(GroupId(1000)));
    assert!(r.is_used(GroupId(1000 + USED_IDS_KEPT as u64 - 1)));
    assert!(!r.is_used(GroupId(999)), "never used");
    assert_eq!(r.table_len(), 2 * (USED_IDS_KEPT + ABANDONED_KEPT));
}

#[test]
fn joins_on_their_way_when_the_group_closed_are_taken_once_each() {
    let mut r = Rendezvous::new(NodeId(0));
    r.create(G, nodes([1, 0, 2]), summary(42), 50);
    actions(&mut r);
    // The root closed the group before either Join came here.
    r.handle_group_closed(G);
    assert_eq!(actions(&mut r), [RendezvousAction::Ready { group: G }]);
    r.handle_join(NodeId(2), G, 42);
    r.handle_join(NodeId(1), G, 42);
    assert_eq!(actions(&mut r), [], "both were on their way");
    // A second Join from a member is a new creation with the id in use.
    r.handle_join(NodeId(2), G, 42);
    assert!(!actions(&mut r).is_empty(), "refused");
}

#[test]
fn a_refusal_for_a_group_not_created_yet_is_kept_for_it() {
    let mut r = Rendezvous::new(NodeId(0));
    r.handle_join_rejected(NodeId(1), G, 43);
    assert_eq!(r.table_len(), 3, "kept early");
    r.create(G, nodes([0, 1]), summary(42), 50);
    let got = actions(&mut r);
    assert!(
        got.iter()
            .any(|a| matches!(a, RendezvousAction::CreateFailed { group: G, .. })),
        "{got:?}"
    );
}
