//! `rdmc::collective::Allreduce` against a sequential reference: every
//! group size 1-33, every degree up to 4 and the model's, awkward lengths,
//! every built-in operator and type and a custom one, bad buffers failing
//! every member alike, on the `mem` transport; and one run over `tcp`.

mod common;

use futures::future::join_all;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use rdmc::collective::{
    Allreduce, AllreduceAlgorithm, AllreduceConfig, AllreduceError, DType, ReduceOp, tree_children,
};
use rdmc::{GroupConfig, GroupId, MemCluster, Node, NodeConfig, NodeId};

/// The reduction in the tree's own order: each member's buffer, then its
/// children's subtrees in rank order.
fn reference(bufs: &[Vec<u8>], k: usize, op: &ReduceOp) -> Vec<u8> {
    fn subtree(r: usize, bufs: &[Vec<u8>], k: usize, op: &ReduceOp) -> Vec<u8> {
        let mut acc = bufs[r].clone();
        for c in tree_children(r, k, bufs.len()) {
            op.apply(&mut acc, &subtree(c, bufs, k, op));
        }
        acc
    }
    subtree(0, bufs, k, op)
}

fn ids(n: usize) -> Vec<NodeId> {
    (0..n as u32).map(NodeId).collect()
}

async fn setup(n: usize, config: AllreduceConfig) -> (Vec<Node>, Vec<Allreduce>) {
    let cluster = MemCluster::new(n);
    let nodes = Node::in_memory_all(&cluster, NodeConfig::new()).expect("nodes");
    let members = ids(n);
    let all = join_all(
        nodes
            .iter()
            .map(|node| Allreduce::new(node, GroupId(1000), &members, config.clone())),
    )
    .await;
    let all = all
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .expect("allreduce setup");
    (nodes, all)
}

/// Close every member's allreduce (each must close `Ok`), then shut the
/// nodes down.
async fn close_all(all: Vec<Allreduce>, nodes: Vec<Node>) {
    let closes = join_all(all.into_iter().map(Allreduce::close)).await;
    for (rank, r) in closes.into_iter().enumerate() {
        r.unwrap_or_else(|e| panic!("close rank {rank}: {e}"));
    }
    for node in nodes {
        node.shutdown().await;
    }
}

/// One call on every member with its own buffer; each member's outcome.
async fn call(
    all: &mut [Allreduce],
    mut bufs: Vec<Vec<u8>>,
    op: &ReduceOp,
) -> Vec<(Vec<u8>, Result<(), AllreduceError>)> {
    let runs = all
        .iter_mut()
        .zip(bufs.iter_mut())
        .map(|(a, buf)| async move {
            let r = tokio::time::timeout(common::LONG, a.allreduce(buf, op))
                .await
                .expect("allreduce timed out");
            (buf.clone(), r)
        });
    join_all(runs).await
}

fn values(n: usize, len: usize, seed: u64) -> Vec<Vec<u8>> {
    // Bytes of any pattern, the same for the same seed (splitmix64).
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) as u8
    };
    (0..n).map(|_| (0..len).map(|_| next()).collect()).collect()
}

/// f32 values that are small integers: every sum is exact in any order.
fn exact_f32(n: usize, elems: usize, seed: u64) -> Vec<Vec<u8>> {
    values(n, elems, seed)
        .into_iter()
        .map(|v| {
            v.iter()
                .flat_map(|b| (f32::from(*b) - 128.0).to_ne_bytes())
                .collect()
        })
        .collect()
}

fn ops() -> Vec<ReduceOp> {
    let mut out = Vec::new();
    for dtype in [
        DType::F32,
        DType::F64,
        DType::I32,
        DType::I64,
        DType::U32,
        DType::U64,
    ] {
        out.push(ReduceOp::sum(dtype));
        out.push(ReduceOp::min(dtype));
        out.push(ReduceOp::max(dtype));
    }
    out
}

fn xor() -> ReduceOp {
    ReduceOp::custom(1, |acc, inc| {
        acc.iter_mut().zip(inc).for_each(|(a, b)| *a ^= b)
    })
}

async fn check(all: &mut [Allreduce], k: usize, bufs: Vec<Vec<u8>>, op: &ReduceOp) {
    let want = reference(&bufs, k, op);
    for (rank, (got, r)) in call(all, bufs, op).await.into_iter().enumerate() {
        r.unwrap_or_else(|e| panic!("rank {rank}, {op:?}: {e}"));
        assert_eq!(got, want, "rank {rank}, {op:?}");
    }
}

