//! The simulator's network model and its guarantees: determinism, every
//! member completing and closing (the real protocol core checked at every
//! step), physical lower bounds, slow hosts, racks, and clear errors.

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use rdmc_proto::Algorithm;
use rdmc_sim::{Multicast, Network, Placement, Racks, SimError, SlowHost, SlowLink, simulate};

const RATE_BPS: f64 = 1e9;

fn jittery(seed: u64) -> Network {
    Network {
        jitter: Duration::from_micros(200),
        seed,
        ..Network::uniform(RATE_BPS, Duration::from_micros(20))
    }
}

#[test]
fn the_same_seed_gives_the_same_run_and_another_seed_another() {
    let multicast =
        Multicast::new(Algorithm::BinomialPipeline, 23, 3 << 20).with_block_size(1 << 16);
    let a = simulate(&multicast, &jittery(7)).unwrap();
    let b = simulate(&multicast, &jittery(7)).unwrap();
    assert_eq!(a, b);
    let c = simulate(&multicast, &jittery(8)).unwrap();
    assert_ne!(a.completed, c.completed);
    // Jitter only delays: never faster than without it.
    let calm = simulate(
        &multicast,
        &Network::uniform(RATE_BPS, Duration::from_micros(20)),
    )
    .unwrap();
    assert!(a.max() > calm.max());
}

fn algorithm() -> impl Strategy<Value = Algorithm> {
    proptest::sample::select(Algorithm::ALL.to_vec())
}

fn network() -> impl Strategy<Value = Network> {
    (
        0u64..100,
        proptest::option::of((1usize..4, 1u32..8, any::<bool>())),
        proptest::option::of((0usize..40, 1u32..5)),
        0u64..300,
        any::<u64>(),
        prop_oneof![Just(0u64), 1u64..200_000],
    )
        .prop_map(
            |(latency_us, racks, slow, jitter_us, seed, send_buffer)| Network {
                latency: Duration::from_micros(latency_us),
                racks: racks.map(|(count, quarters, interleaved)| Racks {
                    count,
                    uplink_bps: RATE_BPS * f64::from(quarters) / 4.0,
                    placement: if interleaved {
                        Placement::Interleaved
                    } else {
                        Placement::Blocked
                    },
                }),
                slow_hosts: slow
                    .map(|(host, factor)| SlowHost {
                        host,
                        factor: f64::from(factor),
                    })
                    .into_iter()
                    .collect(),
                jitter: Duration::from_micros(jitter_us),
                seed,
                send_buffer,
                ..Network::uniform(RATE_BPS, Duration::ZERO)
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))), ..ProptestConfig::with_cases(96) })]

    /// Any algorithm, group, message and network: every member completes
    /// the message (with exactly its bytes received: the simulator checks
    /// every receive) and the group closes at every member; no receiver is
    /// faster than its own NIC allows.
    #[test]
    fn every_member_gets_every_byte_and_no_faster_than_its_nic(
        algorithm in algorithm(),
        nodes in 1usize..40,
        size in prop_oneof![Just(0u64), 1u64..5000, 5000u64..300_000],
        block in 1usize..70_000,
        window in 1usize..=rdmc_proto::READY_WINDOW,
        mut network in network(),
    ) {
        network.slow_hosts.retain(|s| s.host < nodes);
        let multicast = Multicast::new(algorithm, nodes, size)
            .with_block_size(block)
            .with_ready_window(window);
        let outcome = simulate(&multicast, &network).unwrap();
        prop_assert_eq!(outcome.completed.len(), nodes);
        // Where a send completes once its bytes left (no send buffer), a
        // member announces receives to one sender at a time: no two blocks
        // ever share its port.
        if network.send_buffer == 0 {
            prop_assert!(outcome.most_inbound <= 1, "{} blocks at once", outcome.most_inbound);
        }
        for rank in 1..nodes {
            let factor = network
                .slow_hosts
                .iter()
                .filter(|s| s.host == rank)
                .map(|s| s.factor)
                .fold(1.0, f64::max);
            let bound = size as f64 * 8.0 / RATE_BPS * factor;
            prop_assert!(outcome.completed[rank] >= bound * (1.0 - 1e-9));
            prop_assert!(outcome.completed[rank] >= outcome.last_block[rank]);
        }
        // With members in more than one rack, the message crosses an uplink.
        if let Some(racks) = network.racks
            && racks.count > 1
            && nodes > nodes.div_ceil(racks.count)
        {
            let bound = size as f64 * 8.0 / racks.uplink_bps;
            prop_assert!(outcome.max() >= bound * (1.0 - 1e-9));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))), ..ProptestConfig::with_cases(96) })]

    /// Early announcement (one sender at a time, the next announced once
    /// the current block has at most `threshold` bytes left to arrive):
    /// every member completes and closes, never receives from more than
    /// two senders at once, and a second sender's block starts only once
    /// the first one's has at most the threshold still to send.
    #[test]
    fn early_announcement_overlaps_two_senders_by_at_most_the_threshold(
        algorithm in algorithm(),
        nodes in 1usize..40,
        size in prop_oneof![Just(0u64), 1u64..5000, 5000u64..300_000],
        block in 1usize..70_000,
        threshold in prop_oneof![Just(0u64), 1u64..2000, 2000u64..100_000],
        latency_us in 0u64..100,
        jitter_us in 0u64..200,
        slow in proptest::option::of((0usize..40, 1u32..5)),
        seed in any::<u64>(),
    ) {
        let multicast = Multicast::new(algorithm, nodes, size)
            .with_block_size(block)
            .with_early_announce(Some(threshold));
        let network = Network {
            slow_hosts: slow
                .filter(|&(host, _)| host < nodes)
                .map(|(host, factor)| SlowHost { host, factor: f64::from(factor) })
                .into_iter()
                .collect(),
            jitter: Duration::from_micros(jitter_us),
            seed,
            ..Network::uniform(RATE_BPS, Duration::from_micros(latency_us))
        };
        let outcome = simulate(&multicast, &network).unwrap();
        prop_assert_eq!(outcome.completed.len(), nodes);
        prop_assert!(outcome.most_inbound <= 2, "{} blocks at once", outcome.most_inbound);
        prop_assert!(
            outcome.most_overlap <= threshold as f64 * (1.0 + 1e-9) + 1e-6,
            "{} bytes left of a block when another started (threshold {threshold})",
            outcome.most_overlap
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))), ..ProptestConfig::with_cases(64) })]

    /// The schedules told of racks and slow members (the hybrid, and the
    /// binomial pipeline with its slow members as leaves), on a network
    /// whose named members are slow: every member completes and closes,
    /// and no member ever receives two blocks at once.
    #[test]
    fn told_topologies_complete_and_never_receive_two_blocks_at_once(
        hybrid in any::<bool>(),
        nodes in 1usize..40,
        racks in proptest::collection::vec(0u32..3, 40),
        slow in proptest::collection::vec(0usize..40, 0..4),
        factor in 1u32..5,
        size in prop_oneof![Just(0u64), 1u64..5000, 5000u64..300_000],
        block in 1usize..70_000,
        latency_us in 0u64..100,
    ) {
        let slow: Vec<usize> = slow.into_iter().filter(|&r| r < nodes).collect();
        let topology = rdmc_proto::schedule::Topology::flat(nodes)
            .and_then(|t| t.with_racks(racks[..nodes].to_vec()))
            .and_then(|t| t.with_slow_members(slow.iter().copied()))
            .unwrap();
        let algorithm = if hybrid { Algorithm::Hybrid } else { Algorithm::BinomialPipeline };
        let multicast = Multicast::new(algorithm, nodes, size)
            .with_block_size(block)
            .with_topology(topology);
        let network = Network {
            slow_hosts: slow
                .iter()
                .map(|&host| SlowHost { host, factor: f64::from(factor) })
                .collect(),
            ..Network::uniform(RATE_BPS, Duration::from_micros(latency_us))
        };
        let outcome = simulate(&multicast, &network).unwrap();
        prop_assert_eq!(outcome.completed.len(), nodes);
        prop_assert!(outcome.most_inbound <= 1, "{} blocks at once", outcome.most_inbound);
    }
}

