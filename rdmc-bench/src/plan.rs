//! What one `rdmc-bench` run measures: the full run or `--quick`, narrowed
//! by the command line (`--only`, `--nodes`, `--algorithms`, `--runs`,
//! `--warmup`, `--no-mpi`).

use clap::ValueEnum;

use crate::args::{BenchArgs, Experiment, OPT_IN};
use crate::trace::ObjectSizes;

/// A kibibyte.
const KIB: u64 = 1 << 10;
/// A mebibyte.
const MIB: u64 = 1 << 20;

/// Message sizes of the small-message experiment: 1 B to 64 KiB.
pub(crate) const SMALL_SIZES: [u64; 4] = [1, KIB, 16 * KIB, 64 * KIB];

/// MPI_Bcast variants of the small-message experiment (besides the plan's):
/// the binomial tree, MPI's own choice for small messages.
pub(crate) const MPI_SMALL: [(&str, Option<(u32, u64)>); 2] =
    [("default", None), ("binomial", Some((6, 0)))];

/// The rdmc algorithms of the latency and small-message experiments, in
/// the order they run (the hybrid is left out: on a lab of one rack it is
/// the binomial pipeline).
const FLAT_ALGORITHMS: [&str; 4] = ["sequential", "chain", "tree", "binomial-pipeline"];

/// The rdmc algorithms of the slow-host experiment, in the order it runs
/// them.
const SLOW_HOST_ALGORITHMS: [&str; 3] = ["chain", "binomial-pipeline", "hybrid"];

/// The rdmc algorithms of the racks experiment, in the order it runs them
/// (the hybrid told the racks).
const RACKS_ALGORITHMS: [&str; 3] = ["hybrid", "binomial-pipeline", "chain"];

/// The rdmc algorithms of the overlapping senders, in the order it runs
/// them: every host a root and a relay of every group, where the chain
/// streams each group's links steadily (BENCHMARKS.md).
const OVERLAP_ALGORITHMS: [&str; 2] = ["binomial-pipeline", "chain"];

/// Message size of the slow-host and racks experiments.
pub(crate) const TOPOLOGY_SIZE: u64 = 64 * MIB;

/// Group sizes of the validation against the simulator.
pub(crate) const VALIDATION_NODES: [usize; 4] = [2, 4, 8, 16];

/// The largest message of the validation.
pub(crate) const VALIDATION_LARGEST: u64 = 256 * MIB;

/// One workload of a series: message size, measured runs, warm-up runs.
pub(crate) type Workload = (u64, usize, usize);

/// One latency workload: a message size, the group sizes, runs and warm-ups.
pub(crate) struct LatencySpec {
    pub(crate) size: u64,
    pub(crate) nodes: Vec<usize>,
    pub(crate) runs: usize,
    pub(crate) warmup: usize,
}

