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
//!
//! [`fair_share`] is a fluid model of a trace's closed loop on ideal links
//! shared max-min fairly: the report's "fair-share ideal".

use std::collections::{HashMap, VecDeque};

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

/// How a write's object crosses its group's host links, for
/// [`fair_share`]: each link's bytes per byte of the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// The binomial pipeline: the root sends each block once, every replica
    /// receives it once, and the replicas relay the other copies among
    /// themselves, evenly (on 3 members: each replica's uplink half).
    Binomial,
    /// A chain, root to the first replica to the next: every member but
    /// the last sends the object once.
    Chain,
    /// The root sends the object to every replica itself.
    Sequential,
}

impl Shape {
    /// The shape of the bench's `algorithm` on a 3-member group: `chain`
    /// its own; `sequential` and `tree` (whose root sends to both replicas)
    /// the sequential one; every other (binomial pipeline, hybrid) the
    /// binomial pipeline's.
    pub(crate) fn of_algorithm(algorithm: &str) -> Shape {
        match algorithm {
            "chain" => Shape::Chain,
            // The binomial tree on 3 members: the root sends to each.
            "sequential" | "tree" => Shape::Sequential,
            _ => Shape::Binomial,
        }
    }

    /// The links a write to `members` (the root first) loads, each with
    /// the bytes it carries per byte of the object; link `2h` is host h's
    /// uplink, `2h + 1` its downlink. Links carrying nothing are left out.
    fn usage(self, members: &[u32]) -> Vec<(usize, f64)> {
        assert!(members.len() >= 2, "a write needs a replica: {members:?}");
        let up = |h: u32| 2 * h as usize;
        let down = |h: u32| 2 * h as usize + 1;
        let replicas = &members[1..];
        let m = replicas.len() as f64;
        let root_sends = if self == Shape::Sequential { m } else { 1.0 };
        let mut links = vec![(up(members[0]), root_sends)];
        for (j, &h) in replicas.iter().enumerate() {
            links.push((down(h), 1.0));
            let relays = match self {
                Shape::Binomial => (m - 1.0) / m,
                Shape::Chain if j + 1 < replicas.len() => 1.0,
                Shape::Chain | Shape::Sequential => 0.0,
            };
            if relays > 0.0 {
                links.push((up(h), relays));
            }
        }
        links
    }
}

/// What [`fair_share`] computes for a workload.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FairShare {
    /// From the first write's issue to the last write's completion.
    pub(crate) seconds: f64,
    /// Each write's latency, issue to completion, in write order.
    pub(crate) latencies: Vec<f64>,
}

/// A write in progress in [`fair_share`].
struct Flow {
    write: usize,
    root: usize,
    /// Bytes of the object still to move.
    remaining: f64,
    /// When its root issued it.
    start: f64,
    /// [`Shape::usage`] of its group.
    links: Vec<(usize, f64)>,
}

/// A write with fewer bytes than this left is complete (the fluid's
/// rounding; objects are at least a byte).
const DONE_BYTES: f64 = 1e-3;

/// A link with less than this fraction of its rate left is saturated (the
/// fluid's rounding).
const SATURATED: f64 = 1e-12;

/// The fluid model of `workload`'s closed loop on ideal links shared
/// max-min fairly: what an ideal network achieves with no scheduling but
/// fair sharing.
///
/// Every host has an uplink and a downlink of `rate` bytes per second; no
/// latency, no per-message cost, no blocks: a write moves as a fluid. A
/// write in progress at `x` bytes of its object per second loads each link
/// of its group by `x` times the link's share in `shape` ([`Shape`]; on
/// the binomial pipeline's 3 members: the root's uplink `x`, each
/// replica's downlink `x` and uplink `x / 2`). The writes in progress share
/// the links max-min fairly, by progressive filling: every unfrozen write's
/// rate rises alike until a link is full, the writes on full links freeze,
/// and so on. Each root issues its writes in trace order, keeping
/// `workload.window` in progress; whenever a write completes, its root
/// issues its next and the rates are shared anew.
///
/// This is a reference, not a bound: it is what fair sharing of ideal
/// links gives this closed loop, and a network that schedules otherwise
/// (e.g. smallest write first, or favouring the busiest links' writes)
/// may finish sooner or later. The trace's bound ([`busiest_link_bytes`])
/// is the bound. Pure and deterministic.
pub(crate) fn fair_share(workload: &Workload, shape: Shape, rate: f64) -> FairShare {
    let hosts = workload
        .groups
        .iter()
        .flatten()
        .map(|&h| h as usize + 1)
        .max()
        .unwrap_or(0);
    let mut queues = vec![VecDeque::new(); hosts];
    for (i, w) in workload.writes.iter().enumerate() {
        queues[workload.root_of(w) as usize].push_back(i);
    }
    let window = workload.window.max(1);
    let mut latencies = vec![0.0; workload.writes.len()];
    let mut active: Vec<Flow> = Vec::new();
    let mut now = 0.0;
    loop {
        // Each root issues its next writes, up to the window.
        for (root, queue) in queues.iter_mut().enumerate() {
            let mut in_flight = active.iter().filter(|f| f.root == root).count();
            while in_flight < window {
                let Some(write) = queue.pop_front() else {
                    break;
                };
                let op = workload.writes[write];
                active.push(Flow {
                    write,
                    root,
                    remaining: op.size as f64,
                    start: now,
                    links: shape.usage(&workload.groups[op.group]),
                });
                in_flight += 1;
            }
        }
        if active.is_empty() {
            break;
        }
        // On to the next completion.
        let rates = max_min_rates(&active, 2 * hosts, rate);
        let step = active
            .iter()
            .zip(&rates)
            .filter(|&(_, &x)| x > 0.0)
            .map(|(f, &x)| f.remaining / x)
            .fold(f64::INFINITY, f64::min);
        assert!(step.is_finite(), "no write in progress moves");
        now += step;
        for (flow, x) in active.iter_mut().zip(&rates) {
            flow.remaining -= x * step;
        }
        active.retain(|f| {
            let done = f.remaining <= DONE_BYTES;
            if done {
                latencies[f.write] = now - f.start;
            }
            !done
        });
    }
    FairShare {
        seconds: now,
        latencies,
    }
}

