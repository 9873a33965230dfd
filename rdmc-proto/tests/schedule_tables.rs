//! The worked examples of rdmc-original.md §2.5-2.6, cell by cell, and the
//! closed forms of seed 001 Sec. 4.4-4.5 for powers of two.

use rdmc_proto::schedule::{Algorithm, NodeSchedule, Plan, Schedule, Transfer};

/// One string per step: the plan's transfers as `src→dst:bN`, sorted by source.
fn plan_rows(algorithm: Algorithm, n: usize, k: usize) -> Vec<String> {
    let plan = Plan::new(algorithm, n, k).unwrap();
    plan.verify().unwrap();
    (0..plan.steps)
        .map(|step| {
            plan.transfers
                .iter()
                .filter(|t| t.step == step)
                .map(|t| format!("{}→{}:b{}", t.from, t.to, t.block))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .collect()
}

/// One string per (node, step) cell in the reference's "one row per node"
/// style, built from `incoming` and `outgoing` (not from the plan).
fn node_rows(n: usize, k: usize) -> Vec<Vec<String>> {
    (0..n)
        .map(|rank| {
            let s = NodeSchedule::new(Algorithm::BinomialPipeline, n, rank).unwrap();
            (0..s.total_steps(k))
                .map(|t| {
                    let mut parts = Vec::new();
                    if let Some(i) = s.incoming(k, t) {
                        parts.push(format!("recv b{}←{}", i.block, i.peer));
                    }
                    if let Some(o) = s.outgoing(k, t) {
                        parts.push(format!("send b{}→{}", o.block, o.peer));
                    }
                    if parts.is_empty() {
                        "–".to_owned()
                    } else {
                        parts.join("; ")
                    }
                })
                .collect()
        })
        .collect()
}

fn table(rows: &[&str]) -> Vec<Vec<String>> {
    rows.iter()
        .map(|r| r.split(" | ").map(str::to_owned).collect())
        .collect()
}

fn first_blocks(n: usize) -> Vec<Option<(usize, usize)>> {
    (0..n)
        .map(|rank| {
            NodeSchedule::new(Algorithm::BinomialPipeline, n, rank)
                .unwrap()
                .first_block()
                .map(|t| (t.peer, t.block))
        })
        .collect()
}

fn connections(algorithm: Algorithm, n: usize, rank: usize) -> Vec<usize> {
    NodeSchedule::new(algorithm, n, rank).unwrap().connections()
}

const BP: Algorithm = Algorithm::BinomialPipeline;

#[test]
fn binomial_n8_k3() {
    assert_eq!(
        plan_rows(BP, 8, 3),
        [
            "0→1:b0",
            "0→2:b1, 1→3:b0",
            "0→4:b2, 1→5:b0, 2→6:b1, 3→7:b0",
            "0→1:b2, 2→3:b1, 3→2:b0, 4→5:b2, 5→4:b0, 6→7:b1, 7→6:b0",
            "0→2:b2, 1→3:b2, 3→1:b1, 4→6:b2, 5→7:b2, 6→4:b1, 7→5:b1",
        ]
    );
    assert_eq!(
        node_rows(8, 3),
        table(&[
            "send b0→1 | send b1→2 | send b2→4 | send b2→1 | send b2→2",
            "recv b0←0 | send b0→3 | send b0→5 | recv b2←0 | recv b1←3; send b2→3",
            "– | recv b1←0 | send b1→6 | recv b0←3; send b1→3 | recv b2←0",
            "– | recv b0←1 | send b0→7 | recv b1←2; send b0→2 | recv b2←1; send b1→1",
            "– | – | recv b2←0 | recv b0←5; send b2→5 | recv b1←6; send b2→6",
            "– | – | recv b0←1 | recv b2←4; send b0→4 | recv b1←7; send b2→7",
            "– | – | recv b1←2 | recv b0←7; send b1→7 | recv b2←4; send b1→4",
            "– | – | recv b0←3 | recv b1←6; send b0→6 | recv b2←5; send b1→5",
        ])
    );
    assert_eq!(
        first_blocks(8),
        [
            None,
            Some((0, 0)),
            Some((0, 1)),
            Some((1, 0)),
            Some((0, 2)),
            Some((1, 0)),
            Some((2, 1)),
            Some((3, 0)),
        ]
    );
}

#[test]
fn binomial_n6_k4() {
    assert_eq!(
        plan_rows(BP, 6, 4),
        [
            "0→1:b0",
            "0→2:b1, 1→3:b0",
            "0→4:b2, 2→3:b1, 3→5:b0",
            "0→5:b3, 1→4:b0, 3→1:b1, 4→3:b2, 5→2:b0",
            "0→1:b3, 1→4:b1, 2→5:b1, 3→2:b2, 5→3:b3",
            "1→4:b3, 2→5:b2, 4→1:b2, 5→2:b3",
        ]
    );
    assert_eq!(
        node_rows(6, 4),
        table(&[
            "send b0→1 | send b1→2 | send b2→4 | send b3→5 | send b3→1 | –",
            "recv b0←0 | send b0→3 | – | recv b1←3; send b0→4 | recv b3←0; send b1→4 | recv b2←4; send b3→4",
            "– | recv b1←0 | send b1→3 | recv b0←5 | recv b2←3; send b1→5 | recv b3←5; send b2→5",
            "– | recv b0←1 | recv b1←2; send b0→5 | recv b2←4; send b1→1 | recv b3←5; send b2→2 | –",
            "– | – | recv b2←0 | recv b0←1; send b2→3 | recv b1←1 | recv b3←1; send b2→1",
            "– | – | recv b0←3 | recv b3←0; send b0→2 | recv b1←2; send b3→3 | recv b2←2; send b3→2",
        ])
    );
    assert_eq!(
        first_blocks(6),
        [
            None,
            Some((0, 0)),
            Some((0, 1)),
            Some((1, 0)),
            Some((0, 2)),
            Some((3, 0)),
        ]
    );
}

/// The k = 1 redirect of rule (d): 4 and 5 get block 0 from 0 and 3, the
/// peers of their first-block receives, not from their twins.
#[test]
fn binomial_n6_k1_redirect() {
    assert_eq!(
        plan_rows(BP, 6, 1),
        ["0→1:b0", "0→2:b0, 1→3:b0", "0→4:b0, 3→5:b0"]
    );
    for rank in 1..6 {
        let s = NodeSchedule::new(BP, 6, rank).unwrap();
        let first = (0..3).find_map(|t| s.incoming(1, t));
        assert_eq!(first, s.first_block_for(1), "rank {rank}");
    }
}

#[test]
fn binomial_n3_k2() {
    assert_eq!(plan_rows(BP, 3, 2), ["0→1:b0", "0→2:b1", "1→2:b0, 2→1:b1"]);
}

#[test]
fn other_algorithms_n5_k2() {
    assert_eq!(
        plan_rows(Algorithm::Chain, 5, 2),
        [
            "0→1:b0",
            "0→1:b1, 1→2:b0",
            "1→2:b1, 2→3:b0",
            "2→3:b1, 3→4:b0",
            "3→4:b1"
        ]
    );
    assert_eq!(
        plan_rows(Algorithm::Sequential, 5, 2),
        [
            "0→1:b0", "0→1:b1", "0→2:b0", "0→2:b1", "0→3:b0", "0→3:b1", "0→4:b0", "0→4:b1"
        ]
    );
    assert_eq!(
        plan_rows(Algorithm::BinomialTree, 5, 2),
        [
            "0→1:b0",
            "0→1:b1",
            "0→2:b0, 1→3:b0",
            "0→2:b1, 1→3:b1",
            "0→4:b0",
            "0→4:b1"
        ]
    );
}

/// rdmc-original.md §2.5, "Degenerate sizes": for n = 2 every algorithm is
/// "the root sends blocks 0..k−1 to node 1".
#[test]
fn two_members_every_algorithm() {
    for algorithm in Algorithm::ALL {
        for k in 1..=9 {
            let expected: Vec<String> = (0..k).map(|b| format!("0→1:b{b}")).collect();
            assert_eq!(plan_rows(algorithm, 2, k), expected, "{algorithm} k={k}");
        }
    }
}

/// rdmc-original.md §2.5(f) and §2.2-2.4 connection orders.
#[test]
fn connection_lists() {
    assert_eq!(connections(BP, 8, 0), [1, 2, 4]);
    assert_eq!(connections(BP, 8, 1), [0, 3, 5]);
    assert_eq!(connections(BP, 8, 6), [7, 4, 2]);
    assert_eq!(connections(BP, 6, 0), [1, 4, 2, 5]);
    assert_eq!(connections(BP, 6, 1), [4, 0, 3]);
    assert_eq!(connections(BP, 6, 3), [2, 5, 1, 4]);
    assert_eq!(connections(BP, 6, 5), [2, 3, 0]);
    assert!(connections(BP, 1, 0).is_empty());

    assert_eq!(connections(Algorithm::Sequential, 5, 0), [1, 2, 3, 4]);
    assert_eq!(connections(Algorithm::Sequential, 5, 3), [0]);
    assert_eq!(connections(Algorithm::Chain, 5, 0), [1]);
    assert_eq!(connections(Algorithm::Chain, 5, 2), [1, 3]);
    assert_eq!(connections(Algorithm::Chain, 5, 4), [3]);
    assert!(connections(Algorithm::Chain, 1, 0).is_empty());
    assert_eq!(connections(Algorithm::BinomialTree, 8, 0), [1, 2, 4]);
    assert_eq!(connections(Algorithm::BinomialTree, 8, 1), [0, 3, 5]);
    assert_eq!(connections(Algorithm::BinomialTree, 8, 3), [1, 7]);
    assert_eq!(connections(Algorithm::BinomialTree, 8, 6), [2]);
}

/// rdmc-original.md §2.5(e), POT closed form: member v's first block comes
/// from `v XOR 2^h` (h = highest set bit) and is block `tz(v)`, at step h.
#[test]
fn pot_first_block_closed_form() {
    for l in 1..=10 {
        let n = 1usize << l;
        for v in 1..n {
            let h = usize::BITS as usize - 1 - v.leading_zeros() as usize;
            let s = NodeSchedule::new(BP, n, v).unwrap();
            let expected = Transfer {
                peer: v ^ (1 << h),
                block: v.trailing_zeros() as usize,
            };
            assert_eq!(s.first_block(), Some(expected), "n={n} v={v}");
            let k = l + 3;
            assert_eq!(
                (0..s.total_steps(k)).find_map(|t| s.incoming(k, t).map(|i| (t, i))),
                Some((h, expected)),
                "n={n} v={v}"
            );
        }
    }
}

/// rdmc-original.md §2.5(e): the first incoming step is at most l, and the
/// first block is the same transfer for every k (block clamped to k − 1).
#[test]
fn first_block_independent_of_k() {
    for n in 2..=140usize {
        let l = usize::BITS as usize - 1 - n.leading_zeros() as usize;
        for rank in 1..n {
            let s = NodeSchedule::new(BP, n, rank).unwrap();
            let fb = s.first_block().unwrap();
            for k in [1, 2, 3, 5, 8, 13, 64] {
                let first = (0..s.total_steps(k)).find_map(|t| s.incoming(k, t).map(|i| (t, i)));
                let (t, i) = first.unwrap();
                assert!(t <= l, "n={n} rank={rank} k={k}: first receive at {t}");
                assert_eq!(i.peer, fb.peer, "n={n} rank={rank} k={k}");
                assert_eq!(i.block, fb.block.min(k - 1), "n={n} rank={rank} k={k}");
            }
        }
    }
}

/// Seed 001 Sec. 4.4: for n = 2^l, at step j node i sends to `i XOR 2^(j%l)`
/// the block `min(j, k−1)` if i = 0; nothing if σ = 1; `min(j−l+r, k−1)` if
/// `j−l+r ≥ 0` with `r = tr_ze(σ)`; else nothing — where σ is i rotated right
/// by j%l within l bits.
#[test]
fn pot_matches_seed_001_closed_form() {
    fn rotr(x: usize, by: usize, l: usize) -> usize {
        let mask = (1usize << l) - 1;
        ((x >> by) | (x << (l - by))) & mask
    }
    for l in 1..=6usize {
        let n = 1usize << l;
        for k in [1, 2, 3, 4, 5, 7, 8, 16, 33] {
            for i in 0..n {
                let s = NodeSchedule::new(BP, n, i).unwrap();
                assert_eq!(s.total_steps(k), l + k - 1);
                for j in 0..l + k - 1 {
                    let sigma = rotr(i, j % l, l);
                    let r = sigma.trailing_zeros() as usize;
                    let block = if sigma == 0 {
                        Some(j.min(k - 1))
                    } else if sigma == 1 {
                        None
                    } else if j + r >= l {
                        Some((j + r - l).min(k - 1))
                    } else {
                        None
                    };
                    let expected = block.map(|block| Transfer {
                        peer: i ^ (1 << (j % l)),
                        block,
                    });
                    assert_eq!(s.outgoing(k, j), expected, "n={n} k={k} i={i} j={j}");
                }
            }
        }
    }
}

/// Seed 001 Sec. 4.5: in every steady step j (l ≤ j ≤ l+k−2) of a group of
/// n = 2^l ≥ 4, the average slack is `2(1 − (l−1)/(n−2))`.
///
/// This holds exactly, for every steady step (even those sending capped
/// "virtual" blocks), when the average is taken over the n − 2 *relays* that
/// send in step j: the root has no receive step, so its slack is undefined
/// and it is not counted. (Counting it with slack 0 would divide the same sum
/// by n − 1 instead.) Equivalently: the slacks of a steady step sum to
/// `2(n − l − 1)` over exactly `n − 2` relays.
#[test]
fn pot_average_slack_in_steady_steps() {
    for l in 2..=7usize {
        let n = 1usize << l;
        for k in [2, 3, 5, 10, 40] {
            let plan = Plan::new(BP, n, k).unwrap();
            let mut got = vec![vec![None; k]; n];
            for t in &plan.transfers {
                got[t.to][t.block] = Some(t.step);
            }
            for j in l..=l + k - 2 {
                let relays: Vec<usize> = plan
                    .transfers
                    .iter()
                    .filter(|t| t.step == j && t.from != 0)
                    .map(|t| j - got[t.from][t.block].unwrap())
                    .collect();
                assert_eq!(relays.len(), n - 2, "n={n} k={k} j={j}");
                let sum: usize = relays.iter().sum();
                assert_eq!(sum, 2 * (n - l - 1), "n={n} k={k} j={j}");
                // sum / (n−2) == 2(1 − (l−1)/(n−2)), cross-multiplied.
                assert_eq!(sum * (n - 2), 2 * ((n - 2) - (l - 1)) * relays.len());
                let avg = sum as f64 / relays.len() as f64;
                let formula = 2.0 * (1.0 - (l as f64 - 1.0) / (n as f64 - 2.0));
                assert!((avg - formula).abs() < 1e-12);
                // The root also sends at every steady step.
                assert!(plan.transfers.iter().any(|t| t.step == j && t.from == 0));
            }
        }
    }
}
