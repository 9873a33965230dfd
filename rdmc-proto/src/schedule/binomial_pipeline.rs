//! Binomial pipeline: blocks relayed over a hypercube overlay so that, after
//! the first `l` steps, every member sends and receives a block at every step
//! (the RDMC paper, Sec. 4.3-4.4; "Pushing Bytes: Cloud-Scale Data Replication
//! with RDMC", Appendix A, for group sizes that are not powers of two). This
//! module reproduces, rule by rule, the exact schedule the original C++ RDMC
//! computes.
//!
//! Terms used throughout:
//!
//! * `n` members, `k` blocks, `l = ⌊log2 n⌋`, `P = 2^l` hypercube vertices;
//!   the group is *POT* if `n = P`, otherwise *NPOT*.
//! * Member `x < P` sits on vertex `x`; member `x ≥ P` sits on vertex
//!   `x − P + 1`. A vertex `v` with `1 ≤ v ≤ n − P` is *paired*: it holds the
//!   *lower* member `v` and the *upper* member `v + P − 1`, each the other's
//!   *twin*.
//! * Rule (a) is the vertex-level hypercube schedule, (b) picks which member
//!   of a paired vertex receives, (c) forwards blocks inside a paired vertex,
//!   (d) is the extra last step of an NPOT group, (e) the first block and (f)
//!   the connection order.
//!
//! Every member computes only its own part: each call costs `O(log n)` and
//! allocates nothing except [`Schedule::connections`].

use super::{Schedule, Transfer, floor_log2};

/// The message length with which the original computes the first block
/// (rule (e): it builds the schedule of a long message,
/// k = 1024). Any `k` larger than `l + 1` gives the same answer.
const FIRST_BLOCK_SCAN_BLOCKS: usize = 1024;

/// Binomial pipeline; `k + l − 1` steps when `n` is a power of two, `k + l`
/// otherwise (`0` for a group of one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BinomialPipeline {
    group_size: usize,
    rank: usize,
    /// `l = ⌊log2 n⌋`, the hypercube's dimension.
    dim: usize,
    /// `P = 2^l`, the number of hypercube vertices.
    cube: usize,
    /// The vertex this member sits on.
    vertex: usize,
    /// Precomputed [`Schedule::first_block`] (rule (e)).
    first: Option<Transfer>,
}

impl BinomialPipeline {
    /// Member `rank`'s schedule in a group of `nodes` (caller checks `rank < nodes`).
    ///
    /// Costs `O(log² n)`: it scans the first `l + 1` steps of a long message
    /// for the first block (rule (e)).
    pub fn new(group_size: usize, rank: usize) -> Self {
        debug_assert!(rank < group_size);
        let dim = if group_size == 0 {
            0
        } else {
            floor_log2(group_size)
        };
        let cube = 1usize << dim;
        let mut schedule = Self {
            group_size,
            rank,
            dim,
            cube,
            vertex: if rank < cube { rank } else { rank - cube + 1 },
            first: None,
        };
        schedule.first = schedule.scan_first_block();
        schedule
    }

    /// Rule (e): the transfer at the earliest step at which
    /// this member receives anything, in the schedule of a long message.
    /// That step is at most `l + 1`, so the scan stops early; the bound
    /// `total_steps` only guards against a schedule in which it never receives.
    fn scan_first_block(&self) -> Option<Transfer> {
        if self.rank == 0 || self.group_size < 2 {
            return None;
        }
        let k = FIRST_BLOCK_SCAN_BLOCKS.max(self.dim + 2);
        (0..self.total_steps(k)).find_map(|t| self.incoming(k, t))
    }

    /// True if the group size is a power of two.
    fn is_pot(&self) -> bool {
        self.group_size == self.cube
    }

    /// Placement of members on vertices: vertex `v` is
    /// paired iff `1 ≤ v ≤ n − P`.
    fn is_paired(&self, v: usize) -> bool {
        v >= 1 && v <= self.group_size - self.cube
    }

    /// The upper member of paired vertex `v`: `v + P − 1`.
    fn upper(&self, v: usize) -> usize {
        v + self.cube - 1
    }

    /// The twin of member `x` on a paired vertex.
    fn twin(&self, x: usize) -> usize {
        if x < self.cube {
            x + self.cube - 1
        } else {
            x + 1 - self.cube
        }
    }

