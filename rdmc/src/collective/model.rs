//! Latency models of broadcast, reduce and allreduce, after "Efficient
//! Collective Operations using Remote Memory Operations on VIA-Based
//! Clusters" (Gupta, Balaji, Panda, Nieplocha) and its Degree-k tree,
//! plus the pipelined tree and the ring this crate can run.
//!
//! Pure arithmetic: every function maps a group size `n`, a message size in
//! bytes, a tree degree `k` and [`LinkParams`] to a time in microseconds.
//!
//! Two families of trees are modelled:
//!
//! - **The paper's Degree-k tree** ([`paper_reduce`], [`paper_allreduce`]):
//!   in step `s` every rank that is a multiple of `(k+1)^(s+1)` receives the
//!   whole buffer from up to `k` ranks `r + j (k+1)^s`, reduces them in rank
//!   order and goes on; `k = 1` is the binomial tree, `k = n-1` the flat
//!   tree. A node forwards only whole buffers (no pipelining), and the
//!   result is then broadcast along a binomial tree. This is the paper's
//!   best-case formula: `2 Tc + steps × [2 (Ts + Tn) + Tm + Td + Tt × senders + To]`.
//! - **The pipelined k-ary tree** ([`tree_allreduce`]), which
//!   [`Allreduce`](super::Allreduce) runs: rank `r`'s parent is
//!   `(r - 1) / k`, so every member has at most `k` children; the buffer
//!   moves in chunks, a chunk is reduced and sent up while the next one
//!   arrives, and the root multicasts each reduced chunk at once.
//!
//! [`ring_allreduce`] is reduce-scatter plus allgather around a ring;
//! [`halving_doubling_allreduce`] the same by recursive halving and
//! doubling.

/// The cost parameters of one link and one host, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkParams {
    /// Fixed cost of one message on one hop: library overhead, posting the
    /// descriptor, DMA start-up and NIC processing at both ends
    /// (the paper's `Tm + Td + 2 (Ts + Tn)`).
    pub message_overhead: f64,
    /// Cost at a receiver of each message that arrives in a step, paid
    /// once per sender because the arrivals are handled one after another
    /// (in the paper, a DMA start-up and the NIC's processing, `Ts + Tn`).
    pub per_sender: f64,
    /// Time per byte on the wire (the paper's `Tt` per byte).
    pub per_byte: f64,
    /// Time per byte to copy into or out of registered buffers (`Tc` per
    /// byte); paid once at the source and once at the destination.
    pub copy_per_byte: f64,
    /// Time per byte to combine one incoming buffer into the accumulator
    /// (`To` per byte).
    pub reduce_per_byte: f64,
    /// Extra cost per block of a blocked broadcast (the paper's `Ta`).
    pub per_block: f64,
}

impl LinkParams {
    /// The paper's values for its GigaNet cluster: `Tt` = 0.010 µs/B,
    /// `Ts` = 2 µs, `Tc` = 0.0027 µs/B, `Tn` = 1.52 µs, `Td` = 0.6 µs,
    /// `Tm` = 1.3 µs. The paper gives no number for `To` or `Ta`; this
    /// takes `To` = 0.001 µs/B (one integer add per 4 bytes on a 1 GHz
    /// CPU) and `Ta` = 0, and charges `Ts + Tn` per sender.
    pub fn paper() -> Self {
        let (tt, ts, tc, tn, td, tm) = (0.010, 2.0, 0.0027, 1.52, 0.6, 1.3);
        LinkParams {
            message_overhead: tm + td + 2.0 * (ts + tn),
            per_sender: ts + tn,
            per_byte: tt,
            copy_per_byte: tc,
            reduce_per_byte: 0.001,
            per_block: 0.0,
        }
    }

    /// A 250 Mbit/s link with 150 µs per message (TCP between network
    /// namespaces) and an f32 sum at about 3 GB/s.
    pub fn lab() -> Self {
        LinkParams {
            message_overhead: 150.0,
            per_sender: 30.0,
            per_byte: 8.0 / 250.0,
            copy_per_byte: 0.0001,
            reduce_per_byte: 0.0003,
            per_block: 0.0,
        }
    }
}