/// The max-min fair rates (bytes of the object per second) of `flows` on
/// `links` links of `rate` each, by progressive filling.
fn max_min_rates(flows: &[Flow], links: usize, rate: f64) -> Vec<f64> {
    let mut spare = vec![rate; links];
    let mut rates = vec![0.0; flows.len()];
    let mut free = vec![true; flows.len()];
    let mut load = vec![0.0; links];
    while free.contains(&true) {
        // The unfrozen writes' load on each link, per byte/s of each.
        load.fill(0.0);
        for (flow, _) in flows.iter().zip(&free).filter(|(_, f)| **f) {
            for &(link, share) in &flow.links {
                load[link] += share;
            }
        }
        // The rise that fills the first link to fill (the lowest-numbered
        // of ties).
        let (rise, full) = load
            .iter()
            .zip(&spare)
            .enumerate()
            .filter(|(_, (l, _))| **l > 0.0)
            .map(|(link, (l, s))| (s / l, link))
            .fold(None, |best: Option<(f64, usize)>, next| match best {
                Some(b) if b.0 <= next.0 => Some(b),
                _ => Some(next),
            })
            .expect("an unfrozen write loads a link");
        for ((flow, x), _) in flows.iter().zip(&mut rates).zip(&free).filter(|(_, f)| **f) {
            for &(link, share) in &flow.links {
                spare[link] -= rise * share;
            }
            *x += rise;
        }
        // Freeze the writes on that link and on any other now full.
        for (flow, f) in flows.iter().zip(&mut free) {
            if *f
                && flow
                    .links
                    .iter()
                    .any(|&(link, _)| link == full || spare[link] < SATURATED * rate)
            {
                *f = false;
            }
        }
    }
    rates
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

    /// Hand-checkable fluid runs: 100 B/s links.
    fn fluid(groups: &[&[u32]], writes: &[(usize, u64)], window: usize, shape: Shape) -> FairShare {
        fair_share(&workload_of(groups, writes, window), shape, 100.0)
    }

    fn close(got: f64, want: f64) -> bool {
        (got - want).abs() < 1e-9 * want.abs().max(1.0)
    }

    #[test]
    fn one_write_alone_takes_its_size_over_the_rate() {
        for (shape, seconds) in [
            (Shape::Binomial, 10.0),
            (Shape::Chain, 10.0),
            // The root's uplink carries the object twice.
            (Shape::Sequential, 20.0),
        ] {
            let f = fluid(&[&[0, 1, 2]], &[(0, 1000)], 2, shape);
            assert!(close(f.seconds, seconds), "{shape:?}: {f:?}");
            assert!(close(f.latencies[0], seconds), "{shape:?}: {f:?}");
        }
    }

    #[test]
    fn writes_sharing_a_roots_uplink_each_get_half() {
        let f = fluid(
            &[&[0, 1, 2], &[0, 3, 4]],
            &[(0, 1000), (1, 1000)],
            2,
            Shape::Binomial,
        );
        assert!(close(f.seconds, 20.0), "{f:?}");
        assert!(f.latencies.iter().all(|&l| close(l, 20.0)), "{f:?}");
        // Once the smaller is done, the other has the link to itself: 500
        // bytes at 50 B/s, then 500 at 100.
        let f = fluid(
            &[&[0, 1, 2], &[0, 3, 4]],
            &[(0, 500), (1, 1000)],
            2,
            Shape::Binomial,
        );
        assert!(close(f.latencies[0], 10.0), "{f:?}");
        assert!(close(f.latencies[1], 15.0), "{f:?}");
        assert!(close(f.seconds, 15.0), "{f:?}");
    }

    #[test]
    fn a_window_of_one_serialises_a_roots_writes() {
        let groups: &[&[u32]] = &[&[0, 1, 2], &[0, 3, 4], &[5, 6, 7]];
        let f = fluid(
            groups,
            &[(0, 1000), (1, 1000), (2, 1000)],
            1,
            Shape::Binomial,
        );
        // Root 0's second write starts when its first completes; root 5's
        // runs beside them.
        assert!(close(f.latencies[0], 10.0), "{f:?}");
        assert!(close(f.latencies[1], 10.0), "{f:?}");
        assert!(close(f.latencies[2], 10.0), "{f:?}");
        assert!(close(f.seconds, 20.0), "{f:?}");
    }

    #[test]
    fn rates_are_max_min_fair() {
        let w = workload_of(&[&[0, 1, 2], &[0, 3, 4], &[3, 7, 8]], &[], 2);
        let flows: Vec<Flow> = (0..3)
            .map(|g| Flow {
                write: g,
                root: w.groups[g][0] as usize,
                remaining: 1.0,
                start: 0.0,
                links: Shape::Binomial.usage(&w.groups[g]),
            })
            .collect();
        // The first two share root 0's uplink: 50 each. The third's root
        // uplink also carries half the second's (a replica relaying): 25
        // left at 50, and it takes all of it.
        let rates = max_min_rates(&flows, 18, 100.0);
        for (got, want) in rates.iter().zip([50.0, 50.0, 75.0]) {
            assert!(close(*got, want), "{rates:?}");
        }
        assert_eq!(
            Shape::Chain.usage(&[0, 1, 2]),
            vec![(0, 1.0), (3, 1.0), (2, 1.0), (5, 1.0)]
        );
        assert_eq!(
            Shape::Sequential.usage(&[0, 1, 2]),
            vec![(0, 2.0), (3, 1.0), (5, 1.0)]
        );
        assert_eq!(Shape::of_algorithm("chain"), Shape::Chain);
        assert_eq!(Shape::of_algorithm("sequential"), Shape::Sequential);
        assert_eq!(Shape::of_algorithm("binomial-pipeline"), Shape::Binomial);
        assert_eq!(Shape::of_algorithm("tree"), Shape::Sequential);
        assert_eq!(Shape::of_algorithm("hybrid"), Shape::Binomial);
    }

    /// The plan's Cosmos trace on 16 hosts at the default 250 Mbit/s, as
    /// the fluid prototype (notes/fluid.py, policy `fair`) computed it on
    /// the trace a run wrote (workload-cosmos-n16.txt): seconds and share
    /// of the trace's bound for the binomial pipeline, the chain and
    /// sequential.
    #[test]
    fn the_plans_trace_matches_the_prototype() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            bench: crate::args::BenchArgs,
        }
        let cli = Cli::try_parse_from(["bench"]).unwrap();
        assert_eq!(cli.bench.rate, "250mbit");
        let rate = 250e6 / 8.0;
        let plan = crate::plan::Plan::new(&cli.bench).unwrap();
        let spec = &plan.cosmos;
        let w = cosmos(16, spec.writes, spec.window, spec.sizes, spec.seed);
        // The file the prototype read: 320 writes to 295 groups, 8.6 GB.
        assert_eq!((w.writes.len(), w.groups.len(), w.window), (320, 295, 2));
        let bytes: u64 = w.writes.iter().map(|w| w.size).sum();
        assert_eq!(bytes, 8_606_029_314);
        let bound = busiest_link_bytes(&w, 16) as f64 / rate;
        for (shape, seconds, share, p50, p99) in [
            (Shape::Binomial, 61.475, 0.7999, 2.116, 24.54),
            (Shape::Chain, 67.246, 0.7313, 2.434, 24.40),
            (Shape::Sequential, 73.290, 0.6709, 2.259, 25.05),
        ] {
            let f = fair_share(&w, shape, rate);
            let mut sorted = f.latencies.clone();
            sorted.sort_by(f64::total_cmp);
            // The prototype's quantiles: sorted[n / 2] and sorted[n * 99 / 100].
            let (got_p50, got_p99) = (sorted[sorted.len() / 2], sorted[sorted.len() * 99 / 100]);
            let near = |got: f64, want: f64| (got / want - 1.0).abs() < 0.002;
            assert!(near(f.seconds, seconds), "{shape:?}: {} s", f.seconds);
            assert!(
                near(bound / f.seconds, share),
                "{shape:?}: {}",
                bound / f.seconds
            );
            assert!(near(got_p50, p50), "{shape:?}: p50 {got_p50}");
            assert!(near(got_p99, p99), "{shape:?}: p99 {got_p99}");
            eprintln!(
                "{shape:?}: {:.3} s, {:.2} % of the trace's bound, p50 {got_p50:.3} s, \
                 p99 {got_p99:.2} s",
                f.seconds,
                100.0 * bound / f.seconds
            );
        }
    }
}