/// Everything one run measures.
pub(crate) struct Plan {
    pub(crate) latency: Vec<LatencySpec>,
    /// The rdmc algorithms of the latency and small-message experiments.
    pub(crate) algorithms: Vec<&'static str>,
    /// The rdmc algorithms of the slow-host experiment.
    pub(crate) slow_host_algorithms: Vec<&'static str>,
    /// The rdmc algorithms of the racks experiment.
    pub(crate) racks_algorithms: Vec<&'static str>,
    /// MPI_Bcast variants: name, and the forced (algorithm, segment size).
    pub(crate) mpi: Vec<(&'static str, Option<(u32, u64)>)>,
    /// Size whose N = 4 runs give the breakdown records.
    pub(crate) breakdown_size: u64,
    /// Group sizes, burst length and runs of the small messages
    /// ([`SMALL_SIZES`]: a burst's rate, and one message's latency).
    pub(crate) small: (Vec<usize>, u64, usize),
    /// Message sizes of the small messages (default [`SMALL_SIZES`]).
    pub(crate) small_sizes: Vec<u64>,
    /// Block sizes and (message size, runs, warm-up) for Fig. 6.
    pub(crate) block_sizes: Vec<u64>,
    pub(crate) block_messages: Vec<Workload>,
    /// Message sizes with (runs, warm-up) for the CPU experiment.
    pub(crate) cpu: Vec<Workload>,
    /// The Cosmos-like trace (papers' Fig. 9).
    pub(crate) cosmos: CosmosSpec,
    /// Overlapping senders (papers' Fig. 10).
    pub(crate) overlap: OverlapSpec,
    pub(crate) experiments: Vec<Experiment>,
}

/// The Cosmos-like trace: 3-replica writes over every host of a 16-host
/// lab, roots rotating, `window` writes in flight per root.
pub(crate) struct CosmosSpec {
    pub(crate) hosts: usize,
    pub(crate) writes: usize,
    pub(crate) window: usize,
    pub(crate) sizes: ObjectSizes,
    pub(crate) seed: u64,
    /// The rdmc algorithms, each on the same trace.
    pub(crate) algorithms: Vec<&'static str>,
}

/// Overlapping senders: every host the root of its own group of all hosts,
/// each sending `messages` messages of `size` bytes at once.
pub(crate) struct OverlapSpec {
    pub(crate) nodes: Vec<usize>,
    pub(crate) size: u64,
    pub(crate) messages: usize,
    /// Runs per point (each on fresh processes); MPI's too, after one warm-up.
    pub(crate) runs: usize,
    /// The rdmc algorithms, each on the same workload.
    pub(crate) algorithms: Vec<&'static str>,
}

/// The trace's seed: any fixed number; the summary shows it.
const COSMOS_SEED: u64 = 0x00C0_5305;

impl Plan {
    /// The full run or the quick one, narrowed by the command line; an
    /// error if `--algorithms` names an algorithm none of the run's
    /// experiments runs.
    pub(crate) fn new(args: &BenchArgs) -> Result<Plan, String> {
        let mut plan = if args.quick {
            Plan::quick(&args.mpi_segments)
        } else {
            Plan::full(&args.mpi_segments)
        };
        if !args.only.is_empty() {
            // The quick run has no block-size, small-message or CPU
            // workloads; its storage workloads run only when asked for.
            let offered = if args.quick {
                vec![Experiment::Latency, Experiment::Cosmos, Experiment::Overlap]
            } else {
                plan.experiments.clone()
            };
            plan.experiments = offered
                .into_iter()
                .filter(|e| args.only.contains(e))
                .collect();
            // The experiments on labs of their own run only when named.
            let opted = OPT_IN.iter().filter(|e| args.only.contains(e));
            plan.experiments.extend(opted);
        }
        if !args.algorithms.is_empty() {
            plan.narrow_algorithms(&args.algorithms)?;
        }
        plan.narrow(args);
        Ok(plan)
    }

    /// MPI_Bcast's variants: its default, then its forced pipeline once per
    /// segment size asked for (`--mpi-segments`).
    fn mpi_variants(segments: &[u64]) -> Vec<(&'static str, Option<(u32, u64)>)> {
        let pipelines = segments
            .iter()
            .map(|&segment| ("pipeline", Some((3, segment))));
        std::iter::once(("default", None))
            .chain(pipelines)
            .collect()
    }

    /// The full run.
    fn full(mpi_segments: &[u64]) -> Plan {
        let mut mpi = Plan::mpi_variants(mpi_segments);
        mpi.push(("scatter_allgather_ring", Some((9, 0))));
        Plan {
            latency: vec![
                LatencySpec {
                    size: 8 * MIB,
                    nodes: vec![2, 3, 4, 6, 8, 12, 16],
                    runs: 5,
                    warmup: 1,
                },
                // A warm-up here too: without it every receiver maps and
                // zeroes 256 MiB of fresh memory inside the timed window
                // (MPI's ranks touch their buffer before timing), which at
                // 16 hosts on 2 cores costs more CPU than the transfer
                // itself.
                LatencySpec {
                    size: 256 * MIB,
                    nodes: vec![2, 4, 8, 16],
                    runs: 1,
                    warmup: 1,
                },
            ],
            algorithms: FLAT_ALGORITHMS.to_vec(),
            slow_host_algorithms: SLOW_HOST_ALGORITHMS.to_vec(),
            racks_algorithms: RACKS_ALGORITHMS.to_vec(),
            mpi,
            breakdown_size: 256 * MIB,
            small: (vec![2, 4, 8, 16], 1000, 5),
            small_sizes: SMALL_SIZES.to_vec(),
            block_sizes: (14..=24).map(|p| 1u64 << p).collect(),
            block_messages: vec![
                (16 * KIB, 5, 1),
                (128 * KIB, 5, 1),
                (MIB, 5, 1),
                (8 * MIB, 3, 1),
                (32 * MIB, 1, 0),
                (128 * MIB, 1, 0),
            ],
            cpu: vec![(MIB, 20, 2), (100 * MIB, 2, 0)],
            cosmos: CosmosSpec {
                hosts: 16,
                writes: 320,
                window: 2,
                sizes: ObjectSizes::COSMOS,
                seed: COSMOS_SEED,
                algorithms: vec!["binomial-pipeline", "tree", "sequential"],
            },
            overlap: OverlapSpec {
                nodes: vec![4, 8, 16],
                size: 8 * MIB,
                messages: 4,
                runs: 3,
                algorithms: OVERLAP_ALGORITHMS.to_vec(),
            },
            experiments: vec![
                Experiment::Latency,
                Experiment::SmallMessages,
                Experiment::BlockSize,
                Experiment::Cpu,
                Experiment::Cosmos,
                Experiment::Overlap,
            ],
        }
    }

