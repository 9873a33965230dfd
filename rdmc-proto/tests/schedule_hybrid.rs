//! The hybrid schedule and slow members as leaves: every rack split and
//! slow set small enough to enumerate, random ones beyond, against the
//! same verifiers as every other algorithm ([`Plan::verify`],
//! [`verify_schedules_in`]), plus the hybrid's own promises: every block
//! crosses into each rack once, and a slow member never sends.

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use rdmc_proto::schedule::{
    Algorithm, NodeSchedule, Plan, Topology, step_bound, step_bound_in, verify_schedules_in,
};

/// Every rack assignment of `n` members up to renaming racks: restricted
/// growth strings (rack of member r ≤ 1 + the largest rack before it).
fn rack_splits(n: usize) -> Vec<Vec<u32>> {
    let mut out = Vec::new();
    let mut cur = vec![0u32; n];
    fn go(i: usize, max: u32, cur: &mut Vec<u32>, out: &mut Vec<Vec<u32>>) {
        if i == cur.len() {
            out.push(cur.clone());
            return;
        }
        for r in 0..=max + 1 {
            cur[i] = r;
            go(i + 1, max.max(r), cur, out);
        }
    }
    if n > 0 {
        go(1, 0, &mut cur, &mut out);
    }
    out
}

fn topology(n: usize, racks: &[u32], slow: &[usize]) -> Topology {
    Topology::flat(n)
        .unwrap()
        .with_racks(racks.to_vec())
        .unwrap()
        .with_slow_members(slow.iter().copied())
        .unwrap()
}

/// Everything the verifiers and the hybrid's own promises check, for one case.
fn check(algorithm: Algorithm, topo: &Topology, k: usize) -> Result<(), String> {
    let n = topo.group_size();
    let ctx = || {
        format!(
            "{algorithm} n={n} racks={:?} slow={:?} k={k}",
            topo.racks(),
            topo.slow_members()
        )
    };
    let plan = Plan::with_topology(algorithm, topo, k).map_err(|e| format!("{}: {e}", ctx()))?;
    plan.verify().map_err(|e| format!("{}: plan: {e}", ctx()))?;
    if plan.steps != step_bound_in(algorithm, topo, k) {
        return Err(format!(
            "{}: {} steps, bound {}",
            ctx(),
            plan.steps,
            step_bound_in(algorithm, topo, k)
        ));
    }
    verify_schedules_in(algorithm, topo, k).map_err(|e| format!("{}: schedules: {e}", ctx()))?;
    // The count is tight: no idle step at the end (the bound above comes
    // from the same layout, so this is what checks it).
    let end = plan.transfers.iter().map(|t| t.step + 1).max().unwrap_or(0);
    if plan.steps != end {
        return Err(format!(
            "{}: {} steps, but the last transfer ends at {end}",
            ctx(),
            plan.steps
        ));
    }
    // Slow members other than the root never send, when someone else can.
    let fast_receivers = (1..n).any(|r| !topo.is_slow(r));
    for t in &plan.transfers {
        if t.from != 0 && topo.is_slow(t.from) {
            return Err(format!(
                "{}: slow member {} sends at step {}",
                ctx(),
                t.from,
                t.step
            ));
        }
        let _ = fast_receivers;
    }
    if algorithm == Algorithm::Hybrid {
        // Each block enters each rack other than the root's exactly once
        // (slow members of a rack without fast members aside: they are fed
        // from the last rack).
        let rack = |r: usize| topo.rack_of(r);
        let mut racks: Vec<u32> = (0..n)
            .filter(|&r| r == 0 || !topo.is_slow(r))
            .map(rack)
            .collect();
        racks.sort_unstable();
        racks.dedup();
        for &target in &racks {
            if target == rack(0) {
                continue;
            }
            for b in 0..k {
                let crossings = plan
                    .transfers
                    .iter()
                    .filter(|t| t.block == b && rack(t.to) == target && rack(t.from) != target)
                    .filter(|t| !topo.is_slow(t.to))
                    .count();
                if crossings != 1 {
                    return Err(format!(
                        "{}: block {b} enters rack {target} {crossings} times",
                        ctx()
                    ));
                }
            }
        }
    }
    Ok(())
}