async fn every_size_and_degree(n: usize) {
    let mut degrees = vec![1, 2, 3];
    degrees.retain(|&k| k < n.max(2));
    degrees.push(0); // the model's choice
    degrees.push(usize::MAX); // the ring
    degrees.push(usize::MAX - 1); // the ring, each step in 3 pieces
    degrees.push(usize::MAX - 2); // recursive halving and doubling
    for k in degrees {
        // Not the tree: reduced in an order of its own.
        let ring = k >= usize::MAX - 2;
        let pieces = if k == usize::MAX - 1 { 3 } else { 1 };
        let mut config = AllreduceConfig::new()
            .with_ring_pieces(pieces)
            .with_chunk_size(1000)
            .with_algorithm(match k {
                k if k == usize::MAX - 2 => AllreduceAlgorithm::HalvingDoubling,
                _ if ring => AllreduceAlgorithm::Ring,
                _ => AllreduceAlgorithm::Tree,
            });
        if k > 0 && !ring {
            config = config.with_degree(k);
        }
        let (nodes, mut all) = setup(n, config).await;
        let k = all[0].degree();
        for (i, op) in ops().into_iter().enumerate() {
            // The ring and the halving reduce each segment in an order of
            // their own: only the operators whose result does not depend
            // on the order.
            if ring && i < 6 {
                continue;
            }
            let e = op.element_size();
            // Every operator at 1 and 1023 elements; 0 and 3 for some.
            let lengths: &[usize] = if i % 4 == 0 {
                &[0, 1, 3, 1023]
            } else {
                &[1, 1023]
            };
            for &elems in lengths {
                // Raw bytes: NaNs included, whose min/max are still
                // deterministic in a fixed order.
                check(
                    &mut all,
                    k,
                    values(n, elems * e, (n * 31 + elems) as u64),
                    &op,
                )
                .await;
            }
        }
        check(
            &mut all,
            k,
            exact_f32(n, 257, n as u64),
            &ReduceOp::sum(DType::F32),
        )
        .await;
        for len in [0, 1, 3, 1023] {
            check(&mut all, k, values(n, len, len as u64), &xor()).await;
        }

        // A partial element on the last member fails every member alike,
        // and the allreduce goes on working.
        let mut bufs = values(n, 12, 7);
        bufs[n - 1].truncate(3 + 4 * (n % 2));
        let before = bufs.clone();
        let out = call(&mut all, bufs, &ReduceOp::sum(DType::I32)).await;
        for (rank, (got, r)) in out.into_iter().enumerate() {
            match r {
                Err(AllreduceError::PartialElement {
                    member, element: 4, ..
                }) => {
                    assert_eq!(member, NodeId(n as u32 - 1), "rank {rank}")
                }
                other => panic!("rank {rank}: {other:?}"),
            }
            assert_eq!(
                got, before[rank],
                "rank {rank}: a failed call changed the buffer"
            );
        }
        if n > 1 {
            // A length mismatch on the last member fails every member alike.
            let mut bufs = values(n, 4 * 300, 9);
            bufs[n - 1].truncate(4 * 299);
            let out = call(&mut all, bufs, &ReduceOp::sum(DType::U32)).await;
            for (rank, (_, r)) in out.into_iter().enumerate() {
                match r {
                    Err(AllreduceError::LengthMismatch {
                        member,
                        len,
                        expected,
                        ..
                    }) => {
                        assert_eq!(
                            (member, len, expected),
                            (NodeId(n as u32 - 1), 4 * 299, 4 * 300)
                        );
                    }
                    other => panic!("rank {rank}: {other:?}"),
                }
            }
        }
        check(
            &mut all,
            k,
            values(n, 8 * 100, 3),
            &ReduceOp::sum(DType::I64),
        )
        .await;

        close_all(all, nodes).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_group_size_from_1_to_33_matches_the_reference() {
    for n in 1..=33 {
        every_size_and_degree(n).await;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))), ..ProptestConfig::with_cases(24) })]

    #[test]
    fn random_groups_degrees_chunks_floats_rings_lanes_pieces_and_blocks_match_the_reference(
        n in 1usize..=33, k in 1usize..8, chunk in 1usize..300, elems in 0usize..700, seed: u64, algo in 0usize..3,
        lanes in 1usize..4, pieces in 1usize..5, block in proptest::option::of(1usize..200),
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async {
            let algorithm = [AllreduceAlgorithm::Tree, AllreduceAlgorithm::Ring, AllreduceAlgorithm::HalvingDoubling][algo];
            let ring = algo > 0;
            let config = AllreduceConfig::new()
                .with_degree(k)
                .with_chunk_size(chunk)
                .with_algorithm(algorithm)
                .with_ring_lanes(lanes)
                .with_ring_pieces(pieces);
            // Small blocks: ring and halving messages of many blocks (by
            // default each is one block).
            let config = match block {
                Some(b) => config.with_group_config(GroupConfig::new().with_block_size(b)),
                None => config,
            };
            let (nodes, mut all) = setup(n, config).await;
            let k = all[0].degree();
            // Arbitrary f64 bits: the sum must equal the reference's bits,
            // since both add in the same order.
            let bufs = values(n, elems * 8, seed);
            // The ring's and the halving's segments are reduced in orders of
            // their own: there, an operator whose result does not depend on
            // the order.
            let op = ReduceOp::sum(if ring { DType::U64 } else { DType::F64 });
            let want = reference(&bufs, k, &op);
            // Twice: the second call starts at another lane when the
            // first's 2 (n - 1) messages are not a multiple of the lanes.
            for _ in 0..2 {
                for (rank, (got, r)) in call(&mut all, bufs.clone(), &op).await.into_iter().enumerate() {
                    r.unwrap();
                    assert!(got == want, "rank {rank}: not the reference");
                }
            }
            close_all(all, nodes).await;
        });
    }
}

