//! The `rdmc` command line.

#[path = "rdmc/demo.rs"]
mod demo;
#[path = "rdmc/size.rs"]
mod size;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Reliable multicast of large objects.
#[derive(Debug, Parser)]
#[command(name = "rdmc", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Multicast among N members in this process and verify every copy.
    Demo(demo::DemoArgs),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Demo(args) => demo::run(args),
    }
}
