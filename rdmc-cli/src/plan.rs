//! `rdmc plan`: print every block transfer of one multicast, step by step,
//! as a table or as one JSON object.

use std::fmt::Write as _;

use anyhow::anyhow;
use clap::Args;
use rdmc::schedule::{Algorithm, Plan, step_bound, step_bound_in};

use crate::topology::TopologyArgs;

/// `rdmc plan` refuses plans whose assembly would call a schedule function
/// more than this many times (members × steps), rather than run for hours.
const MAX_PLAN_WORK: usize = 1 << 28;

/// Arguments of `rdmc plan`.
#[derive(Debug, Args)]
pub(crate) struct PlanArgs {
    /// Multicast algorithm: sequential, chain, tree, binomial-pipeline or
    /// hybrid (rack-aware: give `--racks`).
    #[arg(short, long, value_parser = parse_algorithm)]
    algorithm: Algorithm,
    /// Group size, the root included (at least 1).
    #[arg(short, long, value_parser = parse_positive)]
    nodes: usize,
    /// Number of blocks in the message (at least 1).
    #[arg(short, long, value_parser = parse_positive)]
    blocks: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// The plan of a transport whose sends complete once buffered (`tcp`):
    /// with slow members, the fast ones then form pipelines of power-of-two
    /// sizes. Without it, the plan of RDMA's send completion.
    #[arg(long)]
    buffered_sends: bool,
    #[command(flatten)]
    topology: TopologyArgs,
}

// A clap value parser (`value_parser = ...`): its error is one message,
// which clap prints after naming the option and the value given; nothing
// chains below it, so it stays a `String` (as in clap's own examples)
// rather than an `anyhow::Error`. So do the other parsers in this file.
fn parse_algorithm(s: &str) -> Result<Algorithm, String> {
    s.parse().map_err(|e| format!("{e}"))
}

fn parse_positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(v) => Ok(v),
        Err(e) => Err(format!("not a positive integer: {e}")),
    }
}

/// `rdmc plan`: print what [`render`] makes of the arguments.
pub(crate) fn run(args: &PlanArgs) -> anyhow::Result<()> {
    println!("{}", render(args)?);
    Ok(())
}

/// Assemble the plan, check it, and render it as JSON or a table (without
/// the final newline).
fn render(args: &PlanArgs) -> anyhow::Result<String> {
    let too_large = || {
        anyhow!(
            "a {} plan for {} nodes and {} blocks is too large to print",
            args.algorithm,
            args.nodes,
            args.blocks
        )
    };
    // Slow members stretch a plan to about twice the steps: checked before
    // the topology is built, and again with it.
    let work = step_bound(args.algorithm, args.nodes, args.blocks)
        .checked_mul(2 * args.nodes)
        .filter(|&w| w <= 2 * MAX_PLAN_WORK);
    if work.is_none() {
        return Err(too_large());
    }
    let topology = args
        .topology
        .topology(args.nodes)?
        .with_buffered_sends(args.buffered_sends);
    let work = step_bound_in(args.algorithm, &topology, args.blocks).checked_mul(args.nodes);
    if work.is_none_or(|w| w > MAX_PLAN_WORK) {
        return Err(too_large());
    }
    let plan =
        Plan::with_topology(args.algorithm, &topology, args.blocks).map_err(|e| anyhow!("{e}"))?;
    plan.verify().map_err(|e| {
        anyhow!(
            "internal error: the {} plan is invalid: {e}",
            plan.algorithm
        )
    })?;
    if args.json {
        serde_json::to_string(&plan).map_err(|e| anyhow!("{e}"))
    } else {
        Ok(table(&plan))
    }
}

/// A readable table: a header, then one row per step listing `from→to:bN`.
fn table(plan: &Plan) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} multicast: {} nodes, {} blocks, {} steps, {} transfers",
        plan.algorithm,
        plan.group_size,
        plan.blocks,
        plan.steps,
        plan.transfers.len()
    );
    if !plan.racks.is_empty() {
        let racks: Vec<String> = plan.racks.iter().map(u32::to_string).collect();
        let _ = writeln!(out, "racks by rank: {}", racks.join(","));
    }
    if !plan.slow.is_empty() {
        let slow: Vec<String> = plan.slow.iter().map(usize::to_string).collect();
        let _ = writeln!(out, "slow members: {}", slow.join(","));
    }
    let width = plan.steps.saturating_sub(1).to_string().len();
    let mut rest = plan.transfers.as_slice();
    for step in 0..plan.steps {
        let count = rest.iter().take_while(|t| t.step == step).count();
        let (now, later) = rest.split_at(count);
        rest = later;
        let _ = write!(out, "step {step:>width$}:");
        if now.is_empty() {
            out.push_str(" -");
        }
        for t in now {
            let _ = write!(out, " {}→{}:b{}", t.from, t.to, t.block);
        }
        out.push('\n');
    }
    out.pop();
    out
}

/// The JSON contract of `rdmc plan --json`, swept in this process (the
/// binary itself is run by `tests/cli_plan.rs` for a few cases).
#[cfg(test)]
mod tests {
    use super::*;

