//! Every algorithm, every group size 1..=64, every message of 1..=40 blocks:
//! the assembled plan passes [`Plan::verify`] and the per-member schedules
//! agree with each other ([`verify_schedules`]), rdmc-original.md §2.7.

use rdmc_proto::schedule::{Algorithm, NodeSchedule, Plan, Schedule, step_bound, verify_schedules};

fn exhaustive(algorithm: Algorithm) {
    for n in 1..=64 {
        for k in 1..=40 {
            let plan = Plan::new(algorithm, n, k).unwrap();
            if let Err(e) = plan.verify() {
                panic!("{algorithm} n={n} k={k}: plan: {e}");
            }
            if let Err(e) = verify_schedules(algorithm, n, k) {
                panic!("{algorithm} n={n} k={k}: schedules: {e}");
            }
        }
    }
}

#[test]
fn sequential_exhaustive() {
    exhaustive(Algorithm::Sequential);
}

#[test]
fn chain_exhaustive() {
    exhaustive(Algorithm::Chain);
}

#[test]
fn binomial_tree_exhaustive() {
    exhaustive(Algorithm::BinomialTree);
}

#[test]
fn binomial_pipeline_exhaustive() {
    exhaustive(Algorithm::BinomialPipeline);
}

/// The original's offline self-test range for the binomial pipeline went to
/// n = 140 for small k (rdmc-original.md §0); go a little further here.
#[test]
fn binomial_pipeline_larger_groups() {
    for n in 65..=160 {
        for k in [1, 2, 3, 4, 5, 6, 9] {
            let plan = Plan::new(Algorithm::BinomialPipeline, n, k).unwrap();
            plan.verify().unwrap_or_else(|e| panic!("n={n} k={k}: {e}"));
            verify_schedules(Algorithm::BinomialPipeline, n, k)
                .unwrap_or_else(|e| panic!("n={n} k={k}: {e}"));
        }
    }
}

/// The schedules take exactly the bound's number of steps (the bound is tight),
/// and a group of one has nothing to do.
#[test]
fn step_counts_equal_the_bound() {
    for algorithm in Algorithm::ALL {
        for n in 1..=64 {
            for k in 1..=40 {
                let s = NodeSchedule::new(algorithm, n, 0).unwrap();
                assert_eq!(
                    s.total_steps(k),
                    step_bound(algorithm, n, k),
                    "{algorithm} n={n} k={k}"
                );
            }
        }
        let plan = Plan::new(algorithm, 1, 5).unwrap();
        assert_eq!((plan.steps, plan.transfers.len()), (0, 0), "{algorithm}");
    }
}

/// Every member's schedule knows its group and rank, and its shortcuts to
/// the next step it receives or sends at agree with a scan of its steps
/// (the member's state machine jumps with them; the plan above scans).
#[test]
fn accessors_and_next_steps_agree_with_the_steps() {
    for algorithm in Algorithm::ALL {
        for n in 1..=17 {
            for rank in 0..n {
                let s = NodeSchedule::new(algorithm, n, rank).unwrap();
                let at = format!("{algorithm} n={n} rank={rank}");
                assert_eq!((s.group_size(), s.rank()), (n, rank), "{at}");
                for k in 1..=6 {
                    let steps = s.total_steps(k);
                    for from in 0..=steps + 1 {
                        let scan = |f: &dyn Fn(usize) -> Option<_>| {
                            (from..steps).find_map(|t| f(t).map(|x| (t, x)))
                        };
                        let incoming = scan(&|t| s.incoming(k, t));
                        let outgoing = scan(&|t| s.outgoing(k, t));
                        assert_eq!(s.next_incoming(k, from), incoming, "{at} k={k} from={from}");
                        assert_eq!(s.next_outgoing(k, from), outgoing, "{at} k={k} from={from}");
                    }
                }
            }
        }
    }
}
