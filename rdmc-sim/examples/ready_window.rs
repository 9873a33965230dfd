//! The binomial pipeline's time against the number of receives a member
//! announces ahead (its ready window) and the link latency: 16 members,
//! 1 MiB blocks, the lab's 250 Mbit/s, ratio to one unicast.
//!
//! `cargo run --release -p rdmcast-sim --example ready_window`

use std::time::Duration;

use rdmc_proto::Algorithm;
use rdmc_sim::{Multicast, Network, SimError, simulate};

fn main() -> Result<(), SimError> {
    println!("latency  blocks  window 1  window 2  window 4  window 8");
    for latency_us in [0, 1, 10, 50, 200] {
        for blocks in [64u64, 256] {
            print!("{latency_us:>5} us  {blocks:>6}");
            for window in [1, 2, 4, 8] {
                let multicast = Multicast::new(Algorithm::BinomialPipeline, 16, blocks << 20)
                    .with_block_size(1 << 20)
                    .with_ready_window(window);
                let network = Network::uniform(250e6, Duration::from_micros(latency_us));
                let outcome = simulate(&multicast, &network)?;
                print!("  {:>8.3}", outcome.ratio_to_unicast());
            }
            println!();
        }
    }
    Ok(())
}
