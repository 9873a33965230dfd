//! `rdmc`: command-line tools for the rdmc crate.
//!
//! Subcommands:
//!
//! * `rdmc plan --algorithm A --nodes N --blocks K [--json]`: print the
//!   whole-group transfer plan of one multicast.
//! * `rdmc demo [...]`: multicast among N members in this process, verify
//!   every copy, report the time (see `rdmc demo --help`).
//! * `rdmc member --members FILE --rank R [...] [FILES...]`: one member of a
//!   cluster of processes over TCP or libfabric (see `rdmc member --help`).
//! * `rdmc bench [--quick] [--out DIR]`: the papers' experiments on an
//!   emulated cluster, beside unicast and MPI_Bcast (see BENCHMARKS.md).
//!
//! To add a subcommand, add a variant to [`Command`] with its argument
//! struct and a `run_*` function, and one arm to the match in `main`.

use std::fmt::Write as _;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

#[path = "rdmc/bench.rs"]
mod bench;
#[path = "rdmc/bench_lab.rs"]
mod bench_lab;
#[path = "rdmc/bench_report.rs"]
mod bench_report;
#[path = "rdmc/demo.rs"]
mod demo;
#[path = "rdmc/member.rs"]
mod member;
#[path = "rdmc/member_bench.rs"]
mod member_bench;
#[path = "rdmc/size.rs"]
mod size;
#[path = "rdmc/tcp_copy.rs"]
mod tcp_copy;
use rdmc::schedule::{Algorithm, Plan, step_bound};

/// The error for `--transport ofi` in a build without the `ofi` feature.
#[cfg_attr(feature = "ofi", allow(dead_code))]
const NO_OFI: &str = "this rdmc was built without the `ofi` transport; \
                      rebuild with `cargo build --features ofi` (needs libfabric-dev)";

/// `rdmc plan` refuses plans whose assembly would call a schedule function
/// more than this many times (members × steps), rather than run for hours.
const MAX_PLAN_WORK: usize = 1 << 28;

/// RDMC: reliable multicast of large objects.
#[derive(Debug, Parser)]
#[command(name = "rdmc", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Print every block transfer of one multicast, step by step.
    Plan(PlanArgs),
    /// Multicast among N members in this process and verify every copy.
    Demo(demo::DemoArgs),
    /// Be one member of a cluster of processes: the root sends files, the
    /// others write what they receive.
    Member(member::MemberArgs),
    /// Run the papers' experiments on an emulated cluster of network
    /// namespaces, beside a TCP unicast and MPI_Bcast (root only).
    Bench(bench::BenchArgs),
    /// The unicast baseline of `rdmc bench`: a plain TCP copy between two
    /// processes, driven like `rdmc member --bench`.
    #[command(hide = true)]
    TcpCopy(tcp_copy::TcpCopyArgs),
}

/// Arguments of `rdmc plan`.
#[derive(Debug, Args)]
struct PlanArgs {
    /// Multicast algorithm: sequential, chain, tree or binomial-pipeline.
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
}

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

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Plan(args) => exit_status(run_plan(&args)),
        Command::Demo(args) => demo::run(args),
        Command::Member(args) => member::run(args),
        Command::TcpCopy(args) => tcp_copy::run(args),
        Command::Bench(args) => bench::run(args),
    }
}

/// Print a subcommand's error, if any, and turn its outcome into an exit status.
fn exit_status(outcome: Result<(), String>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("rdmc: error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// `rdmc plan`: assemble the plan, check it, and print it as JSON or a table.
fn run_plan(args: &PlanArgs) -> Result<(), String> {
    let work = step_bound(args.algorithm, args.nodes, args.blocks).checked_mul(args.nodes);
    if work.is_none_or(|w| w > MAX_PLAN_WORK) {
        return Err(format!(
            "a {} plan for {} nodes and {} blocks is too large to print",
            args.algorithm, args.nodes, args.blocks
        ));
    }
    let plan = Plan::new(args.algorithm, args.nodes, args.blocks).map_err(|e| e.to_string())?;
    plan.verify().map_err(|e| {
        format!(
            "internal error: the {} plan is invalid: {e}",
            plan.algorithm
        )
    })?;
    let out = if args.json {
        serde_json::to_string(&plan).map_err(|e| e.to_string())?
    } else {
        plan_table(&plan)
    };
    println!("{out}");
    Ok(())
}

/// A readable table: a header, then one row per step listing `from→to:bN`.
fn plan_table(plan: &Plan) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} multicast: {} nodes, {} blocks, {} steps, {} transfers",
        plan.algorithm,
        plan.nodes,
        plan.blocks,
        plan.steps,
        plan.transfers.len()
    );
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