/// Members as separate tasks over tcp on loopback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allreduce_over_tcp_between_tasks() {
    let n = 6;
    let (nodes, _layout) =
        common::cluster::<common::TcpFixture>(n, common::Tuning::default()).await;
    let members = ids(n);
    let bufs = exact_f32(n, 100_000, 5);
    let op = ReduceOp::sum(DType::F32);
    let config = AllreduceConfig::new().with_chunk_size(16 * 1024);
    let k = config.degree(n);
    let want = reference(&bufs, k, &op);
    let tasks: Vec<_> = nodes
        .into_iter()
        .zip(bufs)
        .map(|(node, mut buf)| {
            let (members, op, config) = (members.clone(), op.clone(), config.clone());
            tokio::spawn(async move {
                let mut a = Allreduce::new(&node, GroupId(77), &members, config).await?;
                for _ in 0..3 {
                    let mut copy = buf.clone();
                    a.allreduce(&mut copy, &op).await?;
                    buf = copy;
                    // Reduce the result again: three rounds multiply by n^2.
                }
                a.close().await?;
                node.shutdown().await;
                Ok::<_, AllreduceError>(buf)
            })
        })
        .collect();
    let mut want3 = want;
    for _ in 0..2 {
        let round: Vec<Vec<u8>> = vec![want3.clone(); n];
        want3 = reference(&round, k, &op);
    }
    for (rank, t) in tasks.into_iter().enumerate() {
        let got = tokio::time::timeout(common::LONG, t)
            .await
            .expect("timed out")
            .expect("task")
            .unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        assert_eq!(got, want3, "rank {rank}");
    }
}

/// A huge expected size (the ring's blocks at their 4 MiB cap) and steps
/// of several blocks each still reduce right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ring_with_a_huge_expected_size_and_multi_block_steps() {
    let n = 3;
    let config = AllreduceConfig::new()
        .with_algorithm(AllreduceAlgorithm::Ring)
        .with_expected_size(1 << 40);
    let (nodes, mut all) = setup(n, config).await;
    // 3 * 4 MiB + a little: each step's segment is more than one 4 MiB block.
    let op = ReduceOp::sum(DType::U32);
    let bufs = values(n, (3 << 22) + 4 * 301, 11);
    let k = all[0].degree();
    check(&mut all, k, bufs, &op).await;
    close_all(all, nodes).await;
}