#[test]
fn every_rack_split_up_to_eight_members() {
    for n in 1..=8 {
        for racks in rack_splits(n) {
            let topo = topology(n, &racks, &[]);
            for k in 1..=6 {
                check(Algorithm::Hybrid, &topo, k).unwrap();
            }
        }
    }
}

#[test]
fn every_slow_set_and_rack_split_up_to_six_members() {
    for n in 1..=6 {
        for racks in rack_splits(n) {
            for mask in 0..(1usize << n) {
                let slow: Vec<usize> = (0..n).filter(|r| mask & (1 << r) != 0).collect();
                let topo = topology(n, &racks, &slow);
                for k in 1..=5 {
                    check(Algorithm::Hybrid, &topo, k).unwrap();
                    if racks.iter().all(|&r| r == 0) {
                        check(Algorithm::BinomialPipeline, &topo, k).unwrap();
                    }
                }
            }
        }
    }
}

#[test]
fn slow_members_in_the_binomial_pipeline_up_to_33_members() {
    for n in 1..=33 {
        let mut sets: Vec<Vec<usize>> = vec![vec![]];
        for r in 0..n {
            sets.push(vec![r]);
        }
        sets.push((1..n).step_by(3).collect());
        sets.push((0..n).collect());
        for slow in sets {
            let topo = topology(n, &vec![0; n], &slow);
            for k in 1..=9 {
                check(Algorithm::BinomialPipeline, &topo, k).unwrap();
            }
        }
    }
}

#[test]
fn one_rack_is_the_binomial_pipeline() {
    for n in 1..=40 {
        for k in [1, 2, 3, 7, 20] {
            let hybrid = Plan::new(Algorithm::Hybrid, n, k).unwrap();
            let pipeline = Plan::new(Algorithm::BinomialPipeline, n, k).unwrap();
            assert_eq!(hybrid.transfers, pipeline.transfers, "n={n} k={k}");
            assert_eq!(hybrid.steps, step_bound(Algorithm::BinomialPipeline, n, k));
        }
    }
}

fn any_case() -> impl Strategy<Value = (usize, Vec<u32>, Vec<usize>, usize, bool)> {
    (1usize..=48, 1u32..=6, 1usize..=24).prop_flat_map(|(n, racks, k)| {
        (
            Just(n),
            prop::collection::vec(0..racks, n),
            prop::collection::vec(0..n, 0..=3),
            Just(k),
            any::<bool>(),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))), ..ProptestConfig::with_cases(300) })]

    /// Random group sizes up to 48, random rack splits (interleaved), random
    /// slow members, random block counts.
    #[test]
    fn random_splits_verify((n, racks, slow, k, buffered) in any_case()) {
        let topo = topology(n, &racks, &slow).with_buffered_sends(buffered);
        prop_assert_eq!(check(Algorithm::Hybrid, &topo, k), Ok(()));
        let flat = topology(n, &vec![0; n], &slow).with_buffered_sends(buffered);
        prop_assert_eq!(check(Algorithm::BinomialPipeline, &flat, k), Ok(()));
    }

    /// The fast members of a binomial pipeline with slow leaves are done by
    /// the step the pipeline among them alone would finish.
    #[test]
    fn slow_leaves_delay_no_fast_member((n, _racks, slow, k, buffered) in any_case()) {
        let topo = topology(n, &vec![0; n], &slow).with_buffered_sends(buffered);
        // The power-of-two runs are for buffered sends only.
        let split = buffered;
        let fast = (0..n).filter(|&r| r == 0 || !topo.is_slow(r)).count();
        let plan = Plan::with_topology(Algorithm::BinomialPipeline, &topo, k).unwrap();
        let done = plan
            .transfers
            .iter()
            .filter(|t| !topo.is_slow(t.to))
            .map(|t| t.step + 1)
            .max()
            .unwrap_or(0);
        prop_assert!(done <= fast_bound(fast, leaves_of(&topo), k, split), "{} steps", done);
        // A member's message completes once its own sends are done too: no
        // fast member but the root sends after the pipeline among the fast
        // members ends (or, in a short message, after the leaves' first
        // blocks, which come from one peer whatever the length).
        let leaves = (1..n).filter(|&r| topo.is_slow(r)).count();
        let l = (usize::BITS - 1 - fast.leading_zeros()) as usize;
        let sends_done = plan
            .transfers
            .iter()
            .filter(|t| t.from != 0)
            .map(|t| t.step + 1)
            .max()
            .unwrap_or(0);
        let first_feeds = if split && leaves > 0 && fast >= 2 { chain_lags(fast - 1) } else { l + 1 };
        let bound = fast_bound(fast, leaves, k, split).max(first_feeds + 3 + leaves);
        prop_assert!(sends_done <= bound, "{} > {}", sends_done, bound);
    }
}

