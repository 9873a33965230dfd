//! `rdmc`: command-line tools for the rdmc crate.
//!
//! Subcommands:
//!
//! * `rdmc plan --algorithm A --nodes N --blocks K [--json]`: print the
//!   whole-group transfer plan of one multicast.
//! * `rdmc demo [...]`: multicast among N members in this process, verify
//!   every copy, report the time (see `rdmc demo --help`).
//! * `rdmc member --members FILE --rank R [...] [FILES...]`: one member of a
//!   cluster of processes over TCP or libfabric (see `rdmc member --help`);
//!   `--members-from slurm|mpi|k8s|etcd` finds the rank and the peers
//!   instead (`rdmc_cli::members`).
//! * `rdmc push --members FILE --key-file F PATHS...` and `rdmc receive
//!   --members FILE --me I --out DIR --key-file F`: copy files and
//!   directories to every member, checked end to end (see `rdmc push --help`).
//! * `rdmc keygen FILE`: make a new cluster key.
//! * `rdmc simulate --nodes N --size S [...]`: multicasts at any scale in
//!   virtual time, on a modelled network (see `rdmc simulate --help`).
//!
//! To add a subcommand, add a variant to [`Command`] with its argument
//! struct and a `run_*` function, and one arm to the match in `main`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use rdmc_cli::keygen;

mod demo;
mod event_timeline;
mod member;
mod member_bench;
mod member_workload;
mod model;
mod plan;
mod push;
mod simulate;
mod topology;

/// The tests' scratch directories (one helper for the whole workspace).
#[cfg(test)]
#[path = "../../rdmc/tests/common/scratch.rs"]
mod scratch;

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
    /// Copy files and directories from this host (rank 0 of the members
    /// file) to every other member, which runs `rdmc receive`.
    Push(push::PushArgs),
    /// Receive what `rdmc push` sends: write it under a directory, every
    /// file's BLAKE3 checked.
    Receive(push::ReceiveArgs),
    /// Write a new random cluster key to a file only its owner can read.
    Keygen(keygen::KeygenArgs),
    /// Simulate multicasts at any scale in virtual time: the real protocol
    /// core over a modelled network (NIC rates, latency, slow hosts and
    /// links, racks behind uplinks, jitter).
    Simulate(simulate::SimulateArgs),
    /// The collectives' latency model: the Degree-k paper's broadcast and
    /// allreduce curves, and the pipelined tree against the ring.
    Model(model::ModelArgs),
}

fn main() -> ExitCode {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{EnvFilter, Layer};
    // Before any thread: SIGTERM and Ctrl-C end a command cleanly, not
    // through a handler a linked library installed.
    rdmc_cli::signals::forget_library_handlers();
    let timeline_path =
        std::env::var_os("RDMC_EVENT_TIMELINE").map(|v| event_timeline::file_for(v, "jsonl"));
    let timeline = timeline_path
        .as_ref()
        .map(|_| std::sync::Arc::new(event_timeline::Timeline::new()));
    // RDMC_TRACE=FILE (or DIR: DIR/PID.json): a trace a viewer opens; it is
    // written out when `_trace` drops, at the end of main. Besides the
    // library's debug events and spans it holds the members' and the TCP
    // links' trace-level block events (only there: the log on stderr keeps
    // its own filter), their fields as args, for `timeline.py`.
    // An empty value is no trace; a file that cannot be made is a one-line
    // error before anything runs (the trace writer would panic on it).
    let trace_path = std::env::var_os("RDMC_TRACE")
        .filter(|v| !v.is_empty())
        .map(|v| event_timeline::file_for(v, "json"));
    if let Some(path) = &trace_path
        && let Err(e) = std::fs::File::create(path)
    {
        eprintln!("rdmc: RDMC_TRACE: cannot write {}: {e}", path.display());
        return ExitCode::FAILURE;
    }
    let (trace, _trace) = match trace_path {
        Some(path) => {
            let (layer, guard) = tracing_chrome::ChromeLayerBuilder::new()
                .file(path)
                .trace_style(tracing_chrome::TraceStyle::Async)
                .include_args(true)
                .build();
            (
                Some(layer.with_filter(EnvFilter::new(event_timeline::TRACE_FILTER))),
                Some(guard),
            )
        }
        None => (None, None),
    };
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                // Colour only to a terminal: no escape codes in log files
                // and pipes.
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_filter(EnvFilter::from_default_env()),
        )
        .with(trace)
        .with(
            timeline.clone().map(|t| {
                event_timeline::TimelineLayer(t).with_filter(EnvFilter::new("rdmc=trace"))
            }),
        )
        .init();
    if _trace.is_some() {
        event_timeline::trace_clock();
    }
    let status = run(Cli::parse().command);
    if let (Some(timeline), Some(path)) = (timeline, timeline_path)
        && let Err(e) = timeline.write(&path)
    {
        eprintln!(
            "rdmc: writing the event timeline to {}: {e}",
            path.display()
        );
    }
    status
}

fn run(command: Command) -> ExitCode {
    match command {
        Command::Plan(args) => exit_status(plan::run(&args)),
        Command::Demo(args) => demo::run(args),
        Command::Member(args) => member::run(args),
        Command::Push(args) => push::run_push(args),
        Command::Receive(args) => push::run_receive(args),
        Command::Keygen(args) => exit_status(keygen::run(&args)),
        Command::Simulate(args) => exit_status(simulate::run(&args)),
        Command::Model(args) => exit_status(model::run(&args)),
    }
}

/// Print a subcommand's error, if any (with its context, on one line), and
/// turn its outcome into an exit status.
fn exit_status(outcome: anyhow::Result<()>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("rdmc: error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