    fn plan_json(algorithm: Algorithm, n: usize, k: usize) -> Plan {
        let args = PlanArgs {
            algorithm,
            nodes: n,
            blocks: k,
            json: true,
            buffered_sends: false,
            topology: TopologyArgs::default(),
        };
        let out = render(&args).unwrap_or_else(|e| panic!("{algorithm} n={n} k={k}: {e}"));
        // Exactly one JSON object on one line.
        assert!(!out.contains('\n'));
        let value: serde_json::Value = serde_json::from_str(&out).unwrap();
        let keys: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            ["algorithm", "blocks", "nodes", "steps", "transfers"],
            "{keys:?}"
        );
        serde_json::from_value(value).unwrap()
    }

    fn check(algorithm: Algorithm, n: usize, k: usize) {
        let plan = plan_json(algorithm, n, k);
        assert_eq!(plan.algorithm, algorithm.name());
        assert_eq!((plan.group_size, plan.blocks), (n, k));
        assert_eq!(plan.steps, step_bound(algorithm, n, k));
        plan.verify()
            .unwrap_or_else(|e| panic!("{algorithm} n={n} k={k}: {e}"));
        assert_eq!(plan, Plan::new(algorithm, n, k).unwrap());
    }

    /// Every algorithm, every n in 1..=64 with k ∈ {1, 2, 3, 5}; k ∈ {7, 16}
    /// for a spread of n around the powers of two.
    #[test]
    fn json_plans_of_every_algorithm_verify() {
        for algorithm in Algorithm::ALL {
            for n in 1..=64 {
                for k in [1, 2, 3, 5] {
                    check(algorithm, n, k);
                }
            }
            for n in [2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64] {
                for k in [7, 16] {
                    check(algorithm, n, k);
                }
            }
        }
    }

    #[test]
    fn oversized_plans_are_refused() {
        let args = PlanArgs {
            algorithm: Algorithm::Sequential,
            nodes: 100_000_000,
            blocks: 100_000_000,
            json: false,
            buffered_sends: false,
            topology: TopologyArgs::default(),
        };
        let err = render(&args).unwrap_err();
        assert!(err.to_string().contains("too large"), "{err}");
    }

    fn hybrid_args(n: usize, k: usize, racks: &str, slow: Option<&str>, json: bool) -> PlanArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            plan: PlanArgs,
        }
        let (n, k) = (n.to_string(), k.to_string());
        let mut argv = vec!["plan", "-a", "hybrid", "-n", &n, "-b", &k, "--racks", racks];
        if let Some(slow) = slow {
            argv.extend(["--slow", slow]);
        }
        if json {
            argv.push("--json");
        }
        Cli::try_parse_from(argv).unwrap().plan
    }

    /// `--racks` and `--slow` reach the plan: the JSON names them and the
    /// plan verifies; the table prints them.
    #[test]
    fn hybrid_plans_with_racks_and_slow_members() {
        for (n, racks, slow) in [
            (8, "2", None),
            (9, "0,1,1,0,2,2,1,0,2", Some("4")),
            (5, "3", Some("1,2")),
        ] {
            for k in [1, 4, 9] {
                let out = render(&hybrid_args(n, k, racks, slow, true)).unwrap();
                let plan: Plan = serde_json::from_str(&out).unwrap();
                assert_eq!(plan.racks.len(), n, "{out}");
                assert_eq!(plan.slow.is_empty(), slow.is_none());
                plan.verify().unwrap();
            }
        }
        let table = render(&hybrid_args(4, 2, "2", Some("3"), false)).unwrap();
        assert!(
            table.starts_with("hybrid multicast: 4 nodes, 2 blocks"),
            "{table}"
        );
        assert!(table.contains("racks by rank: 0,1,0,1"), "{table}");
        assert!(table.contains("slow members: 3"), "{table}");
        let err = render(&hybrid_args(4, 2, "0,1", None, false)).unwrap_err();
        assert!(
            err.to_string().contains("2 racks given for a group of 4"),
            "{err}"
        );
    }

    /// `--buffered-sends` gives TCP's layout of slow members (power-of-two
    /// runs of the fast ones): the JSON says so, the plan verifies as such,
    /// and it differs from RDMA's.
    #[test]
    fn buffered_sends_reach_the_plan() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            plan: PlanArgs,
        }
        let args = |buffered: bool| {
            let mut argv = vec!["plan", "-a", "binomial-pipeline", "-n", "16", "-b", "8"];
            argv.extend(["--slow", "5", "--json"]);
            if buffered {
                argv.push("--buffered-sends");
            }
            Cli::try_parse_from(argv).unwrap().plan
        };
        let rdma: Plan = serde_json::from_str(&render(&args(false)).unwrap()).unwrap();
        let tcp: Plan = serde_json::from_str(&render(&args(true)).unwrap()).unwrap();
        assert!(!rdma.buffered_sends && tcp.buffered_sends);
        tcp.verify().unwrap();
        assert_ne!(rdma.transfers, tcp.transfers);
    }
}
