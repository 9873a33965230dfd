//! Bounded-exhaustive search for stalls: every algorithm, every group size
//! up to 40, every ready window, both send semantics (a send completes once
//! its bytes left, as over RDMA; or once the transport buffered them, as
//! over TCP), flat, with a slow member and in racks, for messages of one,
//! a few and many blocks — every member must complete the message and
//! close. The simulator drives the real protocol core of every member, so a
//! schedule or announcement rule that can deadlock shows up here as
//! [`SimError::Stalled`], deterministically (no random case drawn).

use std::time::Duration;

use rdmc_proto::Algorithm;
use rdmc_proto::READY_WINDOW;
use rdmc_proto::schedule::Topology;
use rdmc_sim::{Multicast, Network, Placement, Racks, SimError, SlowHost, simulate};

const RATE_BPS: f64 = 1e9;
const BLOCK: usize = 1000;

/// The network and schedule variations swept.
#[derive(Clone, Copy, Debug)]
enum Shape {
    Flat,
    /// The last member at a quarter rate, and the schedule told so.
    SlowMember,
    /// Three racks, members dealt out round-robin, uplinks at half rate,
    /// and the schedule told of them.
    Racks,
}

fn network(shape: Shape, nodes: usize, send_buffer: u64) -> Network {
    let mut network = Network {
        send_buffer,
        ..Network::uniform(RATE_BPS, Duration::from_micros(5))
    };
    match shape {
        Shape::Flat => {}
        Shape::SlowMember => network.slow_hosts.push(SlowHost {
            host: nodes - 1,
            factor: 4.0,
        }),
        Shape::Racks => {
            network.racks = Some(Racks {
                count: 3,
                uplink_bps: RATE_BPS / 2.0,
                placement: Placement::Interleaved,
            });
        }
    }
    network
}

fn topology(shape: Shape, nodes: usize, buffered: bool) -> Topology {
    let flat = Topology::flat(nodes).expect("a group of at least one");
    let topology = match shape {
        Shape::Flat => flat,
        Shape::SlowMember => flat.with_slow_members([nodes - 1]).expect("in range"),
        Shape::Racks => flat
            .with_racks((0..nodes).map(|r| (r % 3) as u32).collect())
            .expect("one rack per member"),
    };
    topology.with_buffered_sends(buffered)
}

/// Runs every combination for one algorithm; returns how many ran.
fn sweep(algorithm: Algorithm) -> usize {
    let mut runs = 0;
    for nodes in 1..=40 {
        for shape in [Shape::Flat, Shape::SlowMember, Shape::Racks] {
            for send_buffer in [0, 1, 64 * BLOCK as u64] {
                let buffered = send_buffer > 0;
                let network = network(shape, nodes, send_buffer);
                let topology = topology(shape, nodes, buffered);
                // One block, a few (fewer than a window), and more blocks
                // than the pipeline has steps to fill, the last one short.
                for size in [BLOCK as u64 / 2, 3 * BLOCK as u64, 37 * BLOCK as u64 + 1] {
                    for window in 1..=READY_WINDOW {
                        let multicast = Multicast::new(algorithm, nodes, size)
                            .with_block_size(BLOCK)
                            .with_ready_window(window)
                            .with_topology(topology.clone());
                        match simulate(&multicast, &network) {
                            Ok(outcome) => assert_eq!(outcome.completed.len(), nodes),
                            Err(e) => panic!(
                                "{algorithm}, {nodes} nodes, {shape:?}, send buffer \
                                 {send_buffer}, {size} bytes, window {window}: {e}"
                            ),
                        }
                        runs += 1;
                    }
                }
            }
        }
    }
    runs
}

#[test]
fn sequential_never_stalls() {
    assert_eq!(sweep(Algorithm::Sequential), 40 * 3 * 3 * 3 * READY_WINDOW);
}

#[test]
fn chain_never_stalls() {
    assert_eq!(sweep(Algorithm::Chain), 40 * 3 * 3 * 3 * READY_WINDOW);
}

#[test]
fn binomial_tree_never_stalls() {
    assert_eq!(
        sweep(Algorithm::BinomialTree),
        40 * 3 * 3 * 3 * READY_WINDOW
    );
}

#[test]
fn binomial_pipeline_never_stalls() {
    assert_eq!(
        sweep(Algorithm::BinomialPipeline),
        40 * 3 * 3 * 3 * READY_WINDOW
    );
}

#[test]
fn hybrid_never_stalls() {
    assert_eq!(sweep(Algorithm::Hybrid), 40 * 3 * 3 * 3 * READY_WINDOW);
}

/// The first failing case found (by the model's property test): a
/// 22-member binomial pipeline, 1-byte blocks, one receive announced at a
/// time, sends complete once one byte is buffered. The simulator then
/// narrowed the window itself, holding ready-for-blocks back and
/// releasing them in the order the members emitted them; announcements
/// riding in front of a block are emitted after those of later steps, so
/// the members waited on each other in a cycle.
#[test]
fn the_first_stall_found_completes() {
    let multicast = Multicast::new(Algorithm::BinomialPipeline, 22, 192_187)
        .with_block_size(1)
        .with_ready_window(1);
    let network = Network {
        send_buffer: 1,
        ..Network::uniform(1e9, Duration::ZERO)
    };
    let outcome = simulate(&multicast, &network).expect("no stall");
    assert_eq!(outcome.completed.len(), 22);
    assert!(outcome.max() >= network.unicast_seconds(192_187));
}

/// What the command line reproduced: `rdmc simulate --nodes 16 --size 1MiB
/// --block-size 4KiB --algorithm binomial-pipeline --send-buffer 4MiB
/// --ready-window 1`, for every group size the stall was seen at (5 to 33)
/// and windows 1 and 2.
#[test]
fn buffered_binomial_pipelines_with_narrow_windows_complete() {
    for nodes in 3..=33 {
        for window in [1, 2] {
            let multicast = Multicast::new(Algorithm::BinomialPipeline, nodes, 1 << 20)
                .with_block_size(4096)
                .with_ready_window(window)
                .with_topology(
                    Topology::flat(nodes)
                        .expect("a group")
                        .with_buffered_sends(true),
                );
            let network = Network {
                send_buffer: 4 << 20,
                ..Network::default()
            };
            match simulate(&multicast, &network) {
                Ok(outcome) => assert_eq!(outcome.completed.len(), nodes),
                Err(e @ SimError::Stalled { .. }) => panic!("{nodes} nodes, window {window}: {e}"),
                Err(e) => panic!("{nodes} nodes, window {window}: unexpected {e}"),
            }
        }
    }
}