/// Slow members of a group without racks.
fn leaves_of(topo: &Topology) -> usize {
    (1..topo.group_size()).filter(|&r| topo.is_slow(r)).count()
}

/// The runs of a binomial pipeline with slow leaves and no racks: the fast
/// members but the relay (the highest fast rank), in rank order, cut into
/// runs whose lengths are powers of two, longest first.
fn runs(topo: &Topology) -> (Vec<Vec<usize>>, usize) {
    let mut fast: Vec<usize> = (0..topo.group_size())
        .filter(|&r| r == 0 || !topo.is_slow(r))
        .collect();
    let relay = fast.pop().expect("the root");
    let mut runs = Vec::new();
    while !fast.is_empty() {
        let len = 1usize << (usize::BITS - 1 - fast.len().leading_zeros());
        let rest = fast.split_off(len);
        runs.push(std::mem::replace(&mut fast, rest));
    }
    (runs, relay)
}

/// The step by which every fast member has every block: the pipeline among
/// them alone without leaves (or without the runs, `split` false); with
/// leaves and runs, the chain of power-of-two runs (each `l_i + 1` steps
/// after the one before) and the relay after them.
fn fast_bound(fast: usize, leaves: usize, k: usize, split: bool) -> usize {
    let plain = step_bound(Algorithm::BinomialPipeline, fast, k);
    if split && leaves == 0 && fast > 4 && !fast.is_power_of_two() {
        // Runs of all the members, no relay: the last run's pipeline ends
        // `l_last + k − 1` steps after it starts.
        return plain.max(k + chain_lags(fast) - 2);
    }
    if !split || leaves == 0 || fast < 2 {
        return plain;
    }
    plain.max(k + chain_lags(fast - 1) + 1)
}