/// `ceil(log2 n)`: the steps of a binomial tree over `n` members.
pub fn binomial_steps(n: usize) -> u32 {
    if n <= 1 {
        0
    } else {
        usize::BITS - (n - 1).leading_zeros()
    }
}

/// The paper's binomial broadcast of `size` bytes cut into blocks of
/// `block` bytes: each of `ceil(log2 n)` steps pays the message overhead,
/// the wire time of the whole message and `Ta` per block (a node forwards a
/// message once it has all its blocks); the copies in and out are paid
/// once.
pub fn paper_broadcast(n: usize, size: u64, block: u64, p: &LinkParams) -> f64 {
    let steps = f64::from(binomial_steps(n));
    if steps == 0.0 {
        return 0.0;
    }
    let blocks = size.div_ceil(block.max(1)).max(1) as f64;
    let s = size as f64;
    2.0 * p.copy_per_byte * s + steps * (p.message_overhead + p.per_byte * s + blocks * p.per_block)
}

/// The senders into rank 0 in each step of the paper's Degree-k tree over
/// `n` members (the critical path: rank 0 receives most).
pub fn paper_senders_per_step(n: usize, k: usize) -> Vec<usize> {
    let k = k.max(1);
    let mut steps = Vec::new();
    let mut stride = 1usize;
    while stride < n {
        let senders = (1..=k).filter(|j| j * stride < n).count();
        steps.push(senders);
        stride = stride.saturating_mul(k + 1);
    }
    steps
}

/// The paper's best-case Degree-k reduce of `size` bytes over `n` members:
/// `2 Tc + Σ_steps [overhead + senders × (per sender + (Tt + To) × size)]`.
pub fn paper_reduce(n: usize, size: u64, k: usize, p: &LinkParams) -> f64 {
    let s = size as f64;
    let steps = paper_senders_per_step(n, k);
    if steps.is_empty() {
        return 0.0;
    }
    let body: f64 = steps
        .iter()
        .map(|&senders| {
            let senders = senders as f64;
            p.message_overhead + senders * (p.per_sender + (p.per_byte + p.reduce_per_byte) * s)
        })
        .sum();
    2.0 * p.copy_per_byte * s + body
}

/// The paper's Degree-k allreduce: [`paper_reduce`] then
/// [`paper_broadcast`] of the result in one block.
pub fn paper_allreduce(n: usize, size: u64, k: usize, p: &LinkParams) -> f64 {
    paper_reduce(n, size, k, p) + paper_broadcast(n, size, size.max(1), p)
}

/// The degrees the paper allows for `n` members: `2^j - 1` below `n`.
pub fn paper_degrees(n: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut k = 1usize;
    while k < n.max(2) {
        out.push(k);
        k = k * 2 + 1;
    }
    out
}

/// The paper's choice of degree: the `2^j - 1` that minimises
/// [`paper_allreduce`] (the smallest on ties).
pub fn paper_best_degree(n: usize, size: u64, p: &LinkParams) -> usize {
    argmin(paper_degrees(n), |k| paper_allreduce(n, size, k, p))
}

/// Depth of the k-ary tree in which rank `r`'s parent is `(r - 1) / k`.
pub fn kary_depth(n: usize, k: usize) -> u32 {
    let k = k.max(1);
    let (mut depth, mut last) = (0u32, 0usize);
    // `last` is the highest rank at `depth`.
    while last + 1 < n {
        last = last.saturating_mul(k).saturating_add(k);
        depth += 1;
    }
    depth
}

