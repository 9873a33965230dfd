//! The verifier: property tests over many (algorithm, n, k), and mutations of
//! valid plans that it must reject with the right [`PlanError`].

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use rdmc_proto::schedule::{
    Algorithm, NodeSchedule, Plan, PlanError, PlanTransfer, Schedule, step_bound, verify_schedules,
};

fn algorithm() -> impl Strategy<Value = Algorithm> {
    prop::sample::select(Algorithm::ALL.to_vec())
}

/// `plan` written as JSON and read back.
#[cfg(feature = "serde")]
fn json_round_trip(plan: &Plan) -> Plan {
    serde_json::from_str(&serde_json::to_string(plan).unwrap()).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))), ..ProptestConfig::with_cases(64) })]

    /// Every plan verifies, takes exactly `step_bound` steps, and moves
    /// exactly (n − 1)·k blocks (each transfer is some member's only receipt
    /// of that block); with feature `serde` (which the workspace's
    /// `cargo test` enables), it survives a JSON round trip.
    #[test]
    fn plans_verify(algorithm in algorithm(), n in 1usize..=200, k in 1usize..=100) {
        let plan = Plan::new(algorithm, n, k).unwrap();
        prop_assert_eq!(plan.verify(), Ok(()));
        prop_assert_eq!(plan.steps, step_bound(algorithm, n, k));
        prop_assert_eq!(plan.transfers.len(), (n - 1) * k);
        #[cfg(feature = "serde")]
        prop_assert_eq!(&json_round_trip(&plan), &plan);
        // The transfers' order does not matter to the verifier.
        let mut reversed = plan.clone();
        reversed.transfers.reverse();
        prop_assert_eq!(reversed.verify(), Ok(()));
    }

    /// The per-member functions agree with each other (§2.7 items 1, 4, 5).
    /// Sequential is `O(n²k)` to check, so its groups are kept smaller.
    #[test]
    fn schedules_agree(algorithm in algorithm(), n in 1usize..=200, k in 1usize..=100) {
        let n = if algorithm == Algorithm::Sequential { n.min(60) } else { n };
        prop_assert_eq!(verify_schedules(algorithm, n, k), Ok(()));
    }

    /// Binomial pipeline steps: T = k + l − 1 for powers of two, k + l
    /// otherwise; the first block's source is the same for every k.
    #[test]
    fn pipeline_first_block_and_steps(n in 2usize..=200, k in 1usize..=100) {
        let l = n.ilog2() as usize;
        let pot = n.is_power_of_two();
        for rank in 0..n {
            let s = NodeSchedule::new(Algorithm::BinomialPipeline, n, rank).unwrap();
            prop_assert_eq!(s.total_steps(k), k + l - usize::from(pot));
            let first = (0..s.total_steps(k)).find_map(|t| s.incoming(k, t));
            prop_assert_eq!(first, s.first_block_for(k));
        }
    }
}

/// A valid plan to mutate: chain, n = 5, k = 2 (rdmc-original.md §2.6):
/// s0: 0→1 b0; s1: 0→1 b1, 1→2 b0; s2: 1→2 b1, 2→3 b0; s3: 2→3 b1, 3→4 b0; s4: 3→4 b1.
fn chain_plan() -> Plan {
    let plan = Plan::new(Algorithm::Chain, 5, 2).unwrap();
    assert_eq!(plan.verify(), Ok(()));
    plan
}

fn with(mut plan: Plan, step: usize, from: usize, to: usize, block: usize) -> Plan {
    plan.transfers.push(PlanTransfer {
        step,
        from,
        to,
        block,
    });
    plan
}

#[test]
fn rejects_dropped_transfer() {
    // Dropping the last transfer (3→4 b1 at step 4) leaves 4 without b1.
    let mut plan = chain_plan();
    let last = plan.transfers.pop().unwrap();
    assert_eq!((last.step, last.from, last.to, last.block), (4, 3, 4, 1));
    assert_eq!(
        plan.verify(),
        Err(PlanError::MissingBlock { node: 4, block: 1 })
    );

    // Dropping 0→1 b0 makes 1 forward a block it never got.
    let mut plan = chain_plan();
    plan.transfers.remove(0);
    assert_eq!(
        plan.verify(),
        Err(PlanError::BlockNotHeld {
            step: 1,
            node: 1,
            block: 0
        })
    );
}

#[test]
fn rejects_duplicated_transfer() {
    // The very same transfer twice: 0 sends twice in step 0.
    let plan = chain_plan();
    let first = plan.transfers[0];
    let plan = with(plan, first.step, first.from, first.to, first.block);
    assert_eq!(
        plan.verify(),
        Err(PlanError::MultipleSends { step: 0, node: 0 })
    );

    // 0 re-sends b0 to 1 at step 4, when both are otherwise idle.
    let plan = with(chain_plan(), 4, 0, 1, 0);
    assert_eq!(
        plan.verify(),
        Err(PlanError::DuplicateBlock {
            step: 4,
            node: 1,
            block: 0
        })
    );
}

#[test]
fn rejects_two_receives_in_one_step() {
    // At step 2, 3 already gets b0 from 2; 0 also sends it b1.
    let plan = with(chain_plan(), 2, 0, 3, 1);
    assert_eq!(
        plan.verify(),
        Err(PlanError::MultipleReceives { step: 2, node: 3 })
    );
}

