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

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod demo;
mod member;
mod member_bench;
mod plan;
mod size;
mod tcp_copy;
mod topology;

/// The error for `--transport ofi` in a build without the `ofi` feature.
#[cfg_attr(feature = "ofi", allow(dead_code))]
const NO_OFI: &str = "this rdmc was built without the `ofi` transport; \
                      rebuild with `cargo build --features ofi` (needs libfabric-dev)";

/// The error for `--transport rdma` in a build without the `rdma` feature.
#[cfg_attr(feature = "rdma", allow(dead_code))]
const NO_RDMA: &str = "this rdmc was built without the `rdma` transport; \
                       rebuild with `cargo build --features rdma` (needs cmake, libclang-dev)";

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
    Plan(plan::PlanArgs),
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

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Plan(args) => exit_status(plan::run(&args)),
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