/// Recursive halving and doubling: a member that dies between calls fails
/// the next call of every other member with `MemberFailed` naming it, also
/// where it is no partner (the members' common group reports it); with and
/// without the fold, the dead one set aside by it or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn halving_a_dead_member_fails_every_survivor_naming_it() {
    for (n, dead) in [(8, 5), (6, 3), (6, 4), (5, 0)] {
        let cluster = MemCluster::new(n);
        let nodes = Node::in_memory_all(&cluster, NodeConfig::new()).expect("nodes");
        let members = ids(n);
        let config = AllreduceConfig::new().with_algorithm(AllreduceAlgorithm::HalvingDoubling);
        let mut all = join_all(
            nodes
                .iter()
                .map(|node| Allreduce::new(node, GroupId(1000), &members, config.clone())),
        )
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .expect("allreduce setup");
        let op = ReduceOp::sum(DType::U64);
        let bufs = values(n, 8 * 1000, n as u64);
        check(&mut all, 1, bufs.clone(), &ReduceOp::max(DType::U32)).await;
        cluster.kill(NodeId(dead as u32));
        let runs = all
            .iter_mut()
            .zip(bufs)
            .enumerate()
            .filter(|(rank, _)| *rank != dead)
            .map(|(rank, (a, mut buf))| {
                let op = op.clone();
                async move {
                    let r = tokio::time::timeout(common::LONG, a.allreduce(&mut buf, &op))
                        .await
                        .unwrap_or_else(|_| panic!("n = {n}, rank {rank}: timed out"));
                    (rank, r)
                }
            });
        for (rank, r) in join_all(runs).await {
            match r {
                Err(AllreduceError::MemberFailed { member, .. }) => {
                    assert_eq!(member, NodeId(dead as u32), "n = {n}, rank {rank}")
                }
                other => panic!("n = {n}, rank {rank}: {other:?}"),
            }
        }
        drop(all);
        for (rank, node) in nodes.into_iter().enumerate() {
            if rank != dead {
                node.shutdown().await;
            }
        }
    }
}

/// `Auto` at 8 members on the lab's link with a flat tree (degree 7):
/// the tree for a few bytes, the ring for a mebibyte (never the halving);
/// calls of both kinds taken in turn on the same allreduce stay right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_takes_turns_between_the_tree_and_the_ring() {
    let n = 8;
    let (nodes, mut all) = setup(n, AllreduceConfig::new().with_degree(7)).await;
    assert_eq!(all[0].algorithm_for(8), AllreduceAlgorithm::Tree);
    assert_eq!(all[0].algorithm_for(1 << 20), AllreduceAlgorithm::Ring);
    let k = all[0].degree();
    let op = ReduceOp::sum(DType::U64);
    for round in 0..2u64 {
        check(&mut all, k, values(n, 8, round), &op).await;
        check(&mut all, k, values(n, 1 << 20, round + 10), &op).await;
    }
    close_all(all, nodes).await;
}

/// Recursive halving and doubling with every member closing as soon as
/// its own calls are done, each member a task of its own: a member still
/// in its last call sees the others' groups (the common one among them)
/// close, and must still finish its call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn halving_members_closing_as_soon_as_they_are_done() {
    for n in [2, 3, 5, 8, 13, 16] {
        let cluster = MemCluster::new(n);
        let nodes = Node::in_memory_all(&cluster, NodeConfig::new()).expect("nodes");
        let members = ids(n);
        let op = ReduceOp::sum(DType::U64);
        let bufs = values(n, 8 * 3000, n as u64);
        let want = reference(&bufs, 1, &op);
        let config = AllreduceConfig::new().with_algorithm(AllreduceAlgorithm::HalvingDoubling);
        let tasks: Vec<_> = nodes
            .into_iter()
            .zip(bufs)
            .map(|(node, buf)| {
                let (members, op, config) = (members.clone(), op.clone(), config.clone());
                tokio::spawn(async move {
                    let mut a = Allreduce::new(&node, GroupId(50), &members, config).await?;
                    let mut outs = Vec::new();
                    for _ in 0..3 {
                        let mut copy = buf.clone();
                        a.allreduce(&mut copy, &op).await?;
                        outs.push(copy);
                    }
                    a.close().await?;
                    node.shutdown().await;
                    Ok::<_, AllreduceError>(outs)
                })
            })
            .collect();
        for (rank, t) in tasks.into_iter().enumerate() {
            let outs = tokio::time::timeout(common::LONG, t)
                .await
                .expect("timed out")
                .expect("task")
                .unwrap_or_else(|e| panic!("n = {n}, rank {rank}: {e}"));
            assert!(outs.iter().all(|o| *o == want), "n = {n}, rank {rank}");
        }
    }
}
