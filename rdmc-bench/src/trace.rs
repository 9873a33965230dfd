//! The storage workloads' traces, pure and seeded: the Cosmos-like trace of
//! 3-replica writes (the RDMC paper's Fig. 9) and the overlapping senders
//! (its Fig. 10).
//!
//! The Cosmos trace itself is not public; the paper ("RDMC: A Reliable RDMA
//! Multicast for Large Objects") describes it as "several million 3-node
//! writes with random target nodes and object sizes varying from hundreds
//! of bytes to hundreds of MB (the median is 12MB and the mean 29 MB)".
//! [`ObjectSizes::COSMOS`] is the log-normal distribution with that median
//! and mean, cut to [256 B, 128 MiB].

use std::collections::HashMap;

use rand::{RngExt, SeedableRng, rngs::StdRng};

use rdmc_cli::workload::{Workload, WriteOp};

/// A log-normal distribution of object sizes, cut to `[min, max]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ObjectSizes {
    /// The median, bytes.
    pub(crate) median: f64,
    /// The standard deviation of the sizes' natural logarithm.
    pub(crate) sigma: f64,
    /// Smallest size, bytes.
    pub(crate) min: u64,
    /// Largest size, bytes (larger draws are cut to it).
    pub(crate) max: u64,
}

impl ObjectSizes {
    /// The paper's sizes: median 12 MB and mean 29 MB give a log-normal
    /// with sigma = sqrt(2 ln(29/12)) = 1.33; cut to [256 B, 128 MiB] (the
    /// paper's "hundreds of bytes to hundreds of MB", the top cut lower so
    /// that 16 members with their payloads fit this machine's memory;
    /// 3.5% of draws are cut).
    pub(crate) const COSMOS: ObjectSizes = ObjectSizes {
        median: 12e6,
        sigma: 1.328_5,
        min: 256,
        max: 128 << 20,
    };

    /// The same shape with every size divided by `divisor` (`--quick`).
    pub(crate) fn scaled_down(self, divisor: u64) -> ObjectSizes {
        ObjectSizes {
            median: self.median / divisor as f64,
            sigma: self.sigma,
            min: self.min,
            max: (self.max / divisor).max(self.min),
        }
    }

    /// The mean of the uncut distribution, bytes.
    pub(crate) fn mean(&self) -> f64 {
        self.median * (self.sigma * self.sigma / 2.0).exp()
    }

    /// The size at quantile `z` standard deviations of the logarithm from
    /// the median, cut to `[min, max]`.
    pub(crate) fn at_z(&self, z: f64) -> u64 {
        let size = (self.median * (self.sigma * z).exp()).round();
        (size as u64).clamp(self.min, self.max)
    }

    /// Draw one size.
    fn sample(&self, rng: &mut StdRng) -> u64 {
        // Box–Muller: a standard normal from two uniforms in (0, 1].
        let u1 = 1.0 - rng.random::<f64>();
        let u2 = rng.random::<f64>();
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        self.at_z(z)
    }
}

/// The Cosmos-like trace on `hosts` hosts: `writes` writes, write i's root
/// host i mod `hosts` (the roots rotate), its two other replicas drawn
/// uniformly from the other hosts, its size from `sizes`; one group per
/// distinct (root, replicas) set, made before the writes start; each root
/// keeps `window` writes in flight. The same `seed` gives the same trace.
pub(crate) fn cosmos(
    hosts: usize,
    writes: usize,
    window: usize,
    sizes: ObjectSizes,
    seed: u64,
) -> Workload {
    assert!(hosts >= 3, "3 replicas need 3 hosts");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut ids: HashMap<[u32; 3], usize> = HashMap::new();
    let mut workload = Workload {
        groups: Vec::new(),
        writes: Vec::with_capacity(writes),
        window,
    };
    for i in 0..writes {
        let root = (i % hosts) as u32;
        let a = other_host(&mut rng, hosts, &[root]);
        let b = other_host(&mut rng, hosts, &[root, a]);
        let members = [root, a.min(b), a.max(b)];
        let group = *ids.entry(members).or_insert_with(|| {
            workload.groups.push(members.to_vec());
            workload.groups.len() - 1
        });
        workload.writes.push(WriteOp {
            group,
            size: sizes.sample(&mut rng),
        });
    }
    workload
}

/// A host drawn uniformly from those not in `taken`.
fn other_host(rng: &mut StdRng, hosts: usize, taken: &[u32]) -> u32 {
    loop {
        let h = rng.random_range(0..hosts as u32);
        if !taken.contains(&h) {
            return h;
        }
    }
}

/// The most bytes any one host's link must carry in one direction: what it
/// receives as a replica, or what it sends as a root (each byte of its
/// writes at least once). No run of `workload` on `hosts` hosts whose links
/// carry `rate` bytes per second each way is shorter than this over `rate`.
pub(crate) fn busiest_link_bytes(workload: &Workload, hosts: usize) -> u64 {
    let mut incoming = vec![0u64; hosts];
    let mut outgoing = vec![0u64; hosts];
    for w in &workload.writes {
        let members = &workload.groups[w.group];
        outgoing[members[0] as usize] += w.size;
        for &m in &members[1..] {
            incoming[m as usize] += w.size;
        }
    }
    incoming.into_iter().chain(outgoing).max().unwrap_or(0)
}

/// Overlapping senders: every one of `hosts` hosts the root of its own
/// group of all hosts, sending `messages` messages of `size` bytes, all
/// queued at once.
pub(crate) fn overlap(hosts: usize, messages: usize, size: u64) -> Workload {
    let groups = (0..hosts)
        .map(|root| (0..hosts).map(|k| ((root + k) % hosts) as u32).collect())
        .collect();
    let writes = (0..messages)
        .flat_map(|_| (0..hosts).map(move |group| WriteOp { group, size }))
        .collect();
    Workload {
        groups,
        writes,
        window: messages.max(1),
    }
}