/// The pipelined k-ary tree allreduce that
/// [`Allreduce`](super::Allreduce) runs, in chunks of `chunk` bytes.
///
/// A chunk climbs the tree in `depth` stages, each receiving up to `k`
/// chunks over one link and combining them, and the root's multicast of a
/// reduced chunk reaches everyone in `ceil(log2 n)` hops. In steady state
/// a chunk leaves the pipeline per bottleneck stage: an inner member's
/// link brings `k` children's chunks plus the result's chunk.
pub fn tree_allreduce(n: usize, size: u64, k: usize, chunk: u64, p: &LinkParams) -> f64 {
    if n <= 1 {
        return 0.0;
    }
    let k = k.clamp(1, n - 1);
    let c = size.min(chunk.max(1)) as f64;
    let chunks = size.div_ceil(chunk.max(1)).max(1) as f64;
    let depth = f64::from(kary_depth(n, k));
    let kf = k as f64;
    let climb = p.message_overhead + kf * (p.per_sender + c * (p.per_byte + p.reduce_per_byte));
    let fall = p.message_overhead + p.per_sender + c * p.per_byte;
    // Inner members (with children, below the root) exist when n > k + 1.
    let inbound = if n > k + 1 { kf + 1.0 } else { kf };
    let bottleneck =
        p.message_overhead + inbound * (p.per_sender + c * p.per_byte) + kf * c * p.reduce_per_byte;
    let s = size as f64;
    2.0 * p.copy_per_byte * s
        + depth * climb
        + f64::from(binomial_steps(n)) * fall
        + (chunks - 1.0) * bottleneck
}

/// Reduce-scatter plus allgather around a ring: `2 (n - 1)` steps, each
/// moving `size / n` bytes on every link, `n - 1` of them reducing.
pub fn ring_allreduce(n: usize, size: u64, p: &LinkParams) -> f64 {
    if n <= 1 {
        return 0.0;
    }
    let steps = (n - 1) as f64;
    let piece = size as f64 / n as f64;
    2.0 * p.copy_per_byte * size as f64
        + 2.0 * steps * (p.message_overhead + p.per_sender + piece * p.per_byte)
        + steps * piece * p.reduce_per_byte
}

/// Recursive halving and doubling (Thakur, Rabenseifner and Gropp,
/// "Optimization of Collective Communication Operations in MPICH"): with
/// `p` the largest power of two not above `n`, a reduce-scatter of
/// `log2 p` steps in which step `j` (from 1) moves and reduces
/// `size / 2^j` bytes each way, then an allgather of the same steps
/// backwards; `size (p − 1) / p` bytes each way in all, as the ring's
/// `size (n − 1) / n` when `n = p`, but in `2 log2 p` steps instead of
/// `2 (n − 1)`. For `n > p` the `n − p` members set aside first send their
/// whole buffer to a partner (reduced there) and get the whole result back
/// at the end: two more steps of `size` bytes.
pub fn halving_doubling_allreduce(n: usize, size: u64, p: &LinkParams) -> f64 {
    if n <= 1 {
        return 0.0;
    }
    let s = size as f64;
    let step = p.message_overhead + p.per_sender;
    let pow = 1usize << (usize::BITS - 1 - n.leading_zeros());
    let log = f64::from(pow.trailing_zeros());
    let moved = s * (pow - 1) as f64 / pow as f64;
    let fold = if n > pow {
        2.0 * (step + s * p.per_byte) + s * p.reduce_per_byte
    } else {
        0.0
    };
    2.0 * p.copy_per_byte * s
        + 2.0 * log * step
        + 2.0 * moved * p.per_byte
        + moved * p.reduce_per_byte
        + fold
}

/// The degree `k` in `1..n` that minimises [`tree_allreduce`] (the
/// smallest on ties; 1 for `n <= 2`).
pub fn best_degree(n: usize, size: u64, chunk: u64, p: &LinkParams) -> usize {
    argmin(1..n.max(2), |k| tree_allreduce(n, size, k, chunk, p))
}

/// The smallest power-of-two size (bytes, up to 2^40) at which
/// [`ring_allreduce`] is faster than the best [`tree_allreduce`], or `None`
/// if the tree wins at every size.
pub fn ring_crossover(n: usize, chunk: u64, p: &LinkParams) -> Option<u64> {
    (0..=40).map(|e| 1u64 << e).find(|&size| {
        let k = best_degree(n, size, chunk, p);
        ring_allreduce(n, size, p) < tree_allreduce(n, size, k, chunk, p)
    })
}