    /// Rule (b): `F(v, t)`, the number of steps `t' < t`
    /// whose dimension `t' mod l` is a set bit of `v`:
    /// `⌊t/l⌋·popcount(v) + popcount(v & (2^(t mod l) − 1))`.
    fn flips(&self, v: usize, t: usize) -> usize {
        let below = v & ((1usize << (t % self.dim)) - 1);
        (t / self.dim) * v.count_ones() as usize + below.count_ones() as usize
    }

    /// The `m`-th step (from 0) whose dimension is a set bit of `v`, so that
    /// `F(v, t) = #{m : set_bit_step(v, m) < t}`. The latest step `p` with
    /// `F(v, p) = f` is `set_bit_step(v, f)`. Requires `v ≠ 0`.
    fn set_bit_step(&self, v: usize, m: usize) -> usize {
        let ones = v.count_ones() as usize;
        let mut rest = v;
        for _ in 0..m % ones {
            rest &= rest - 1; // clear the lowest set bit
        }
        (m / ones) * self.dim + rest.trailing_zeros() as usize
    }

    /// Rule (b): the receiver `R(v, t)`: the lower member if
    /// `F(v, t)` is even, the upper one if it is odd; an unpaired vertex's
    /// single member always.
    fn receiver(&self, v: usize, t: usize) -> usize {
        if self.is_paired(v) && self.flips(v, t) % 2 == 1 {
            self.upper(v)
        } else {
            v
        }
    }

    /// Rule (b): the inter-vertex sender `S(v, t)`: the twin
    /// of `R(v, t)` on a paired vertex, the single member otherwise.
    fn sender(&self, v: usize, t: usize) -> usize {
        let r = self.receiver(v, t);
        if self.is_paired(v) { self.twin(r) } else { r }
    }

    /// Total steps `T` for `k` blocks.
    fn steps(&self, k: usize) -> usize {
        if self.group_size < 2 || k == 0 {
            0
        } else if self.is_pot() {
            k + self.dim - 1
        } else {
            k + self.dim
        }
    }

    /// True if `t` is the extra last step of an NPOT group, which carries no
    /// inter-vertex traffic (Rule (d)).
    fn is_npot_last(&self, k: usize, t: usize) -> bool {
        !self.is_pot() && t + 1 == self.steps(k)
    }

    /// Rule (a): the block vertex `w` receives at the
    /// vertex-level step `t` from `w XOR 2^(t mod l)`, if any.
    ///
    /// * Nobody sends to the root's vertex 0.
    /// * Bit `i = t mod l` of `w` clear: block `t − l`, nothing if `t < l`.
    /// * Bit `i` set and `w = 2^i`: block `t` (straight from the root).
    /// * Bit `i` set, other bits set: block `t + j − l` (nothing if negative),
    ///   where `j ∈ 1..l` is the cyclic distance upward from bit `i` to the
    ///   next set bit of `w`.
    /// * Block numbers are capped at `k − 1` (the "virtual" blocks ≥ k).
    ///
    /// This is the RDMC paper's Sec. 4.4's rule seen from the receiving end: there
    /// `j` is `tr_ze(σ(sender, t mod l))`.
    fn vertex_block(&self, w: usize, t: usize, k: usize) -> Option<usize> {
        if w == 0 {
            return None;
        }
        let i = t % self.dim;
        let block = if w & (1 << i) == 0 {
            t.checked_sub(self.dim)?
        } else {
            let above = w >> (i + 1);
            let below = w & ((1usize << i) - 1);
            let j = if above != 0 {
                above.trailing_zeros() as usize + 1
            } else if below != 0 {
                self.dim - i + below.trailing_zeros() as usize
            } else {
                // w = 2^i: the transfer straight from the root.
                return Some(t.min(k - 1));
            };
            (t + j).checked_sub(self.dim)?
        };
        Some(block.min(k - 1))
    }

    /// Rule (c): the block `γ(v, t)` that the receiver
    /// `R(v, t)` of paired vertex `v` forwards to its twin at step `t`.
    ///
    /// * `F(v, t) = 0`: nothing.
    /// * `F(v, t) = F(v, t − 1)` (role unchanged): the block `v` received at
    ///   step `t − 1` by rule (a), or nothing.
    /// * Role just changed: nothing if `F(v, t) ≤ 1`; otherwise the block `v`
    ///   received at the latest step `p` with `F(v, p) = F(v, t) − 2`.
    fn gamma(&self, v: usize, t: usize, k: usize) -> Option<usize> {
        let f = self.flips(v, t);
        if f == 0 {
            None
        } else if self.flips(v, t - 1) == f {
            self.vertex_block(v, t - 1, k)
        } else if f <= 1 {
            None
        } else {
            self.vertex_block(v, self.set_bit_step(v, f - 2), k)
        }
    }

