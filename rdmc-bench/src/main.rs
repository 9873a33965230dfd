//! `rdmc-bench`: the benchmark harness of rdmc. The papers' experiments on
//! an emulated cluster, side by side with a plain TCP unicast and
//! MPI_Bcast, as JSON lines, CSV, tables and plots (see
//! `scripts/README.md` and BENCHMARKS.md).
//!
//! Every measurement runs on `scripts/netlab.sh`'s lab: one network
//! namespace per host, each link capped at `--rate` in both directions. The
//! members are `rdmc member --bench` processes of the `rdmc` binary
//! (`--rdmc`), one per host, paced by this driver: it sends one command to
//! the root, waits until every receiver reports the message, and only then
//! sends the next, so measurements never overlap. Latency is the last
//! receiver's delivery time minus the root's send time, both on the
//! machine's one monotonic clock.
//!
//! The storage workloads (Cosmos-like trace, overlapping senders) are the
//! exception: every member is given the whole workload (`rdmc member
//! --bench --workload FILE`: its groups, writes and writes in flight per
//! root), runs it on its own and reports each write and delivery; the
//! driver checks every replica's delivery and computes the aggregates.
//!
//! The unicast baseline (`rdmc-bench tcp-copy`) and the allreduce members
//! (`rdmc-bench allreduce-member`) are processes of this program, hidden
//! subcommands the lab starts.

mod allreduce_member;
mod args;
mod lab;
mod measure;
mod mpi;
mod plan;
mod tcp_copy;
mod trace;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use rdmc_cli::report;
use serde_json::{Value, json};

use args::BenchArgs;
use lab::install_interrupt_handler;

/// The papers' experiments on an emulated cluster of network namespaces,
/// beside a TCP unicast and MPI_Bcast (root only).
#[derive(Debug, Parser)]
#[command(
    name = "rdmc-bench",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
    #[command(subcommand)]
    process: Option<Process>,
}

/// The processes a run starts on the lab's hosts besides `rdmc member`.
#[derive(Debug, Subcommand)]
enum Process {
    /// The unicast baseline: a plain TCP copy between two processes,
    /// driven like `rdmc member --bench`.
    #[command(hide = true)]
    TcpCopy(tcp_copy::TcpCopyArgs),
    /// One member of the allreduce benchmark on the lab
    /// (`scripts/allreduce_netlab.sh`).
    #[command(hide = true)]
    AllreduceMember(allreduce_member::AllreduceMemberArgs),
}

fn main() -> ExitCode {
    // Log output of the processes (RUST_LOG=rdmc=debug ...), as `rdmc`'s.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let cli = Cli::parse();
    match cli.process {
        Some(Process::TcpCopy(args)) => tcp_copy::run(args),
        Some(Process::AllreduceMember(args)) => allreduce_member::run(args),
        None => run(&cli.bench),
    }
}

/// Run the experiments: measure and report, or with `--replot` only report.
fn run(args: &BenchArgs) -> ExitCode {
    match bench(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdmc-bench: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A run's work; the error to print.
fn bench(args: &BenchArgs) -> Result<(), String> {
    std::fs::create_dir_all(&args.out)
        .map_err(|e| format!("creating {}: {e}", args.out.display()))?;
    let jsonl = args.out.join("results.jsonl");
    if args.replot {
        let records = report::read_records(&jsonl).map_err(|e| format!("{e:#}"))?;
        let machine = std::fs::read_to_string(args.out.join("machine.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(Value::Null);
        return report(args, &records, &machine);
    }
    // The command line checked before anything needs root or a lab.
    let plan = plan::Plan::new(args)?;
    let rdmc = rdmc_binary(args)?;
    lab::set_congestion_control(&args.congestion_control);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("must run as root (it creates network namespaces)".into());
    }
    if cfg!(debug_assertions) {
        eprintln!(
            "rdmc-bench: warning: this is a debug build; measure with `cargo build --release -p rdmcast-cli -p rdmc-bench` and target/release/rdmc-bench"
        );
    }
    let netlab = args.scripts.join("netlab.sh");
    if !netlab.exists() {
        return Err(format!(
            "{} not found (pass --scripts DIR)",
            netlab.display()
        ));
    }
    install_interrupt_handler(&netlab);
    let logs = args.out.join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| format!("creating {}: {e}", logs.display()))?;
    let machine = machine_facts(args);
    std::fs::write(
        args.out.join("machine.json"),
        serde_json::to_string_pretty(&machine).unwrap_or_default(),
    )
    .map_err(|e| format!("writing machine.json: {e}"))?;
    let records = measure::measure(args, plan, (&netlab, &rdmc), &jsonl, &logs)?;
    report(args, &records, &machine)
}

/// The `rdmc` binary whose members the run starts: `--rdmc`, else `$RDMC`,
/// else the `rdmc` beside this program.
fn rdmc_binary(args: &BenchArgs) -> Result<PathBuf, String> {
    let path = match args
        .rdmc
        .clone()
        .or_else(|| std::env::var_os("RDMC").map(PathBuf::from))
    {
        Some(path) => path,
        None => std::env::current_exe()
            .map_err(|e| format!("finding rdmc-bench itself: {e}"))?
            .with_file_name("rdmc"),
    };
    if !path.is_file() {
        return Err(format!(
            "no rdmc binary at {} (cargo build --release -p rdmcast-cli, or pass --rdmc PATH)",
            path.display()
        ));
    }
    Ok(path)
}

/// Write the report of `records` into `--out`, print the summary and the
/// written paths.
fn report(args: &BenchArgs, records: &[Value], machine: &Value) -> Result<(), String> {
    let files = report::write_report(&args.out, records, machine).map_err(|e| format!("{e:#}"))?;
    println!("{}", files.summary_markdown);
    for path in files.paths() {
        eprintln!("rdmc-bench: wrote {}", path.display());
    }
    Ok(())
}

/// What the report says about the machine and the run.
fn machine_facts(args: &BenchArgs) -> Value {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(str::trim)
        .unwrap_or("unknown");
    let mem_kib: u64 = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let first_line = |cmd: &str, arg: &str| {
        std::process::Command::new(cmd)
            .arg(arg)
            .output()
            .ok()
            .and_then(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .map(str::to_owned)
            })
            .unwrap_or_default()
    };
    json!({
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu_model": model,
        "memory_gib": mem_kib / (1 << 20),
        "kernel": read("/proc/sys/kernel/osrelease").trim(),
        "rate": args.rate,
        "date": first_line("date", "-u"),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "rdmc_version": env!("CARGO_PKG_VERSION"),
        "mpi": first_line("mpirun", "--version"),
        "quick": args.quick,
        "wire_security": args.wire_security,
        "congestion_control": args.congestion_control,
    })
}
