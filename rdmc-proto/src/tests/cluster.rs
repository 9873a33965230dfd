//! Whole-group tests of the sans-IO core under a deterministic cluster
//! harness (`harness`): random event orders, random delays, a
//! slow member, crashes, forged and malformed input.

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

use super::harness::{App, Cluster, Crash, Creation, MISBEHAVING_APPS, Notify, Scenario};
use super::{ALGORITHMS, actions, config};
use crate::schedule::Algorithm;
use crate::{Action, Control, FailureKind, GroupMember, MemberError, Rank, block_count, block_len};

/// Message sizes around the block size: empty, one byte, exact multiples,
/// one more and one less than a multiple, and anything up to 200 bytes.
fn message_size(block_size: usize) -> impl Strategy<Value = u64> {
    let bs = block_size as u64;
    prop_oneof![
        Just(0u64),
        Just(1u64),
        (1u64..=12).prop_map(move |k| k * bs),
        (1u64..=12).prop_map(move |k| k * bs + 1),
        (1u64..=12).prop_map(move |k| k * bs - 1),
        0u64..=200,
    ]
}

fn group_size() -> impl Strategy<Value = usize> {
    prop_oneof![2 => 1usize..=5, 1 => 1usize..=20]
}

/// Racks (none, or up to three interleaved at random) and up to two members
/// the configuration names slow (the binomial pipeline and the hybrid make
/// them leaves; the other algorithms ignore them).
fn topology(n: usize) -> impl Strategy<Value = (Vec<u32>, Vec<usize>)> {
    (
        prop_oneof![
            1 => Just(Vec::new()),
            2 => prop::collection::vec(0u32..3, n),
        ],
        prop_oneof![
            2 => Just(Vec::new()),
            1 => prop::collection::vec(0..n, 1..=2),
        ],
    )
}

fn scenario(algorithms: &'static [Algorithm], min_n: usize) -> impl Strategy<Value = Scenario> {
    (
        prop::sample::select(algorithms),
        group_size().prop_map(move |n| n.max(min_n)),
        1usize..=16,
    )
        .prop_flat_map(|(algorithm, n, block_size)| {
            (
                Just(algorithm),
                Just(n),
                Just(block_size),
                prop::collection::vec(message_size(block_size), 0..=6),
                prop::bool::weighted(0.8),
                0usize..=6,
                prop::option::weighted(0.3, 0..n),
                any::<u64>(),
                topology(n),
            )
        })
        .prop_map(
            |(
                algorithm,
                n,
                block_size,
                sizes,
                close,
                upfront,
                slow,
                seed,
                (racks, slow_members),
            )| {
                Scenario {
                    algorithm,
                    n,
                    block_size,
                    auto_min: None,
                    racks,
                    slow_members,
                    sizes,
                    close,
                    upfront,
                    slow,
                    seed,
                }
            },
        )
}

fn build(s: &Scenario) -> Cluster {
    s.build(&Creation::upfront(s.n))
}

/// Every receiver delivers every message once, in order, byte-exact; the
/// root completes every message in order; `Closed` once everywhere iff the
/// root closed, the root's only after every receiver has everything; no RNR,
/// no overlong send, no failure, no block relayed before it arrived, and the
/// run ends within a bound linear in the number of block transfers.
fn check_clean(s: &Scenario) {
    let mut cluster = build(s);
    let bound = cluster.event_bound();
    cluster.run(bound);
    cluster.assert_quiescent();
    cluster.assert_clean_outcome();
    assert_eq!(cluster.submitted(), s.sizes.len() as u64);
}

/// A crash of one member at some point of an otherwise clean run.
#[derive(Clone, Debug)]
struct CrashScenario {
    run: Scenario,
    victim: Rank,
    /// When, in thousandths of the run's event bound (above ~400 is usually
    /// after the run drained: a crash after everything finished).
    at_permille: u64,
    notify: Notify,
}

fn crash_scenario(algorithms: &'static [Algorithm]) -> impl Strategy<Value = CrashScenario> {
    scenario(algorithms, 2).prop_flat_map(|run| {
        let n = run.n;
        (
            Just(run),
            prop_oneof![1 => Just(0), 3 => 0..n],
            prop_oneof![4 => 0u64..=300, 1 => 0u64..=1200],
            prop_oneof![
                Just(Notify::AllSurvivors),
                Just(Notify::LinkPeers),
                Just(Notify::OneSurvivor),
            ],
        )
            .prop_map(|(run, victim, at_permille, notify)| CrashScenario {
                run,
                victim,
                at_permille,
                notify,
            })
    })
}