    /// Rule (d), `k ≥ 2`: the block the twin of `R(v, T−1)`
    /// sends it at the last step: the block `v` received at the latest step
    /// `p < T − 1` at which that twin was the receiver, i.e. the latest `p`
    /// with `F(v, p) = F(v, T − 1) − 1`.
    fn swap_block(&self, v: usize, last: usize, k: usize) -> Option<usize> {
        let f = self.flips(v, last);
        if f == 0 {
            return None;
        }
        self.vertex_block(v, self.set_bit_step(v, f - 1), k)
    }
}

impl Schedule for BinomialPipeline {
    fn group_size(&self) -> usize {
        self.group_size
    }

    fn rank(&self) -> usize {
        self.rank
    }

    /// Total steps: `T = k + l − 1` if `n` is a
    /// power of two (the RDMC paper's Sec. 4.4: "the number of steps to complete the
    /// send is l + k − 1"), otherwise `T = k + l`. A group of one needs no
    /// steps (the original divides by zero there).
    fn total_steps(&self, blocks: usize) -> usize {
        self.steps(blocks)
    }

    /// Rule (a) mapped to members by (b) (`S(u,t) → R(w,t)`), plus rule (c)
    /// on a paired vertex; at the last step of an NPOT group, rule (d).
    fn outgoing(&self, blocks: usize, step: usize) -> Option<Transfer> {
        let (k, t, x, v) = (blocks, step, self.rank, self.vertex);
        if t >= self.steps(k) {
            return None;
        }
        if self.is_npot_last(k, t) {
            if k == 1 {
                // Rule (d), k = 1: R(w, T−1) receives block 0 from
                // S(w XOR 1, T−1) for every paired w.
                let w = v ^ 1;
                return (self.is_paired(w) && x == self.sender(v, t)).then(|| Transfer {
                    peer: self.receiver(w, t),
                    block: 0,
                });
            }
            if !self.is_paired(v) {
                return None;
            }
            // Rule (d), k ≥ 2: the twins swap their last missing blocks.
            return if x == self.receiver(v, t) {
                self.gamma(v, t, k).map(|block| Transfer {
                    peer: self.twin(x),
                    block,
                })
            } else {
                self.swap_block(v, t, k).map(|block| Transfer {
                    peer: self.twin(x),
                    block,
                })
            };
        }
        // Rule (a) mapped to members by rule (b): u → w becomes S(u,t) → R(w,t).
        if x == self.sender(v, t) {
            let w = v ^ (1 << (t % self.dim));
            if let Some(block) = self.vertex_block(w, t, k) {
                return Some(Transfer {
                    peer: self.receiver(w, t),
                    block,
                });
            }
        }
        // Rule (c): R(v, t) forwards γ(v, t) to its twin.
        if self.is_paired(v) && x == self.receiver(v, t) {
            return self.gamma(v, t, k).map(|block| Transfer {
                peer: self.twin(x),
                block,
            });
        }
        None
    }

    /// The mirror image of [`Schedule::outgoing`]: `R(v, t)` receives the
    /// vertex's block from `S(u, t)`, the twin `S(v, t)` receives `γ(v, t)`;
    /// at the last step of an NPOT group, rule (d).
    fn incoming(&self, blocks: usize, step: usize) -> Option<Transfer> {
        let (k, t, x, v) = (blocks, step, self.rank, self.vertex);
        if t >= self.steps(k) {
            return None;
        }
        if self.is_npot_last(k, t) {
            if !self.is_paired(v) {
                return None;
            }
            if k == 1 {
                // Rule (d), k = 1: the redirect from the dimension-0 neighbour.
                return (x == self.receiver(v, t)).then(|| Transfer {
                    peer: self.sender(v ^ 1, t),
                    block: 0,
                });
            }
            // Rule (d), k ≥ 2: the swap.
            return if x == self.receiver(v, t) {
                self.swap_block(v, t, k).map(|block| Transfer {
                    peer: self.twin(x),
                    block,
                })
            } else {
                self.gamma(v, t, k).map(|block| Transfer {
                    peer: self.twin(x),
                    block,
                })
            };
        }
        if x == self.receiver(v, t) {
            // Rule (a) mapped by rule (b).
            let u = v ^ (1 << (t % self.dim));
            return self.vertex_block(v, t, k).map(|block| Transfer {
                peer: self.sender(u, t),
                block,
            });
        }
        // x is S(v, t) on a paired vertex: rule (c) from R(v, t).
        self.gamma(v, t, k).map(|block| Transfer {
            peer: self.twin(x),
            block,
        })
    }

