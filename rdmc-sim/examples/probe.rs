use rdmc::Algorithm;
use rdmc_sim::{Multicast, Network, simulate};
use std::time::Duration;
fn main() {
    for lat_us in [0u64, 1, 10, 50, 200] {
        for k in [64usize, 256] {
            for w in [1usize, 2, 4, 8] {
                let m = Multicast::new(Algorithm::BinomialPipeline, 16, (k as u64) << 20)
                    .with_block_size(1 << 20)
                    .with_ready_window(w);
                let o =
                    simulate(&m, &Network::uniform(250e6, Duration::from_micros(lat_us))).unwrap();
                print!("L={lat_us}us k={k} w={w}: {:.3}  ", o.ratio_to_unicast());
            }
            println!();
        }
    }
}