/// Every survivor ends with exactly one terminal event: `Failed` naming the
/// crashed member (directly or by relay), or `Closed` if the group closed
/// before the failure reached it; every delivered message is byte-exact and
/// the delivered messages are a prefix in order (both checked as they
/// happen); nothing hangs.
fn check_crash(s: &CrashScenario) {
    let mut cluster = build(&s.run);
    let bound = cluster.event_bound();
    cluster.set_crash(Crash {
        victim: s.victim,
        at_event: bound * s.at_permille / 1000,
        notify: s.notify,
    });
    cluster.run(bound);
    cluster.assert_quiescent();
    cluster.assert_crash_outcome();
}

/// A receiver whose application misbehaves in an otherwise clean run.
#[derive(Clone, Debug)]
struct AppScenario {
    run: Scenario,
    victim: Rank,
    app: App,
}

fn app_scenario(algorithms: &'static [Algorithm]) -> impl Strategy<Value = AppScenario> {
    scenario(algorithms, 2).prop_flat_map(|mut run| {
        run.close = true;
        let (n, m) = (run.n, run.sizes.len() as u64);
        (
            Just(run),
            1..n,
            prop_oneof![
                prop::sample::select(&MISBEHAVING_APPS[..]),
                (0..=m).prop_map(App::ClosesAfter),
            ],
        )
            .prop_map(|(run, victim, app)| AppScenario { run, victim, app })
    })
}

/// "Closed" only if every receiver's application took every message and
/// closed (checked on every `Closed` as it happens, in every run); a
/// receiver's application that never closes, leaves or dies after its
/// stream ended, or closes before it took every message, fails the group
/// on every member, naming it — the root's close never succeeds.
fn check_app(s: &AppScenario) {
    let mut cluster = build(&s.run);
    cluster.set_app(s.victim, s.app);
    let bound = cluster.event_bound();
    cluster.run(bound);
    cluster.assert_quiescent();
    let m = s.run.sizes.len() as u64;
    if s.app == App::ClosesAfter(m) || (m == 0 && s.app == App::ClosesAfter(0)) {
        // It closes after taking everything: a well-behaved application.
        cluster.assert_clean_outcome();
        return;
    }
    let v = s.victim;
    // One cause, the same at every member: the one found first (by the
    // victim itself, but for a crash or a never-closing application, which
    // only the others can see).
    let kind = match s.app {
        App::NeverCloses => FailureKind::NoProgress,
        App::LeavesBeforeClose => FailureKind::LocalShutdown,
        App::CrashesBeforeClose => FailureKind::Unreachable,
        App::ClosesAfter(_) => FailureKind::ClosedUnread,
        App::Reader => unreachable!("a well-behaved application"),
    };
    for rank in 0..s.run.n {
        if cluster.is_crashed(rank) {
            assert_eq!(rank, v, "only the victim crashes");
            continue;
        }
        assert_eq!(cluster.closed(rank), 0, "rank {rank} closed: {s:?}");
        let failures = cluster.failures(rank);
        assert_eq!(failures.len(), 1, "rank {rank}: {failures:?} {s:?}");
        assert_eq!(
            failures[0].suspect,
            Some(v),
            "rank {rank}: {failures:?} {s:?}"
        );
        assert_eq!(failures[0].kind, kind, "rank {rank}: {failures:?} {s:?}");
        if rank == 0 && s.app == App::NeverCloses {
            assert_eq!(failures[0].reported_by, None, "the root finds it: {s:?}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))), ..ProptestConfig::with_cases(4000) })]

    #[test]
    fn a_receivers_application_failing_before_its_close_fails_the_group(
        s in app_scenario(ALGORITHMS),
    ) {
        check_app(&s);
    }
}

/// A run with automatic block sizes between `min` and `max` bytes: messages
/// large enough that the choice varies with the message and the group (a
/// group of two or a schedule that is not pipelined takes `max`, a pipelined
/// one anything from `min` up).
fn automatic_scenario(
    algorithms: &'static [Algorithm],
    min_n: usize,
) -> impl Strategy<Value = Scenario> {
    (
        scenario(algorithms, min_n),
        1usize..=4,
        0usize..=60,
        prop::collection::vec(prop_oneof![0u64..=40, 0u64..=3000], 0..=4),
    )
        .prop_map(|(mut s, min, spread, sizes)| {
            s.auto_min = Some(min);
            s.block_size = min + spread;
            s.sizes = sizes;
            s
        })
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))), ..ProptestConfig::with_cases(8000) })]

    #[test]
    fn every_member_gets_every_message(s in scenario(ALGORITHMS, 1)) {
        check_clean(&s);
    }

    /// Every member cuts each message into the blocks the group's automatic
    /// choice gives for its size (the harness checks every `BeginMessage`,
    /// every send against the receive it lands in, and the bytes).
    #[test]
    fn automatic_block_sizes_deliver_every_message(s in automatic_scenario(ALGORITHMS, 1)) {
        check_clean(&s);
    }

    #[test]
    fn a_crash_fails_every_survivor_once_with_automatic_blocks(
        s in automatic_scenario(ALGORITHMS, 2).prop_flat_map(|run| {
            let n = run.n;
            (Just(run), 0..n, 0u64..=600)
        }),
    ) {
        let (run, victim, at_permille) = s;
        let notify = Notify::AllSurvivors;
        check_crash(&CrashScenario { run, victim, at_permille, notify });
    }

    #[test]
    fn a_crash_fails_every_survivor_once(s in crash_scenario(ALGORITHMS)) {
        check_crash(&s);
    }
}

