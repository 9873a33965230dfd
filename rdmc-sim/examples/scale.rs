//! Time the simulator itself: every algorithm at a group size (default
//! 4096) with 256 MiB in 1 MiB blocks, on the lab's network.
//!
//! `cargo run --release -p rdmcast-sim --example scale -- 4096`

use std::time::Instant;

use rdmc_proto::Algorithm;
use rdmc_sim::{Multicast, Network, simulate};

fn main() -> Result<(), rdmc_sim::SimError> {
    let nodes = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(4096);
    let block: usize = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1 << 20);
    let window: usize = std::env::args()
        .nth(3)
        .and_then(|a| a.parse().ok())
        .unwrap_or(rdmc_proto::READY_WINDOW);
    for algorithm in Algorithm::ALL {
        let started = Instant::now();
        let multicast = Multicast::new(algorithm, nodes, 256 << 20)
            .with_block_size(block)
            .with_ready_window(window);
        let outcome = simulate(&multicast, &Network::lab())?;
        println!(
            "{algorithm:>18} n={nodes}: {:.3} s virtual ({:.2}× unicast), {} events, {:.2} s wall",
            outcome.max(),
            outcome.ratio_to_unicast(),
            outcome.events,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