    /// The quick run: the full run's algorithms, made small.
    fn quick(mpi_segments: &[u64]) -> Plan {
        let full = Plan::full(mpi_segments);
        Plan {
            // One warm-up, as for every size: MPI's ranks and the unicast
            // receive into memory they touched beforehand, and so do the
            // members once a first message's buffer is back in their
            // node's pool.
            latency: vec![LatencySpec {
                size: 64 * MIB,
                nodes: vec![2, 4, 8],
                runs: 1,
                warmup: 1,
            }],
            mpi: Plan::mpi_variants(mpi_segments),
            breakdown_size: 64 * MIB,
            small: (vec![], 0, 0),
            block_sizes: vec![],
            block_messages: vec![],
            cpu: vec![],
            cosmos: CosmosSpec {
                writes: 64,
                sizes: ObjectSizes::COSMOS.scaled_down(16),
                algorithms: vec!["binomial-pipeline"],
                ..full.cosmos
            },
            overlap: OverlapSpec {
                nodes: vec![4, 8],
                size: MIB,
                messages: 2,
                runs: 1,
                algorithms: OVERLAP_ALGORITHMS.to_vec(),
            },
            // The storage workloads only with `--only`.
            experiments: vec![Experiment::Latency],
            ..full
        }
    }

    /// `--runs`, `--warmup`, `--nodes`, `--small-sizes`, `--small-burst`
    /// and `--no-mpi`.
    fn narrow(&mut self, args: &BenchArgs) {
        for l in &mut self.latency {
            l.runs = args.runs.unwrap_or(l.runs).max(1);
            l.warmup = args.warmup.unwrap_or(l.warmup);
        }
        if !args.nodes.is_empty() {
            for l in &mut self.latency {
                l.nodes = args.nodes.clone();
            }
            self.small.0.retain(|n| args.nodes.contains(n));
            self.overlap.nodes.retain(|n| args.nodes.contains(n));
        }
        if !args.small_sizes.is_empty() {
            self.small_sizes = args.small_sizes.clone();
        }
        if let Some(burst) = args.small_burst {
            self.small.1 = burst;
        }
        if args.no_mpi {
            self.mpi.clear();
        }
    }

    /// `--algorithms`: every experiment's rdmc algorithms narrowed to
    /// `names`; an error if one of them is run by none of the run's
    /// experiments.
    fn narrow_algorithms(&mut self, names: &[String]) -> Result<(), String> {
        let lists: [(&[Experiment], &[&str]); 5] = [
            (
                &[Experiment::Latency, Experiment::SmallMessages],
                &self.algorithms,
            ),
            (&[Experiment::Cosmos], &self.cosmos.algorithms),
            (&[Experiment::Overlap], &self.overlap.algorithms),
            (&[Experiment::SlowHost], &self.slow_host_algorithms),
            (&[Experiment::Racks], &self.racks_algorithms),
        ];
        for name in names {
            let running: Vec<Experiment> = lists
                .iter()
                .filter(|(_, list)| list.contains(&name.as_str()))
                .flat_map(|(experiments, _)| experiments.iter().copied())
                .collect();
            if running.iter().any(|&e| self.has(e)) {
                continue;
            }
            let names: Vec<String> = running
                .iter()
                .filter_map(|e| e.to_possible_value())
                .map(|v| v.get_name().to_owned())
                .collect();
            return Err(format!(
                "--algorithms {name}: no experiment of this run runs it (only {} do)",
                names.join(", ")
            ));
        }
        for list in [
            &mut self.algorithms,
            &mut self.cosmos.algorithms,
            &mut self.overlap.algorithms,
            &mut self.slow_host_algorithms,
            &mut self.racks_algorithms,
        ] {
            list.retain(|a| names.iter().any(|b| b == a));
        }
        Ok(())
    }