#[test]
fn rejects_forwarding_an_unreceived_block() {
    // 1 receives b0 at step 0; forwarding it in that same step is too early.
    let plan = with(chain_plan(), 0, 1, 2, 0);
    assert_eq!(
        plan.verify(),
        Err(PlanError::BlockNotHeld {
            step: 0,
            node: 1,
            block: 0
        })
    );
    // 4 never forwards anything; it cannot send b1 at step 3 (gets it at 4).
    let plan = with(chain_plan(), 3, 4, 2, 1);
    assert_eq!(
        plan.verify(),
        Err(PlanError::BlockNotHeld {
            step: 3,
            node: 4,
            block: 1
        })
    );
}

#[test]
fn rejects_send_to_root() {
    let plan = with(chain_plan(), 3, 1, 0, 0);
    assert_eq!(
        plan.verify(),
        Err(PlanError::RootReceives {
            step: 3,
            from: 1,
            block: 0
        })
    );
}

#[test]
fn rejects_exceeding_the_step_bound() {
    let mut plan = chain_plan();
    plan.steps += 1;
    assert_eq!(
        plan.verify(),
        Err(PlanError::TooManySteps { steps: 6, bound: 5 })
    );

    let mut plan = Plan::new(Algorithm::BinomialPipeline, 6, 4).unwrap();
    plan.steps = 7;
    assert_eq!(
        plan.verify(),
        Err(PlanError::TooManySteps { steps: 7, bound: 6 })
    );
    plan.steps = 6;
    assert_eq!(plan.verify(), Ok(()));

    // A transfer at or after `steps`.
    let plan = with(chain_plan(), 5, 0, 1, 0);
    assert_eq!(
        plan.verify(),
        Err(PlanError::StepOutOfRange { step: 5, steps: 5 })
    );
}

#[test]
fn rejects_out_of_range_and_malformed() {
    assert_eq!(
        with(chain_plan(), 4, 0, 5, 0).verify(),
        Err(PlanError::RankOutOfRange {
            step: 4,
            rank: 5,
            group_size: 5
        })
    );
    assert_eq!(
        with(chain_plan(), 4, 0, 1, 2).verify(),
        Err(PlanError::BlockOutOfRange {
            step: 4,
            block: 2,
            blocks: 2
        })
    );
    assert_eq!(
        with(chain_plan(), 4, 2, 2, 0).verify(),
        Err(PlanError::SelfTransfer {
            step: 4,
            node: 2,
            block: 0
        })
    );
    let mut plan = chain_plan();
    plan.algorithm = "gossip".to_owned();
    assert_eq!(
        plan.verify(),
        Err(PlanError::UnknownAlgorithm("gossip".to_owned()))
    );
    let mut plan = chain_plan();
    plan.blocks = 0;
    assert_eq!(plan.verify(), Err(PlanError::NoBlocks));
    let mut plan = chain_plan();
    plan.group_size = 0;
    assert_eq!(plan.verify(), Err(PlanError::EmptyGroup));
    assert_eq!(
        verify_schedules(Algorithm::Chain, 0, 1),
        Err(PlanError::EmptyGroup)
    );
    assert_eq!(
        verify_schedules(Algorithm::Chain, 3, 0),
        Err(PlanError::NoBlocks)
    );
}

/// A plan claiming more blocks than it moves misses blocks; one claiming
/// more members misses members.
#[test]
fn rejects_wrong_header() {
    let mut plan = chain_plan();
    plan.blocks = 3;
    plan.steps = 5;
    assert_eq!(
        plan.verify(),
        Err(PlanError::MissingBlock { node: 1, block: 2 })
    );
    let mut plan = Plan::new(Algorithm::Sequential, 3, 2).unwrap();
    plan.group_size = 4;
    plan.steps = 4;
    assert_eq!(
        plan.verify(),
        Err(PlanError::MissingBlock { node: 3, block: 0 })
    );
}

#[test]
fn step_bounds() {
    use Algorithm::*;
    for a in Algorithm::ALL {
        assert_eq!(step_bound(a, 1, 7), 0, "{a}");
        assert_eq!(step_bound(a, 2, 7), 7, "{a}");
    }
    assert_eq!(step_bound(BinomialPipeline, 8, 3), 5);
    assert_eq!(step_bound(BinomialPipeline, 6, 4), 6);
    assert_eq!(step_bound(BinomialPipeline, 3, 2), 3);
    assert_eq!(step_bound(Chain, 5, 2), 5);
    assert_eq!(step_bound(BinomialTree, 5, 2), 6);
    assert_eq!(step_bound(Sequential, 5, 2), 8);
}

/// A plan's JSON names `buffered_sends` only when it is set, and a buffered
/// plan reads back as buffered.
#[cfg(feature = "serde")]
#[test]
fn buffered_sends_appear_in_json_only_when_set() {
    let plain = Plan::new(Algorithm::BinomialPipeline, 6, 3).unwrap();
    let json = serde_json::to_string(&plain).unwrap();
    assert!(!json.contains("buffered_sends"), "{json}");
    let topology = rdmc_proto::schedule::Topology::flat(6)
        .unwrap()
        .with_buffered_sends(true);
    let buffered = Plan::with_topology(Algorithm::BinomialPipeline, &topology, 3).unwrap();
    assert!(buffered.buffered_sends);
    assert_eq!(json_round_trip(&buffered), buffered);
}
