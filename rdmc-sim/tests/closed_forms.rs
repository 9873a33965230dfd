//! The simulator against closed forms: on a uniform network the time of a
//! multicast follows from the schedule, the block time and the latency.
//!
//! δ is one block time (block / rate), L the one-way latency. Unless a
//! test says otherwise the message is k whole blocks and latency is 0, so
//! the forms are exact up to floating-point rounding (checked to 1e-9).

use std::time::Duration;

use rdmc_proto::Algorithm;
use rdmc_sim::{Multicast, Network, Outcome, simulate};

const RATE_BPS: f64 = 1e9;
const BLOCK: usize = 1 << 16;

fn delta() -> f64 {
    BLOCK as f64 * 8.0 / RATE_BPS
}

fn run(algorithm: Algorithm, n: usize, k: usize, latency: Duration, window: usize) -> Outcome {
    let multicast = Multicast::new(algorithm, n, (k * BLOCK) as u64)
        .with_block_size(BLOCK)
        .with_ready_window(window);
    simulate(&multicast, &Network::uniform(RATE_BPS, latency))
        .unwrap_or_else(|e| panic!("{algorithm} n={n} k={k}: {e}"))
}

fn assert_close(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() <= 1e-9 * want.max(1e-9),
        "{what}: simulated {got} s, closed form {want} s"
    );
}

/// ⌈log2 n⌉.
fn ceil_log2(n: usize) -> usize {
    (usize::BITS - (n - 1).leading_zeros()) as usize
}

#[test]
fn unicast_is_size_over_rate_plus_latency() {
    for k in [1, 2, 7, 64] {
        let size = (k * BLOCK) as f64;
        for algorithm in Algorithm::ALL {
            let o = run(algorithm, 2, k, Duration::ZERO, 8);
            assert_close(
                o.max(),
                size * 8.0 / RATE_BPS,
                &format!("{algorithm} k={k}"),
            );
            assert_close(o.unicast, size * 8.0 / RATE_BPS, "the unicast reference");
        }
        // With latency: the first block arrives L after it left; only then
        // does the receiver know the message's size, post the receives for
        // the other blocks and announce them, which takes another L to
        // reach the root: 2L more, once per message (the window of
        // announced receives hides the latency afterwards).
        let latency = Duration::from_micros(30);
        let l = latency.as_secs_f64();
        let o = run(Algorithm::Chain, 2, k, latency, 8);
        let handshake = if k > 1 { 2.0 * l } else { 0.0 };
        assert_close(
            o.max(),
            size * 8.0 / RATE_BPS + l + handshake,
            &format!("latency k={k}"),
        );
    }
}

#[test]
fn chain_takes_k_plus_n_minus_2_block_times() {
    for n in [2, 3, 5, 16, 33] {
        for k in [1, 4, 50] {
            let o = run(Algorithm::Chain, n, k, Duration::ZERO, 8);
            assert_close(
                o.max(),
                (k + n - 2) as f64 * delta(),
                &format!("n={n} k={k}"),
            );
            // Member r has the last block after k + r − 1 block times.
            for r in 1..n {
                assert_close(o.last_block[r], (k + r - 1) as f64 * delta(), "member");
            }
        }
    }
}

#[test]
fn sequential_takes_n_minus_1_unicasts() {
    for n in [2, 3, 9, 40] {
        for k in [1, 3, 16] {
            let o = run(Algorithm::Sequential, n, k, Duration::ZERO, 8);
            assert_close(o.max(), (n - 1) as f64 * o.unicast, &format!("n={n} k={k}"));
            // Member r is served r-th.
            for r in 1..n {
                assert_close(o.completed[r], r as f64 * o.unicast, "member");
            }
        }
    }
}

#[test]
fn binomial_tree_takes_ceil_log2_n_unicasts() {
    // The root sends the whole message once per stage.
    for n in [2, 3, 4, 7, 8, 13, 32] {
        let k = 8;
        let o = run(Algorithm::BinomialTree, n, k, Duration::ZERO, 8);
        assert_close(o.max(), ceil_log2(n) as f64 * o.unicast, &format!("n={n}"));
    }
}

#[test]
fn binomial_pipeline_takes_k_plus_log2_n_minus_1_steps() {
    // Powers of two: exactly k + l − 1 block times, every member sending
    // and receiving one block per step; the same with the protocol core's
    // window (READY_WINDOW) as with one receive announced at a time, since
    // a member announces receives to one sender at a time and in the
    // pipeline of n > 2 members its sender changes every step.
    for l in 1..=7 {
        let n = 1 << l;
        for k in [1, 5, 64] {
            for window in [1, 8] {
                let o = run(Algorithm::BinomialPipeline, n, k, Duration::ZERO, window);
                assert_close(
                    o.max(),
                    (k + l - 1) as f64 * delta(),
                    &format!("n={n} k={k} window={window}"),
                );
            }
        }
    }
    // Other sizes: the schedule has one more step, in which a member
    // paired on a hypercube vertex passes its twin a block while receiving
    // one; the twin takes them one after the other, so a few steps can
    // take up to two block times. Within 3 block times of the form:
    for n in [3, 5, 6, 7, 11, 12, 100] {
        let k = 64;
        for window in [1, 8] {
            let o = run(Algorithm::BinomialPipeline, n, k, Duration::ZERO, window);
            let form = (k + ceil_log2(n) - 1) as f64 * delta();
            assert!(
                o.max() >= form * (1.0 - 1e-9) && o.max() <= form + 3.0 * delta(),
                "n={n} window={window}: {} s against {form} s",
                o.max()
            );
        }
    }
}

#[test]
fn the_ready_window_never_lets_blocks_collide_in_the_binomial_pipeline() {
    // Receives announced to several senders at once let a member that is
    // ahead send its next block to a partner still receiving another: the
    // two would share that partner's port and hold both senders up (more
    // than 20 % at 16 members before the core announced to one sender at
    // a time). Now no member receives two blocks at once, and with
    // latency the window costs nothing against one receive at a time: a
    // step whose sender changes waits for its ready-for-block (2L) either
    // way, and a run of blocks from one sender (the first and last steps)
    // waits less.
    let k = 64;
    let latency = Duration::from_micros(10);
    for n in [4, 5, 16, 33] {
        let one = run(Algorithm::BinomialPipeline, n, k, latency, 1);
        let window = run(Algorithm::BinomialPipeline, n, k, latency, 8);
        assert_eq!(window.most_inbound, 1, "n={n}");
        assert!(
            window.max() <= one.max() * (1.0 + 1e-9),
            "n={n}: {} vs {}",
            window.max(),
            one.max()
        );
    }
}

#[test]
fn one_receive_at_a_time_costs_a_round_trip_per_block() {
    // The per-block model of RDMA-write broadcast (a transfer and an
    // acknowledgement per block, "num·(Tt + Ta)"): with one receive
    // announced at a time, every block after the first waits for the
    // ready-for-block that its predecessor's arrival released, a round
    // trip of 2L; the first one was announced before the send. So k blocks
    // from root to one receiver take k·(δ + 2L) − L.
    let latency = Duration::from_micros(50);
    let l = latency.as_secs_f64();
    for k in [1, 2, 16, 100] {
        for algorithm in [Algorithm::Chain, Algorithm::BinomialPipeline] {
            let o = run(algorithm, 2, k, latency, 1);
            let want = k as f64 * (delta() + 2.0 * l) - l;
            assert_close(o.max(), want, &format!("{algorithm} k={k}"));
        }
    }
}