    /// Rule (e): precomputed in [`BinomialPipeline::new`]
    /// from the schedule of a 1024-block message. For a power of two it is
    /// `(v XOR 2^h, lowest set bit of v)` with `h` the highest set bit of `v`.
    fn first_block(&self) -> Option<Transfer> {
        self.first
    }

    /// Rule (f): the twin first (if on a paired vertex), then
    /// for `i = 0..l` the lower member of vertex `v XOR 2^i` followed by its
    /// upper member if that vertex is paired.
    fn connections(&self) -> Vec<usize> {
        let mut peers = Vec::with_capacity(2 * self.dim + 1);
        if self.is_paired(self.vertex) {
            peers.push(self.twin(self.rank));
        }
        for i in 0..self.dim {
            let w = self.vertex ^ (1 << i);
            peers.push(w);
            if self.is_paired(w) {
                peers.push(self.upper(w));
            }
        }
        peers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The original's worked table, n = 6, k = 4: the vertex-level schedule (rule a).
    #[test]
    fn vertex_schedule_n6_k4() {
        let s = BinomialPipeline::new(6, 0);
        let rows: Vec<Vec<(usize, usize, usize)>> = (0..5)
            .map(|t| {
                (0..4)
                    .filter_map(|u| {
                        let w = u ^ (1 << (t % 2));
                        s.vertex_block(w, t, 4).map(|b| (u, w, b))
                    })
                    .collect()
            })
            .collect();
        assert_eq!(
            rows,
            [
                vec![(0, 1, 0)],
                vec![(0, 2, 1), (1, 3, 0)],
                vec![(0, 1, 2), (2, 3, 1), (3, 2, 0)],
                vec![(0, 2, 3), (1, 3, 2), (3, 1, 1)],
                vec![(0, 1, 3), (2, 3, 3), (3, 2, 2)],
            ]
        );
        assert!(s.is_npot_last(4, 5));
        assert!(!s.is_npot_last(4, 4));
    }

    /// The original's worked table, n = 6: receivers of v1 and v2 with F in brackets.
    #[test]
    fn receivers_and_flips_n6() {
        let s = BinomialPipeline::new(6, 0);
        let seq = |v| -> Vec<(usize, usize)> {
            (0..6).map(|t| (s.receiver(v, t), s.flips(v, t))).collect()
        };
        assert_eq!(seq(1), [(1, 0), (4, 1), (4, 1), (1, 2), (1, 2), (4, 3)]);
        assert_eq!(seq(2), [(2, 0), (2, 0), (5, 1), (5, 1), (2, 2), (2, 2)]);
        assert_eq!(s.sender(1, 1), 1);
        assert_eq!(s.sender(3, 1), 3);
        assert_eq!((s.twin(1), s.twin(4), s.twin(2), s.twin(5)), (4, 1, 5, 2));
        assert!(!s.is_paired(0) && s.is_paired(1) && s.is_paired(2) && !s.is_paired(3));
    }

    /// `set_bit_step(v, f)` is the latest step p with F(v, p) = f.
    #[test]
    fn set_bit_step_is_last_step_with_flip_count() {
        for n in [3usize, 6, 13, 37, 100] {
            let s = BinomialPipeline::new(n, 0);
            for v in 1..s.cube {
                for f in 0..12 {
                    let p = s.set_bit_step(v, f);
                    assert_eq!(s.flips(v, p), f, "n={n} v={v} f={f}");
                    assert_eq!(s.flips(v, p + 1), f + 1, "n={n} v={v} f={f}");
                }
            }
        }
    }

    /// A group of one: no steps, nothing to send, no peers (the original
    /// divides by zero here).
    #[test]
    fn single_member() {
        let s = BinomialPipeline::new(1, 0);
        for k in [1, 2, 100] {
            assert_eq!(s.total_steps(k), 0);
            assert_eq!(s.outgoing(k, 0), None);
            assert_eq!(s.incoming(k, 0), None);
        }
        assert_eq!(s.first_block(), None);
        assert!(s.connections().is_empty());
    }
}