#[test]
fn a_slow_host_receives_no_faster_than_its_rate() {
    let slow = Network {
        slow_hosts: vec![SlowHost {
            host: 5,
            factor: 2.0,
        }],
        ..Network::uniform(RATE_BPS, Duration::ZERO)
    };
    let multicast = Multicast::new(Algorithm::Chain, 8, 4 << 20).with_block_size(1 << 16);
    let outcome = simulate(&multicast, &slow).unwrap();
    // The chain runs at the pace of its slowest link: everyone after the
    // slow host is held to half the rate as well.
    for rank in 1..8 {
        let bound = if rank >= 5 { 2.0 } else { 1.0 } * outcome.unicast;
        assert!(
            outcome.last_block[rank] >= bound * (1.0 - 1e-9),
            "rank {rank}"
        );
    }
    assert!(outcome.max() >= 2.0 * outcome.unicast);
}

#[test]
fn a_slow_link_slows_only_the_transfers_across_it() {
    let slow = Network {
        slow_links: vec![SlowLink {
            a: 0,
            b: 1,
            factor: 4.0,
        }],
        ..Network::uniform(RATE_BPS, Duration::ZERO)
    };
    let multicast = Multicast::new(Algorithm::Sequential, 3, 1 << 20).with_block_size(1 << 16);
    let outcome = simulate(&multicast, &slow).unwrap();
    let unicast = outcome.unicast;
    assert!((outcome.completed[1] - 4.0 * unicast).abs() < 1e-9);
    assert!((outcome.completed[2] - 5.0 * unicast).abs() < 1e-9);
}