    /// Whether the run includes experiment `e`.
    pub(crate) fn has(&self, e: Experiment) -> bool {
        self.experiments.contains(&e)
    }

    /// Every group size a lab is needed for, ascending.
    pub(crate) fn lab_sizes(&self) -> Vec<usize> {
        let mut sizes: Vec<usize> = Vec::new();
        if self.has(Experiment::Latency) {
            sizes.extend(self.latency.iter().flat_map(|l| l.nodes.iter().copied()));
        }
        if self.has(Experiment::SmallMessages) {
            sizes.extend(&self.small.0);
        }
        if self.has(Experiment::BlockSize) || self.has(Experiment::Cpu) {
            sizes.push(4);
        }
        if self.has(Experiment::Cosmos) {
            sizes.push(self.cosmos.hosts);
        }
        if self.has(Experiment::Overlap) {
            sizes.extend(&self.overlap.nodes);
        }
        if self.has(Experiment::Validate) {
            sizes.extend(VALIDATION_NODES);
        }
        sizes.sort_unstable();
        sizes.dedup();
        sizes
    }

    /// The largest message the opt-in experiments send.
    fn own_largest_message(&self) -> Option<u64> {
        let mut sizes = Vec::new();
        if self.has(Experiment::SlowHost)
            || self.has(Experiment::Racks)
            || self.has(Experiment::FileToFile)
        {
            sizes.push(TOPOLOGY_SIZE);
        }
        if self.has(Experiment::Validate) {
            sizes.push(VALIDATION_LARGEST);
        }
        sizes.into_iter().max()
    }

    /// The largest message any experiment sends (what the members allocate).
    pub(crate) fn largest_message(&self) -> u64 {
        if self.experiments == [Experiment::SmallMessages] {
            // Small messages only: no member needs the large payloads.
            return self.small_sizes.iter().copied().max().unwrap_or(MIB);
        }
        let latency = self.latency.iter().map(|l| l.size);
        let block = self.block_messages.iter().map(|m| m.0);
        let cpu = self.cpu.iter().map(|m| m.0);
        let own = self.own_largest_message();
        latency
            .chain(block)
            .chain(cpu)
            .chain(own)
            .max()
            .unwrap_or(MIB)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// The plan of `rdmc-bench ARGV`, or its error.
    fn try_plan(argv: &[&str]) -> Result<Plan, String> {
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            bench: BenchArgs,
        }
        let argv = std::iter::once("bench").chain(argv.iter().copied());
        let cli = Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
        Plan::new(&cli.bench)
    }

    fn plan(argv: &[&str]) -> Plan {
        try_plan(argv).unwrap()
    }

    /// `--algorithms` narrows the slow-host and racks experiments as it
    /// does the latency, small-message and Cosmos ones, each keeping its
    /// own order, and takes `hybrid`.
    #[test]
    fn algorithms_narrow_every_experiment_that_runs_several() {
        let all = plan(&["--only", "slow-host,racks"]);
        assert_eq!(all.slow_host_algorithms, SLOW_HOST_ALGORITHMS);
        assert_eq!(all.racks_algorithms, RACKS_ALGORITHMS);

        let hybrid = plan(&["--only", "slow-host,racks", "--algorithms", "hybrid"]);
        assert_eq!(hybrid.slow_host_algorithms, ["hybrid"]);
        assert_eq!(hybrid.racks_algorithms, ["hybrid"]);

        let two = plan(&["--only", "racks", "--algorithms", "chain,hybrid"]);
        assert_eq!(two.racks_algorithms, ["hybrid", "chain"]);
        assert_eq!(two.slow_host_algorithms, ["chain", "hybrid"]);

        // Every list of the run, the latency and Cosmos ones too.
        let full = plan(&["--algorithms", "binomial-pipeline,sequential"]);
        assert_eq!(full.algorithms, ["sequential", "binomial-pipeline"]);
        assert_eq!(full.cosmos.algorithms, ["binomial-pipeline", "sequential"]);
        assert_eq!(full.slow_host_algorithms, ["binomial-pipeline"]);
        assert_eq!(full.racks_algorithms, ["binomial-pipeline"]);

        // An algorithm one experiment of the run runs is not an error for
        // the others, which run none of theirs.
        let mixed = plan(&["--only", "latency,slow-host", "--algorithms", "hybrid"]);
        assert!(mixed.algorithms.is_empty());
        assert_eq!(mixed.slow_host_algorithms, ["hybrid"]);

        // Overlapping senders: the binomial pipeline and the chain.
        let overlap = plan(&["--only", "overlap"]);
        assert_eq!(overlap.overlap.algorithms, ["binomial-pipeline", "chain"]);
        let chain = plan(&["--only", "overlap", "--algorithms", "chain"]);
        assert_eq!(chain.overlap.algorithms, ["chain"]);
        let err = try_plan(&["--only", "overlap", "--algorithms", "tree"])
            .err()
            .expect("the overlap experiment runs no tree");
        assert!(err.contains("--algorithms tree"), "{err}");
    }