/// The steps between the first run's start and the relay's: `l_i + 1` for
/// each power-of-two run of `members`.
fn chain_lags(members: usize) -> usize {
    (0..usize::BITS as usize)
        .filter(|&b| members & (1 << b) != 0)
        .map(|b| b + 1)
        .sum()
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))), ..ProptestConfig::with_cases(200) })]

    /// Slow members in one rack: the other fast members form runs whose
    /// lengths are powers of two (each a binomial pipeline without twins,
    /// which over TCP's buffered sends keeps its pace); blocks pass
    /// between runs only from a run to the next run's first member (or, from
    /// the last run, to the relay), every block exactly once.
    #[test]
    fn slow_members_leave_power_of_two_runs((n, _racks, slow, k, _) in any_case()) {
        let topo = topology(n, &vec![0; n], &slow).with_buffered_sends(true);
        let fast = (0..n).filter(|&r| r == 0 || !topo.is_slow(r)).count();
        prop_assume!(leaves_of(&topo) > 0 && fast >= 2);
        let (runs, relay) = runs(&topo);
        let run_of = |r: usize| runs.iter().position(|run| run.contains(&r));
        let plan = Plan::with_topology(Algorithm::BinomialPipeline, &topo, k).unwrap();
        let mut into = vec![0usize; runs.len() + 1];
        for t in &plan.transfers {
            if topo.is_slow(t.to) || (t.from != 0 && topo.is_slow(t.from)) || t.from == relay {
                continue;
            }
            let from = run_of(t.from).expect("a sender in a run");
            match run_of(t.to) {
                Some(to) if to == from => {}
                Some(to) => {
                    prop_assert!(to == from + 1 && t.to == runs[to][0], "{:?} crosses runs", t);
                    into[to] += 1;
                }
                None => {
                    prop_assert!(t.to == relay && from + 1 == runs.len(), "{:?}", t);
                    into[runs.len()] += 1;
                }
            }
        }
        prop_assert!(into[1..].iter().all(|&c| c == k), "{:?} feeds, k = {}", into, k);
    }

    /// No slow member, sends that complete once buffered, a group whose
    /// size is not a power of two: the members form runs of powers of two
    /// too (12: 8 then 4), a block passing from a run only to the next
    /// run's first member, every block exactly once; with RDMA's send
    /// completion, a power-of-two size or 3 members, the plain binomial
    /// pipeline.
    #[test]
    fn buffered_sends_make_runs_of_any_group((n, k, buffered) in (1usize..=48, 1usize..=24, any::<bool>())) {
        let topo = topology(n, &vec![0; n], &[]).with_buffered_sends(buffered);
        let plan = Plan::with_topology(Algorithm::BinomialPipeline, &topo, k).unwrap();
        plan.verify().map_err(|e| TestCaseError::fail(e.to_string()))?;
        if !buffered || n.is_power_of_two() || n < 5 {
            let plain = Plan::new(Algorithm::BinomialPipeline, n, k).unwrap();
            prop_assert_eq!((plan.steps, &plan.transfers), (plain.steps, &plain.transfers));
            return Ok(());
        }
        let mut members: Vec<usize> = (0..n).collect();
        let mut runs = Vec::new();
        while !members.is_empty() {
            let len = 1usize << (usize::BITS - 1 - members.len().leading_zeros());
            let rest = members.split_off(len);
            runs.push(std::mem::replace(&mut members, rest));
        }
        let run_of = |r: usize| runs.iter().position(|run| run.contains(&r)).unwrap();
        let mut into = vec![0usize; runs.len()];
        for t in &plan.transfers {
            let (from, to) = (run_of(t.from), run_of(t.to));
            if from != to {
                prop_assert!(to == from + 1 && t.to == runs[to][0], "{:?} crosses runs", t);
                into[to] += 1;
            }
        }
        prop_assert!(into[1..].iter().all(|&c| c == k), "{:?} feeds, k = {}", into, k);
    }
}

#[test]
fn interleaved_two_racks_cross_once_per_block() {
    // 16 members handed out alternately from two racks.
    let racks: Vec<u32> = (0..16).map(|r| r % 2).collect();
    let topo = topology(16, &racks, &[]);
    let k = 64;
    let plan = Plan::with_topology(Algorithm::Hybrid, &topo, k).unwrap();
    plan.verify().unwrap();
    let crossing = plan
        .transfers
        .iter()
        .filter(|t| racks[t.from] != racks[t.to])
        .count();
    assert_eq!(crossing, k);
    // The flat pipeline over the same order sends every transfer along
    // hypercube dimension 0 across: a quarter of 15·k, about 1.9 blocks per
    // block each way.
    let flat = Plan::new(Algorithm::BinomialPipeline, 16, k).unwrap();
    let into_rack_1 = flat
        .transfers
        .iter()
        .filter(|t| racks[t.from] == 0 && racks[t.to] == 1)
        .count();
    assert!(into_rack_1 >= 3 * k / 2, "{into_rack_1}");
    // Two racks of 8 (l = 3): the second rack starts 4 steps later.
    assert_eq!(plan.steps, k + 2 + 4);
    let s = NodeSchedule::with_topology(Algorithm::Hybrid, &topo, 1).unwrap();
    assert_eq!(s.algorithm(), Algorithm::Hybrid);
}