#[test]
fn an_uplink_is_shared_by_every_transfer_across_it() {
    // Sequential from a root in rack 0 to 3 members in rack 1, uplink at
    // half a NIC: each unicast crosses it alone, at half rate.
    let racks = Network {
        racks: Some(Racks {
            count: 2,
            uplink_bps: RATE_BPS / 2.0,
            placement: Placement::Blocked,
        }),
        ..Network::uniform(RATE_BPS, Duration::ZERO)
    };
    let multicast = Multicast::new(Algorithm::Sequential, 8, 1 << 20).with_block_size(1 << 16);
    let outcome = simulate(&multicast, &racks).unwrap();
    let u = outcome.unicast;
    // Ranks 1-3 share rack 0 with the root, 4-7 are across the uplink.
    let want = [0.0, 1.0, 2.0, 3.0, 5.0, 7.0, 9.0, 11.0];
    for (rank, (got, want)) in outcome.completed.iter().zip(want).enumerate().skip(1) {
        assert!((got - want * u).abs() < 1e-9, "rank {rank}");
    }
}

#[test]
fn bad_input_gets_a_clear_error() {
    let m = Multicast::new(Algorithm::Chain, 4, 1000);
    let net = |f: fn(&mut Network)| {
        let mut n = Network::lab();
        f(&mut n);
        n
    };
    let cases: Vec<(Multicast, Network, &str)> = vec![
        (
            Multicast::new(Algorithm::Chain, 0, 10),
            Network::lab(),
            "at least one member",
        ),
        (m.clone().with_block_size(0), Network::lab(), "block size"),
        (
            m.clone().with_ready_window(0),
            Network::lab(),
            "ready window",
        ),
        (
            m.clone().with_ready_window(99),
            Network::lab(),
            "ready window",
        ),
        (m.clone(), net(|n| n.rate_bps = 0.0), "host link rate"),
        (
            m.clone(),
            net(|n| {
                n.slow_hosts.push(SlowHost {
                    host: 4,
                    factor: 2.0,
                })
            }),
            "host 4 does not exist",
        ),
        (
            m.clone(),
            net(|n| {
                n.slow_hosts.push(SlowHost {
                    host: 1,
                    factor: -1.0,
                })
            }),
            "factor",
        ),
        (
            m.clone(),
            net(|n| {
                n.slow_links.push(SlowLink {
                    a: 2,
                    b: 2,
                    factor: 2.0,
                })
            }),
            "itself",
        ),
        (
            m.clone(),
            net(|n| {
                n.racks = Some(Racks {
                    count: 0,
                    uplink_bps: 1e9,
                    placement: Placement::Blocked,
                })
            }),
            "at least one rack",
        ),
        (
            m.clone(),
            net(|n| {
                n.racks = Some(Racks {
                    count: 2,
                    uplink_bps: f64::NAN,
                    placement: Placement::Blocked,
                })
            }),
            "uplink rate",
        ),
    ];
    for (multicast, network, want) in cases {
        let err: SimError = simulate(&multicast, &network).unwrap_err();
        assert!(err.to_string().contains(want), "{err} (wanted {want:?})");
    }
}

#[test]
fn a_group_of_one_completes_at_once() {
    for algorithm in Algorithm::ALL {
        let outcome = simulate(&Multicast::new(algorithm, 1, 1 << 20), &Network::lab()).unwrap();
        assert_eq!(outcome.completed, [0.0]);
        assert_eq!(outcome.max(), 0.0);
    }
}

#[test]
fn a_send_buffer_lets_a_sender_go_on_but_bytes_leave_in_order() {
    // A unicast is no faster with a buffer: one connection, in order.
    let unicast = Multicast::new(Algorithm::Chain, 2, 1 << 20).with_block_size(1 << 16);
    let plain = Network::uniform(RATE_BPS, Duration::from_micros(20));
    let buffered = Network {
        send_buffer: 4 << 20,
        ..plain.clone()
    };
    let a = simulate(&unicast, &plain).unwrap();
    let b = simulate(&unicast, &buffered).unwrap();
    assert!(
        (a.max() - b.max()).abs() < 1e-12,
        "{} vs {}",
        a.max(),
        b.max()
    );
    // In the binomial pipeline: without a buffer a member takes blocks from
    // one sender at a time and the pipeline keeps its lock-step; with one,
    // a sender has blocks to several members on the wire at once (it moves
    // on as soon as its send is buffered), members take blocks from any
    // sender, so blocks share ports; no member receives faster than its
    // NIC either way.
    let pipeline =
        Multicast::new(Algorithm::BinomialPipeline, 16, 16 << 20).with_block_size(1 << 16);
    let a = simulate(&pipeline, &plain).unwrap();
    let b = simulate(&pipeline, &buffered).unwrap();
    assert_eq!(a.most_inbound, 1);
    assert!(b.most_inbound > 1);
    assert!(a.max() >= a.unicast * (1.0 - 1e-9));
    assert!(b.max() >= b.unicast * (1.0 - 1e-9));
}