fn argmin(candidates: impl IntoIterator<Item = usize>, cost: impl Fn(usize) -> f64) -> usize {
    let mut best = (1usize, f64::INFINITY);
    for k in candidates {
        let t = cost(k);
        if t < best.1 {
            best = (k, t);
        }
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    }

    fn params() -> impl Strategy<Value = LinkParams> {
        (
            0.1f64..500.0,
            0.0f64..100.0,
            0.0001f64..0.1,
            0.0f64..0.01,
            0.0f64..0.01,
            0.0f64..5.0,
        )
            .prop_map(|p| LinkParams {
                message_overhead: p.0,
                per_sender: p.1,
                per_byte: p.2,
                copy_per_byte: p.3,
                reduce_per_byte: p.4,
                per_block: p.5,
            })
    }

    proptest! {
        #[test]
        fn every_model_grows_with_size(n in 1usize..2048, k in 1usize..64, size in 0u64..1 << 30,
                                       extra in 1u64..1 << 20, chunk in 1u64..1 << 20, p in params()) {
            let bigger = size + extra;
            prop_assert!(paper_reduce(n, size, k, &p) <= paper_reduce(n, bigger, k, &p));
            prop_assert!(paper_allreduce(n, size, k, &p) <= paper_allreduce(n, bigger, k, &p));
            prop_assert!(paper_broadcast(n, size, 3073, &p) <= paper_broadcast(n, bigger, 3073, &p));
            prop_assert!(ring_allreduce(n, size, &p) <= ring_allreduce(n, bigger, &p));
            prop_assert!(halving_doubling_allreduce(n, size, &p) <= halving_doubling_allreduce(n, bigger, &p));
            prop_assert!(tree_allreduce(n, size, k, chunk, &p) <= tree_allreduce(n, bigger, k, chunk, &p));
        }

        #[test]
        fn chain_and_flat_limits_match_their_closed_forms(n in 2usize..600, size in 0u64..1 << 24, p in params()) {
            let s = size as f64;
            let steps = f64::from(binomial_steps(n));
            let per = p.message_overhead + p.per_sender + (p.per_byte + p.reduce_per_byte) * s;
            // k = 1: the binomial tree, one sender per step.
            let binomial = 2.0 * p.copy_per_byte * s + steps * per;
            prop_assert!(close(paper_reduce(n, size, 1, &p), binomial));
            // k = n - 1: one step, n - 1 senders into the root.
            let flat = 2.0 * p.copy_per_byte * s + p.message_overhead
                + (p.per_sender + (p.per_byte + p.reduce_per_byte) * s) * (n - 1) as f64;
            prop_assert!(close(paper_reduce(n, size, n - 1, &p), flat));
            // Pipelined, one chunk: the chain climbs n - 1 hops.
            prop_assert_eq!(kary_depth(n, 1), (n - 1) as u32);
            prop_assert_eq!(kary_depth(n, n - 1), 1);
        }

        #[test]
        fn best_degree_minimises(n in 1usize..200, size in 0u64..1 << 26, chunk in 1u64..1 << 20, p in params()) {
            let k = best_degree(n, size, chunk, &p);
            let t = tree_allreduce(n, size, k, chunk, &p);
            for other in 1..n.max(2) {
                prop_assert!(t <= tree_allreduce(n, size, other, chunk, &p));
            }
            let k = paper_best_degree(n, size, &p);
            let t = paper_allreduce(n, size, k, &p);
            for other in paper_degrees(n) {
                prop_assert!(t <= paper_allreduce(n, size, other, &p));
            }
        }

        #[test]
        fn senders_cover_every_other_member_once(n in 1usize..5000, k in 1usize..40) {
            // Every member but rank 0 sends exactly once in the paper's
            // tree; count them level by level from the tree's definition.
            let mut senders = 0usize;
            let mut stride = 1usize;
            while stride < n {
                for r in (0..n).step_by(stride * (k + 1)) {
                    senders += (1..=k).filter(|j| r + j * stride < n).count();
                }
                stride *= k + 1;
            }
            prop_assert_eq!(senders, n - 1);
            prop_assert_eq!(paper_senders_per_step(n, k).len() as u32,
                            if n <= 1 { 0 } else { kary_depth_power(n, k + 1) });
        }

        #[test]
        fn ring_crossover_is_where_the_ring_starts_winning(n in 2usize..64, chunk in 1024u64..1 << 20, p in params()) {
            if let Some(size) = ring_crossover(n, chunk, &p) {
                let k = best_degree(n, size, chunk, &p);
                prop_assert!(ring_allreduce(n, size, &p) < tree_allreduce(n, size, k, chunk, &p));
                if size > 1 {
                    let below = size / 2;
                    let k = best_degree(n, below, chunk, &p);
                    prop_assert!(ring_allreduce(n, below, &p) >= tree_allreduce(n, below, k, chunk, &p));
                }
            }
        }
    }

    proptest! {
        #[test]
        fn halving_at_a_power_of_two_is_the_ring_with_fewer_steps(e in 0u32..11, size in 0u64..1 << 30, p in params()) {
            // Same bytes each way as the ring, in 2 log2 n steps instead of
            // 2 (n - 1): the difference is exactly the steps saved.
            let n = 1usize << e;
            let saved = 2.0 * ((n - 1) as f64 - f64::from(e)) * (p.message_overhead + p.per_sender);
            let (ring, halving) = (ring_allreduce(n, size, &p), halving_doubling_allreduce(n, size, &p));
            prop_assert!(close(ring, halving + saved), "ring {ring}, halving {halving}, saved {saved}");
            prop_assert!(halving <= ring + 1e-9 * ring.abs().max(1.0));
        }

        #[test]
        fn halving_with_a_fold_is_the_power_of_two_plus_two_whole_buffers(n in 2usize..5000, size in 0u64..1 << 30, p in params()) {
            let pow = 1usize << (usize::BITS - 1 - n.leading_zeros());
            let s = size as f64;
            let fold = if n > pow {
                2.0 * (p.message_overhead + p.per_sender + s * p.per_byte) + s * p.reduce_per_byte
            } else {
                0.0
            };
            prop_assert!(close(
                halving_doubling_allreduce(n, size, &p),
                halving_doubling_allreduce(pow, size, &p) + fold
            ));
        }
    }

    #[test]
    fn on_the_lab_halving_beats_the_ring_for_a_mebibyte_at_8_and_16_but_not_at_12() {
        let p = LinkParams::lab();
        for n in [8, 16] {
            assert!(
                halving_doubling_allreduce(n, 1 << 20, &p) < ring_allreduce(n, 1 << 20, &p),
                "n = {n}"
            );
        }
        // The fold's two whole buffers cost more than the steps saved.
        assert!(halving_doubling_allreduce(12, 1 << 20, &p) > ring_allreduce(12, 1 << 20, &p));
    }

    /// `ceil(log_base n)` by repeated multiplication.
    fn kary_depth_power(n: usize, base: usize) -> u32 {
        let (mut d, mut reach) = (0u32, 1usize);
        while reach < n {
            reach *= base;
            d += 1;
        }
        d
    }

    #[test]
    fn binomial_steps_are_ceil_log2() {
        for n in 1usize..5000 {
            assert_eq!(binomial_steps(n), kary_depth_power(n, 2), "n = {n}");
        }
    }

    #[test]
    fn the_paper_picks_degree_three_for_small_and_one_for_large_buffers() {
        // Section 6.2.2: degree 3 is best for 4-1024 bytes at 512 and 1024
        // nodes, degree 1 above 1 KB.
        let p = LinkParams::paper();
        for n in [16, 512, 1024] {
            assert_eq!(paper_best_degree(n, 4, &p), 3, "n = {n}, 4 B");
            assert_eq!(paper_best_degree(n, 4608, &p), 1, "n = {n}, 4608 B");
        }
    }
}