/// Every group size up to 40 with structured splits: two racks of
/// consecutive members, two, three and four racks dealt out in turn, every
/// member its own rack, the root alone; each with no slow member, the last
/// member slow, and every third member slow.
#[test]
fn every_group_size_up_to_40_with_structured_splits() {
    for n in 1..=40usize {
        let splits: Vec<Vec<u32>> = vec![
            (0..n).map(|r| u32::from(r >= n / 2)).collect(),
            (0..n as u32).map(|r| r % 2).collect(),
            (0..n as u32).map(|r| r % 3).collect(),
            (0..n as u32).map(|r| r % 4).collect(),
            (0..n as u32).collect(),
            (0..n).map(|r| u32::from(r > 0)).collect(),
        ];
        let slow_sets: Vec<Vec<usize>> = vec![vec![], vec![n - 1], (1..n).step_by(3).collect()];
        for racks in &splits {
            for slow in &slow_sets {
                let topo = topology(n, racks, slow);
                for k in 1..=8 {
                    check(Algorithm::Hybrid, &topo, k).unwrap();
                }
            }
        }
    }
}

/// The hybrid's step count stays within `k + Σ (l_i + 1) + 1` without slow
/// members (the pipeline of the last rack starts after the chain's lags),
/// and a slow leaf's last block arrives within `max(2, s)·k + l + 8` steps of
/// the last rack's start.
#[test]
fn step_counts_are_as_the_layout_promises() {
    let floor_log2 = |m: usize| (usize::BITS - 1 - m.leading_zeros()) as usize;
    for n in 2..=24usize {
        for racks in [2u32, 3] {
            let split: Vec<u32> = (0..n as u32).map(|r| r % racks).collect();
            let sizes: Vec<usize> = (0..racks)
                .map(|r| split.iter().filter(|&&x| x == r).count())
                .filter(|&m| m > 0)
                .collect();
            let lags: usize = sizes.iter().map(|&m| floor_log2(m) + 1).sum();
            let topo = topology(n, &split, &[]);
            for k in [1, 5, 40] {
                let steps = step_bound_in(Algorithm::Hybrid, &topo, k);
                assert!(steps <= k + lags + 1, "n={n} racks={racks} k={k}: {steps}");
                assert!(steps >= k, "n={n} racks={racks} k={k}: {steps}");
            }
            let topo = topology(n, &split, &[n - 1]);
            for k in [1, 5, 40] {
                let steps = step_bound_in(Algorithm::Hybrid, &topo, k);
                assert!(
                    steps <= 2 * k + lags + 8,
                    "n={n} racks={racks} k={k}: {steps}"
                );
            }
        }
    }
}

/// A slow member's rack goes last in the chain, so that while the pipelines
/// run the slow member is fed from inside its own rack; the blocks it gets
/// later come from the root, once the root has nothing else to send.
#[test]
fn a_slow_member_is_fed_from_its_own_rack() {
    for n in [6usize, 9, 12, 17] {
        let racks: Vec<u32> = (0..n as u32).map(|r| r % 3).collect();
        for slow in 1..n {
            if racks[slow] == 0 {
                continue; // the root's rack feeds the chain, not the leaves
            }
            let topo = topology(n, &racks, &[slow]);
            for k in [1, 4, 11] {
                let plan = Plan::with_topology(Algorithm::Hybrid, &topo, k).unwrap();
                let into_slow: Vec<_> = plan.transfers.iter().filter(|t| t.to == slow).collect();
                assert_eq!(into_slow.len(), k);
                let root_done = plan
                    .transfers
                    .iter()
                    .filter(|t| t.from == 0 && t.to != slow)
                    .map(|t| t.step)
                    .max()
                    .unwrap();
                for t in into_slow {
                    let inside = racks[t.from] == racks[slow];
                    let late_from_root = t.from == 0 && t.step > root_done;
                    assert!(inside || late_from_root, "n={n} slow={slow} k={k}: {t:?}");
                }
            }
        }
    }
}