    /// An algorithm that no experiment of the run runs is an error naming
    /// the experiments that do; a name that is no algorithm is refused.
    #[test]
    fn algorithms_no_experiment_runs_are_errors() {
        let err = try_plan(&["--only", "latency", "--algorithms", "hybrid"])
            .err()
            .expect("hybrid is not a latency algorithm");
        assert!(err.contains("--algorithms hybrid"), "{err}");
        assert!(err.contains("slow-host, racks"), "{err}");

        let err = try_plan(&["--only", "racks", "--algorithms", "tree"])
            .err()
            .expect("the racks experiment runs no tree");
        assert!(err.contains("latency, small-messages, cosmos"), "{err}");

        // The quick run's Cosmos trace is the binomial pipeline's only.
        assert!(try_plan(&["--quick", "--only", "cosmos", "--algorithms", "tree"]).is_err());
        assert!(try_plan(&["--algorithms", "binomial"]).is_err());
    }

    /// MPI's forced pipeline runs once per `--mpi-segments` size (by
    /// default 32 KiB and 48 KiB), in the quick run and the full one;
    /// `--no-mpi` leaves every MPI variant out.
    #[test]
    fn mpi_pipeline_once_per_segment_size() {
        let pipelines = |p: &Plan| -> Vec<u64> {
            p.mpi
                .iter()
                .filter(|(name, _)| *name == "pipeline")
                .map(|(_, forced)| forced.expect("a forced algorithm").1)
                .collect()
        };
        let quick = plan(&["--quick"]);
        assert_eq!(pipelines(&quick), [32 * KIB, 48 * KIB]);
        assert_eq!(quick.mpi[0], ("default", None));
        let full = plan(&[]);
        assert_eq!(pipelines(&full), [32 * KIB, 48 * KIB]);
        assert!(
            full.mpi
                .iter()
                .any(|(name, _)| *name == "scatter_allgather_ring")
        );
        let one = plan(&["--quick", "--mpi-segments", "64KiB"]);
        assert_eq!(pipelines(&one), [64 * KIB]);
        assert_eq!(one.mpi.len(), 2);
        assert!(plan(&["--quick", "--no-mpi"]).mpi.is_empty());
        assert!(try_plan(&["--mpi-segments", "lots"]).is_err());
    }

    /// `--small-sizes` and `--small-burst` narrow the small messages, and a
    /// run of small messages only gives its members no larger payload than
    /// its largest small message.
    #[test]
    fn small_messages_narrowed_by_the_command_line() {
        let full = plan(&["--only", "small-messages"]);
        assert_eq!(full.small_sizes, SMALL_SIZES);
        assert_eq!(full.small.1, 1000);
        assert_eq!(full.largest_message(), 64 * KIB);

        let one = plan(&[
            "--only",
            "small-messages",
            "--nodes",
            "8",
            "--small-sizes",
            "1KiB",
            "--small-burst",
            "0",
        ]);
        assert_eq!(one.small_sizes, [KIB]);
        assert_eq!(one.small.0, [8]);
        assert_eq!(one.small.1, 0);
        assert_eq!(one.lab_sizes(), [8]);
        assert_eq!(one.largest_message(), KIB);

        // With the latency experiment too, the members keep the largest
        // latency message.
        let both = plan(&["--only", "latency,small-messages", "--small-sizes", "1KiB"]);
        assert_eq!(both.largest_message(), 256 * MIB);
    }
}