// ---- degenerate groups ----------------------------------------------------

fn check_group_of_one(algorithm: Algorithm) {
    let mut root = GroupMember::new(config(algorithm, 1, 0)).unwrap();
    assert_eq!(actions(&mut root), []);
    for (seq, size) in [0u64, 1, 4, 5, 1000].into_iter().enumerate() {
        assert_eq!(root.submit(size), Ok(seq as u64));
        let seq = seq as u64;
        let block_size = root.config().block_size.largest();
        let blocks = block_count(size, block_size);
        let released = (0..blocks).map(|b| Action::ReleaseBlock {
            seq,
            offset: b * block_size,
            len: block_len(size, block_size, b),
        });
        let expected: Vec<Action> = released
            .chain([
                Action::MessageComplete { seq },
                // Nobody else has to take it, nor persist it.
                Action::MessageDelivered { seq },
                Action::MessagePersisted { seq },
            ])
            .collect();
        assert_eq!(
            actions(&mut root),
            expected,
            "a send in a group of one completes (and is delivered and persisted) at once"
        );
    }
    root.close().unwrap();
    assert_eq!(actions(&mut root), [Action::Closed]);
    assert_eq!(root.submit(1), Err(MemberError::Closed));
}

#[test]
fn group_of_one_completes_at_once_and_closes_at_once() {
    for &algorithm in ALGORITHMS {
        check_group_of_one(algorithm);
    }
}

fn check_small_groups(algorithms: &[Algorithm]) {
    for &algorithm in algorithms {
        for n in 1..=3 {
            for block_size in [1, 3, 8] {
                for seed in 0..8 {
                    check_clean(&Scenario {
                        algorithm,
                        n,
                        block_size,
                        auto_min: None,
                        racks: Vec::new(),
                        slow_members: Vec::new(),
                        sizes: vec![0, 1, 7, 8, 9, 24, 0],
                        close: true,
                        upfront: seed as usize,
                        slow: (seed % 3 == 0).then_some(1 % n),
                        seed,
                    });
                }
            }
        }
    }
}

#[test]
fn groups_of_one_two_and_three_with_every_algorithm() {
    check_small_groups(ALGORITHMS);
}

#[test]
fn close_with_no_messages() {
    for &algorithm in ALGORITHMS {
        for n in 1..=6 {
            check_clean(&Scenario {
                algorithm,
                n,
                block_size: 4,
                auto_min: None,
                racks: Vec::new(),
                slow_members: Vec::new(),
                sizes: vec![],
                close: true,
                upfront: 0,
                slow: None,
                seed: n as u64,
            });
        }
    }
}

// ---- failure after the group closed ----------------------------------------

/// Three messages (10, 0 and 3 bytes in blocks of 3) to `n` members, then
/// the root closes; all but the close as soon as the root has the group.
fn three_messages(algorithm: Algorithm, n: usize, seed: u64) -> Scenario {
    Scenario {
        algorithm,
        n,
        block_size: 3,
        auto_min: None,
        racks: Vec::new(),
        slow_members: Vec::new(),
        sizes: vec![10, 0, 3],
        close: true,
        upfront: 4,
        slow: None,
        seed,
    }
}

#[test]
fn a_failure_after_closed_changes_nothing() {
    for &algorithm in ALGORITHMS {
        let n = 5;
        let mut cluster = build(&three_messages(algorithm, n, 7));
        cluster.run(cluster.event_bound());
        cluster.assert_clean_outcome();
        for rank in 0..n {
            let other = (rank + 1) % n;
            let member = cluster.member_mut(rank);
            member.handle_peer_failure(Some(other));
            member.handle_peer_failure(None);
            member.handle_control(
                other,
                Control::Failed {
                    suspect: None,
                    kind: FailureKind::Unreachable,
                    detector: other,
                },
            );
            member.handle_control(other, Control::ReadyForBlock);
            member.handle_block(other, 3, 3);
            member.handle_send_complete(other);
            member.shutdown();
            assert_eq!(member.poll_action(), None, "{algorithm} rank {rank}");
            assert!(member.failure().is_none());
            assert_eq!(member.close(), Err(MemberError::Closed));
        }
        assert_eq!(cluster.member_mut(0).submit(1), Err(MemberError::Closed));
        cluster.assert_quiescent();
    }
}