/// Over buffered sends, a group without slow members whose size is not a
/// power of two runs as power-of-two runs from 5 members on; smaller groups
/// and powers of two keep the binomial pipeline's own plan (a pipeline of 3
/// loses nothing to its twin: runs would only add steps).
#[test]
fn buffered_sends_lay_out_runs_from_five_members_on() {
    for n in 2..=40usize {
        let plain = Topology::flat(n).unwrap();
        let buffered = Topology::flat(n).unwrap().with_buffered_sends(true);
        for k in [1, 4, 9] {
            let a = Plan::with_topology(Algorithm::BinomialPipeline, &plain, k).unwrap();
            let b = Plan::with_topology(Algorithm::BinomialPipeline, &buffered, k).unwrap();
            let runs = n > 4 && !n.is_power_of_two();
            assert_eq!(a.transfers != b.transfers, runs, "n={n} k={k}");
        }
    }
}

/// A layout's schedule says what it is when printed.
#[test]
fn a_hybrid_schedule_prints_its_place() {
    for n in 1..=12usize {
        let topo = topology(n, &vec![0; n], &[]);
        let hybrid = NodeSchedule::with_topology(Algorithm::Hybrid, &topo, n - 1).unwrap();
        let printed = format!("{hybrid:?}");
        for part in [
            "Hybrid",
            &format!("group_size: {n}"),
            &format!("rank: {}", n - 1),
            "role",
        ] {
            assert!(printed.contains(part), "{printed}");
        }
    }
}

/// Flat means one rack and no slow member: the plain schedules.
#[test]
fn flat_is_one_rack_and_no_slow_member() {
    for n in 1..=6usize {
        assert!(Topology::flat(n).unwrap().is_flat());
        assert!(
            Topology::flat(n)
                .unwrap()
                .with_buffered_sends(true)
                .is_flat()
        );
        if n >= 2 {
            let racks: Vec<u32> = (0..n as u32).map(|r| r % 2).collect();
            assert!(!topology(n, &racks, &[]).is_flat(), "n={n}");
            assert!(!topology(n, &vec![0; n], &[n - 1]).is_flat(), "n={n}");
        }
    }
}

/// Two topologies are equal when every part is: the size, the racks, the
/// slow members and the kind of sends.
#[test]
fn topologies_are_equal_when_every_part_is() {
    let base = || topology(4, &[0, 0, 1, 1], &[3]);
    assert_eq!(base(), base());
    assert_ne!(base(), topology(5, &[0, 0, 1, 1, 1], &[3]));
    assert_ne!(base(), topology(4, &[0, 1, 1, 1], &[3]));
    assert_ne!(base(), topology(4, &[0, 0, 1, 1], &[2]));
    assert_ne!(base(), base().with_buffered_sends(true));
    assert_eq!(
        base().with_buffered_sends(true),
        base().with_buffered_sends(true)
    );
    let printed = format!("{:?}", base());
    for part in [
        "group_size: 4",
        "racks: [0, 0, 1, 1]",
        "slow: [3]",
        "buffered_sends: false",
    ] {
        assert!(printed.contains(part), "{printed}");
    }
}

/// Without slow members, and where sends complete once delivered, the
/// binomial pipeline is the plain one, whatever the size.
#[test]
fn the_plain_pipeline_unless_slow_members_or_buffered_runs() {
    for n in 1..=20usize {
        let flat = Topology::flat(n).unwrap();
        for rank in 0..n {
            assert_eq!(
                NodeSchedule::with_topology(Algorithm::BinomialPipeline, &flat, rank),
                NodeSchedule::new(Algorithm::BinomialPipeline, n, rank),
                "n={n}"
            );
        }
    }
}