/// A workload of `groups` and writes `(group, size)`, each root keeping
/// `window` in flight (for tests).
#[cfg(test)]
pub(crate) fn workload_of(groups: &[&[u32]], writes: &[(usize, u64)], window: usize) -> Workload {
    Workload {
        groups: groups.iter().map(|g| g.to_vec()).collect(),
        writes: writes
            .iter()
            .map(|&(group, size)| WriteOp { group, size })
            .collect(),
        window,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(seed: u64) -> Workload {
        cosmos(16, 4000, 2, ObjectSizes::COSMOS, seed)
    }

    #[test]
    fn the_same_seed_gives_the_same_trace() {
        assert_eq!(trace(7), trace(7));
        assert_ne!(trace(7), trace(8));
    }

    #[test]
    fn roots_rotate_and_groups_are_three_distinct_hosts() {
        let w = trace(1);
        assert_eq!(w.window, 2);
        for (i, write) in w.writes.iter().enumerate() {
            assert_eq!(w.root_of(write), (i % 16) as u32, "write {i}");
        }
        for g in &w.groups {
            assert_eq!(g.len(), 3);
            assert!(g.iter().all(|&h| h < 16));
            assert!(g[0] != g[1] && g[0] != g[2] && g[1] < g[2], "{g:?}");
        }
        // Every group is used, and no two are alike.
        let mut used = vec![false; w.groups.len()];
        for write in &w.writes {
            used[write.group] = true;
        }
        assert!(used.iter().all(|u| *u));
        let mut sorted = w.groups.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), w.groups.len());
        // 16 roots x 105 replica pairs: 4000 writes use most of them.
        assert!(w.groups.len() > 1000, "{}", w.groups.len());
        // Each root's replicas spread over every other host.
        for root in 0..16u32 {
            let mut seen = [false; 16];
            for g in w.groups.iter().filter(|g| g[0] == root) {
                seen[g[1] as usize] = true;
                seen[g[2] as usize] = true;
            }
            let others = seen.iter().filter(|s| **s).count();
            assert_eq!(others, 15, "root {root}");
        }
    }

    #[test]
    fn sizes_follow_the_distributions_quantiles() {
        let sizes = ObjectSizes::COSMOS;
        assert!((sizes.mean() / 29e6 - 1.0).abs() < 0.01, "{}", sizes.mean());
        let w = trace(3);
        let mut drawn: Vec<u64> = w.writes.iter().map(|w| w.size).collect();
        drawn.sort_unstable();
        let quantile = |p: f64| drawn[((drawn.len() as f64 * p) as usize).min(drawn.len() - 1)];
        // Standard normal quantiles of 10%, 25%, 50%, 75%, 90%.
        for (p, z) in [
            (0.10, -1.2816),
            (0.25, -0.6745),
            (0.50, 0.0),
            (0.75, 0.6745),
            (0.90, 1.2816),
        ] {
            let expected = sizes.at_z(z) as f64;
            let got = quantile(p) as f64;
            // 4000 draws: a quantile's sampling error is a few percent of
            // its logarithm's spread.
            assert!(
                (got / expected).ln().abs() < 0.12,
                "p{p}: drew {got}, expected {expected}"
            );
        }
        assert!(drawn[0] >= sizes.min);
        assert!(*drawn.last().unwrap() <= sizes.max);
        // The cut at 128 MiB holds the few draws above it.
        let cut = drawn.iter().filter(|&&s| s == sizes.max).count() as f64 / drawn.len() as f64;
        assert!((0.015..0.06).contains(&cut), "{cut}");
    }

    #[test]
    fn scaled_down_sizes_keep_the_shape() {
        let quick = ObjectSizes::COSMOS.scaled_down(16);
        assert_eq!(quick.median, 750e3);
        assert_eq!(quick.max, 8 << 20);
        assert_eq!(quick.at_z(0.0), 750_000);
    }

    #[test]
    fn the_busiest_link_is_found() {
        let w = workload_of(&[&[0, 1, 2], &[1, 0, 2]], &[(0, 10), (0, 5), (1, 7)], 1);
        // Host 2 receives 22; host 0 sends 15 and receives 7.
        assert_eq!(busiest_link_bytes(&w, 3), 22);
        let w = workload_of(&[&[0, 1], &[2, 1]], &[(0, 30), (1, 1)], 1);
        // Host 0 sends 30, host 1 receives 31.
        assert_eq!(busiest_link_bytes(&w, 3), 31);
        // Overlapping senders: each host receives from the n - 1 others.
        assert_eq!(busiest_link_bytes(&overlap(4, 2, 100), 4), 3 * 2 * 100);
    }

    #[test]
    fn overlap_every_host_a_root_of_a_group_of_all() {
        let w = overlap(4, 3, 1000);
        assert_eq!(w.groups.len(), 4);
        for (root, g) in w.groups.iter().enumerate() {
            assert_eq!(g[0], root as u32);
            let mut members = g.clone();
            members.sort_unstable();
            assert_eq!(members, vec![0, 1, 2, 3]);
        }
        assert_eq!(w.writes.len(), 12);
        for root in 0..4u32 {
            let own = w.writes.iter().filter(|x| w.root_of(x) == root).count();
            assert_eq!(own, 3);
        }
        assert_eq!(w.window, 3);
        assert_eq!(w.replica_bytes(), 12 * 3 * 1000);
    }
}