/// A forged control message in a running group: the victim fails with a
/// violation, and the failure reaches every member (the suspect included)
/// through relays; nobody delivers anything partial and nothing hangs.
///
/// Regression test: the victim used to relay `Control::Failed` to everyone
/// but the suspect, so a live misbehaving member never heard of the failure
/// and waited for the group forever.
#[test]
fn a_violation_mid_run_fails_the_whole_group() {
    for &algorithm in ALGORITHMS {
        for seed in 0..20u64 {
            let n = 6;
            let s = Scenario {
                algorithm,
                n,
                block_size: 2,
                auto_min: None,
                racks: Vec::new(),
                slow_members: Vec::new(),
                sizes: vec![9, 30, 4],
                close: true,
                upfront: 4,
                slow: None,
                seed,
            };
            let mut cluster = build(&s);
            let bound = cluster.event_bound();
            cluster.run_until(bound, seed * 7);
            // Rank 4 tells rank 5 the group closes: only the root may.
            cluster.inject_control(4, 5, Control::Close { messages: 3 });
            cluster.run(bound);
            cluster.assert_quiescent();
            for rank in 0..n {
                let failures = cluster.failures(rank);
                if cluster.closed(rank) == 1 && failures.is_empty() {
                    continue; // the group closed before the forgery
                }
                assert_eq!(
                    cluster.closed(rank),
                    0,
                    "{algorithm} seed {seed} rank {rank}"
                );
                assert_eq!(failures.len(), 1, "{algorithm} seed {seed} rank {rank}");
                assert_eq!(failures[0].suspect, Some(4), "{algorithm} seed {seed}");
            }
        }
    }
}

/// A member that leaves (`shutdown()`) mid-run: it reports `LocalShutdown`,
/// and every other member ends with one `Failed` naming it, of the same
/// kind, reported by it (or `Closed`, if the group closed first); nothing
/// hangs.
#[test]
fn a_member_leaving_mid_run_fails_the_group() {
    for &algorithm in ALGORITHMS {
        for seed in 0..30u64 {
            let n = 2 + (seed as usize % 6);
            let leaver = (seed as usize * 5) % n;
            let s = Scenario {
                algorithm,
                n,
                block_size: 3,
                auto_min: None,
                racks: Vec::new(),
                slow_members: Vec::new(),
                sizes: vec![10, 1, 0, 31],
                close: seed % 2 == 0,
                upfront: (seed % 6) as usize,
                slow: None,
                seed,
            };
            let mut cluster = build(&s);
            let bound = cluster.event_bound();
            cluster.run_until(bound, seed * 11);
            cluster.shutdown(leaver);
            cluster.run(bound);
            cluster.assert_quiescent();
            let context = format!("{algorithm} n={n} seed={seed} leaver={leaver}");
            for rank in 0..n {
                let failures = cluster.failures(rank);
                if cluster.closed(rank) == 1 && failures.is_empty() {
                    continue; // the group closed before the member left
                }
                assert_eq!(cluster.closed(rank), 0, "{context} rank {rank}");
                assert_eq!(failures.len(), 1, "{context} rank {rank}");
                assert_eq!(failures[0].suspect, Some(leaver), "{context}");
                // Everyone fails with the leaver's own cause: the leaver
                // found it, the others heard of it from the leaver.
                assert_eq!(
                    failures[0].kind,
                    FailureKind::LocalShutdown,
                    "{context} rank {rank}"
                );
                let reporter = (rank != leaver).then_some(leaver);
                assert_eq!(failures[0].reported_by, reporter, "{context} rank {rank}");
            }
        }
    }
}

#[test]
fn a_root_waiting_for_an_application_that_never_closes_names_it() {
    let n = 4;
    for &algorithm in ALGORITHMS {
        for victim in 1..n {
            let mut cluster = build(&three_messages(algorithm, n, victim as u64));
            cluster.set_app(victim, App::NeverCloses);
            cluster.run(cluster.event_bound());
            cluster.assert_quiescent();
            for rank in 0..n {
                let f = cluster.failures(rank);
                assert_eq!(f.len(), 1, "{algorithm} victim {victim} rank {rank}: {f:?}");
                assert_eq!(f[0].suspect, Some(victim), "{algorithm} rank {rank}: {f:?}");
            }
            assert_eq!(cluster.failures(0)[0].kind, FailureKind::NoProgress);
        }
    }
}
