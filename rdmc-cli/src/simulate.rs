//! `rdmc simulate`: multicasts at any scale in virtual time (the
//! `rdmc-sim` crate: the real protocol core over a modelled network), as a
//! table, JSON lines, or SVG plots drawn like `rdmc-bench`'s.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use clap::{Args, ValueEnum};
use rdmc::Algorithm;
use rdmc::proto::READY_WINDOW;
use rdmc_sim::{
    LAB_LATENCY, Multicast, Network, Outcome, Placement, Racks, SlowHost, SlowLink, simulate,
};
use serde_json::{Value, json};

use rdmc_cli::report::write_report;
use rdmc_cli::size::parse_size;

/// Arguments of `rdmc simulate`.
#[derive(Debug, Args)]
pub(crate) struct SimulateArgs {
    /// Group sizes, the root included: a list (`2,16,4096`) whose items may
    /// be ranges `A..B` (A, B and every power of two between them).
    #[arg(long, default_value = "16", value_parser = parse_nodes)]
    nodes: NodeList,
    /// Message size (`256MiB`, `8MiB`, `4096`).
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    size: u64,
    /// Block size in bytes (`1MiB`), or `auto`: the library's default
    /// choice from the message and group size (48–256 KiB), as a group
    /// with default settings (and `rdmc-bench`) uses.
    #[arg(long, default_value = "auto", value_parser = parse_block)]
    block_size: BlockArg,
    /// `all`, or algorithms separated by commas: sequential, chain, tree,
    /// binomial-pipeline, hybrid (told the racks of `--racks`).
    #[arg(long, default_value = "all", value_parser = parse_algorithms)]
    algorithm: AlgorithmList,
    /// Every host's NIC rate, each direction (`250mbit`, `1gbit`,
    /// `100gbit`; default: the emulated lab's).
    #[arg(long, default_value = "250mbit", value_parser = parse_rate)]
    rate: f64,
    /// One-way latency of every link (`50us`, `1ms`, `0`; default: the
    /// emulated lab's, a veth pair and a bridge).
    #[arg(long, value_parser = parse_duration)]
    latency: Option<Duration>,
    /// A slow host: `HOST=FACTOR` runs its NIC at the rate ÷ FACTOR both
    /// ways (repeatable).
    #[arg(long, value_parser = parse_slow_host)]
    slow: Vec<SlowHost>,
    /// Tell the schedule which hosts `--slow` slows, as a group configured
    /// with `GroupConfig::with_slow_members` (the binomial pipeline and the
    /// hybrid make them leaves that send nothing).
    #[arg(long, requires = "slow")]
    name_slow: bool,
    /// A slow link: `A-B=FACTOR` caps transfers between hosts A and B at
    /// the rate ÷ FACTOR (repeatable).
    #[arg(long, value_parser = parse_slow_link)]
    slow_link: Vec<SlowLink>,
    /// Put the hosts in this many racks behind top-of-rack switches.
    #[arg(long)]
    racks: Option<usize>,
    /// Each rack's uplink rate, each direction (default: `--rate`).
    #[arg(long, value_parser = parse_rate, requires = "racks")]
    uplink: Option<f64>,
    /// How ranks are placed in racks.
    #[arg(long, value_enum, default_value = "blocked", requires = "racks")]
    placement: PlacementArg,
    /// Before each block send the sender waits a random delay up to this
    /// long (`100us`).
    #[arg(long, value_parser = parse_duration, default_value = "0")]
    jitter: Duration,
    /// Bytes each connection buffers at its sender (`4MiB`): a send
    /// completes once its connection's unsent bytes fit, as over TCP. 0:
    /// when its last byte left, as over RDMA.
    #[arg(long, default_value = "0", value_parser = parse_size)]
    send_buffer: u64,
    /// Seed of the jitter (the same seed, the same results).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Most ready-for-blocks a receiver has outstanding (1 = the original
    /// RDMC's one receive at a time; default: the library's).
    #[arg(long, default_value_t = READY_WINDOW)]
    ready_window: usize,
    /// Early announcement (`64KiB`): a receiver announces the next
    /// sender's receive once the current block has at most this many bytes
    /// left to arrive, and otherwise takes blocks from one sender at a
    /// time, as the library's `tcp` transport does with it on.
    #[arg(long, value_parser = parse_size)]
    early_announce: Option<u64>,
    /// Simulations run at once, on threads (default: the machine's cores).
    /// Each is deterministic, so the results are the same for any number.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    jobs: Option<u16>,
    /// One JSON object per line, per (algorithm, group size), with every
    /// receiver's completion time.
    #[arg(long)]
    json: bool,
    /// Also write SVG plots (time and ratio to unicast against group
    /// size), a summary and a CSV into this directory, as `rdmc-bench` does.
    #[arg(long)]
    plot: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum PlacementArg {
    /// Consecutive ranks share a rack.
    Blocked,
    /// Ranks dealt out to the racks in turn.
    Interleaved,
}

/// `--nodes`: the group sizes, ascending, without repeats.
#[derive(Debug, Clone)]
struct NodeList(Vec<usize>);

/// `--block-size`: bytes, or automatic.
#[derive(Debug, Clone, Copy)]
struct BlockArg(Option<usize>);

/// `--algorithm`.
#[derive(Debug, Clone)]
struct AlgorithmList(Vec<Algorithm>);

// A clap value parser (`value_parser = ...`): its error is one message,
// which clap prints after naming the option and the value given; nothing
// chains below it, so it stays a `String` (as in clap's own examples)
// rather than an `anyhow::Error`. So do the other parsers in this file.
fn parse_nodes(text: &str) -> Result<NodeList, String> {
    let mut nodes = Vec::new();
    for item in text.split(',') {
        let number = |s: &str| match s.trim().parse::<usize>() {
            Ok(0) => Err("a group has at least 1 member".to_owned()),
            Ok(n) => Ok(n),
            Err(_) => Err(format!("{s:?} is not a group size")),
        };
        match item.split_once("..") {
            Some((a, b)) => {
                let (a, b) = (number(a)?, number(b)?);
                if a > b {
                    return Err(format!("empty range {item:?}"));
                }
                nodes.push(a);
                nodes.extend(
                    (0..usize::BITS)
                        .map(|i| 1usize << i)
                        .filter(|&p| p > a && p < b),
                );
                nodes.push(b);
            }
            None => nodes.push(number(item)?),
        }
    }
    nodes.sort_unstable();
    nodes.dedup();
    Ok(NodeList(nodes))
}

fn parse_block(text: &str) -> Result<BlockArg, String> {
    if text == "auto" {
        return Ok(BlockArg(None));
    }
    match parse_size(text)? {
        0 => Err("a block has at least 1 byte".to_owned()),
        b => usize::try_from(b)
            .map(|b| BlockArg(Some(b)))
            .map_err(|_| format!("{text:?} is too large")),
    }
}

fn parse_algorithms(text: &str) -> Result<AlgorithmList, String> {
    if text == "all" {
        return Ok(AlgorithmList(Algorithm::ALL.to_vec()));
    }
    text.split(',')
        .map(|a| a.trim().parse().map_err(|e| format!("{e}")))
        .collect::<Result<_, _>>()
        .map(AlgorithmList)
}

/// A rate as tc writes it: `250mbit`, `1gbit`, `500kbit`, `1000000bit`.
fn parse_rate(text: &str) -> Result<f64, String> {
    let lower = text.trim().to_ascii_lowercase();
    let split = lower
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(lower.len());
    let (digits, unit) = lower.split_at(split);
    let value: f64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a rate (try 250mbit, 1gbit)"))?;
    let scale = match unit {
        "bit" | "" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "tbit" => 1e12,
        _ => {
            return Err(format!(
                "unknown rate unit in {text:?} (use bit, kbit, mbit, gbit)"
            ));
        }
    };
    let bps = value * scale;
    if bps > 0.0 && bps.is_finite() {
        Ok(bps)
    } else {
        Err(format!("the rate {text:?} must be positive"))
    }
}

/// A duration: `0`, `250ns`, `50us`, `1ms`, `2s` (decimals allowed).
fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let value: f64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (try 50us, 1ms)"))?;
    let scale = match unit {
        "" if value == 0.0 => 0.0,
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        _ => return Err(format!("{text:?}: give a unit (ns, us, ms, s)")),
    };
    Duration::try_from_secs_f64(value * scale).map_err(|e| format!("{text:?}: {e}"))
}

fn parse_factor(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(f) if f > 0.0 && f.is_finite() => Ok(f),
        _ => Err(format!("{text:?} is not a positive factor")),
    }
}

fn parse_slow_host(text: &str) -> Result<SlowHost, String> {
    let (host, factor) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: expected HOST=FACTOR, e.g. 5=2"))?;
    Ok(SlowHost {
        host: host
            .trim()
            .parse()
            .map_err(|_| format!("{host:?} is not a host number"))?,
        factor: parse_factor(factor)?,
    })
}

fn parse_slow_link(text: &str) -> Result<SlowLink, String> {
    let bad = || format!("{text:?}: expected A-B=FACTOR, e.g. 0-1=2");
    let (ends, factor) = text.split_once('=').ok_or_else(bad)?;
    let (a, b) = ends.split_once('-').ok_or_else(bad)?;
    let host = |h: &str| h.trim().parse().map_err(|_| bad());
    Ok(SlowLink {
        a: host(a)?,
        b: host(b)?,
        factor: parse_factor(factor)?,
    })
}

impl SimulateArgs {
    fn network(&self) -> Network {
        Network {
            rate_bps: self.rate,
            latency: self.latency.unwrap_or(LAB_LATENCY),
            slow_hosts: self.slow.clone(),
            slow_links: self.slow_link.clone(),
            racks: self.racks.map(|count| Racks {
                count,
                uplink_bps: self.uplink.unwrap_or(self.rate),
                placement: match self.placement {
                    PlacementArg::Blocked => Placement::Blocked,
                    PlacementArg::Interleaved => Placement::Interleaved,
                },
            }),
            jitter: self.jitter,
            seed: self.seed,
            send_buffer: self.send_buffer,
        }
    }
}

/// `rdmc simulate`.
pub(crate) fn run(args: &SimulateArgs) -> anyhow::Result<()> {
    let network = args.network();
    let mut jobs = Vec::new();
    for &algorithm in &args.algorithm.0 {
        for &nodes in &args.nodes.0 {
            let mut multicast = Multicast::new(algorithm, nodes, args.size)
                .with_ready_window(args.ready_window)
                .with_early_announce(args.early_announce);
            if let Some(block) = args.block_size.0 {
                multicast = multicast.with_block_size(block);
            }
            // The schedule knows the racks, as a group configured with
            // them would: the hybrid places its blocks by them; and, with
            // `--name-slow`, the slow hosts; and, with a send buffer (TCP's
            // sends, which complete once buffered), how sends complete,
            // which the runtime lays the binomial pipeline out by.
            let racks = network.racks.map(|racks| {
                racks
                    .rack_of(nodes)
                    .into_iter()
                    .map(|r| r as u32)
                    .collect::<Vec<_>>()
            });
            if racks.is_some() || args.name_slow || args.send_buffer > 0 {
                let slow = args.slow.iter().map(|s| s.host).filter(|&h| h < nodes);
                // (The slow hosts as before: named with racks or `--name-slow`.)
                let slow = slow.filter(|_| racks.is_some() || args.name_slow);
                let mut topology = rdmc::schedule::Topology::flat(nodes)
                    .and_then(|t| t.with_slow_members(slow))
                    .map_err(|e| anyhow!("{e}"))?;
                if let Some(list) = racks {
                    topology = topology.with_racks(list).map_err(|e| anyhow!("{e}"))?;
                }
                multicast =
                    multicast.with_topology(topology.with_buffered_sends(args.send_buffer > 0));
            }
            jobs.push(multicast);
        }
    }
    let workers = args.jobs.map(usize::from).unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let mut outcomes = Vec::with_capacity(jobs.len());
    for (multicast, outcome) in jobs.iter().zip(run_all(&jobs, &network, workers)) {
        let outcome = outcome
            .map_err(|e| anyhow!("{}, {} nodes: {e}", multicast.algorithm, multicast.nodes))?;
        if args.json {
            println!("{}", record(&outcome, args, &network));
        }
        outcomes.push(outcome);
    }
    if !args.json {
        print!("{}", table(&outcomes, &network));
    }
    if let Some(dir) = &args.plot {
        let records = plot_records(&outcomes, args);
        let machine = json!({
            "simulated": "rdmc simulate (virtual time)",
            "rate": format!("{} Mbit/s", args.rate / 1e6),
            "latency": format!("{:?}", network.latency),
            "ready window": args.ready_window,
        });
        let files = write_report(dir, &records, &machine)?;
        // The records too, so runs can be combined into one report
        // (concatenate them, then `rdmc-bench --replot --out DIR`).
        let jsonl = dir.join("results.jsonl");
        let text: String = records.iter().map(|r| format!("{r}\n")).collect();
        std::fs::write(&jsonl, text).with_context(|| format!("writing {}", jsonl.display()))?;
        eprintln!("wrote {}", jsonl.display());
        let machine_json = dir.join("machine.json");
        std::fs::write(&machine_json, format!("{machine}\n"))
            .with_context(|| format!("writing {}", machine_json.display()))?;
        for path in files.paths() {
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}

/// Simulate every job on `workers` threads (each simulation is
/// independent and deterministic, so the results do not depend on the
/// threads); the outcomes in the jobs' order.
fn run_all(
    jobs: &[Multicast],
    network: &Network,
    workers: usize,
) -> Vec<Result<Outcome, rdmc_sim::SimError>> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<Outcome, rdmc_sim::SimError>>>> =
        Mutex::new(vec![None; jobs.len()]);
    std::thread::scope(|scope| {
        for _ in 0..workers.clamp(1, jobs.len().max(1)) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, AtomicOrdering::Relaxed);
                    let Some(job) = jobs.get(i) else { break };
                    let outcome = simulate(job, network);
                    results.lock().expect("no worker panics holding it")[i] = Some(outcome);
                }
            });
        }
    });
    results
        .into_inner()
        .expect("no worker panicked holding it")
        .into_iter()
        .map(|r| r.expect("every job ran"))
        .collect()
}

/// The JSON line of one outcome.
fn record(o: &Outcome, args: &SimulateArgs, network: &Network) -> Value {
    json!({
        "experiment": "simulate",
        "algorithm": o.algorithm.name(),
        "nodes": o.nodes,
        "size": o.size,
        "block_size": o.block_size,
        "blocks": o.blocks(),
        "ready_window": args.ready_window,
        "rate_bps": network.rate_bps,
        "latency_s": network.latency.as_secs_f64(),
        "racks": network.racks.map(|r| json!({
            "count": r.count,
            "uplink_bps": r.uplink_bps,
            "placement": format!("{:?}", r.placement).to_lowercase(),
        })),
        "slow": network.slow_hosts.iter().map(|s| json!({"host": s.host, "factor": s.factor})).collect::<Vec<_>>(),
        "slow_links": network.slow_links.iter().map(|s| json!({"a": s.a, "b": s.b, "factor": s.factor})).collect::<Vec<_>>(),
        "jitter_s": network.jitter.as_secs_f64(),
        "seed": network.seed,
        "send_buffer": network.send_buffer,
        "early_announce": args.early_announce,
        "seconds": o.max(),
        "min": o.min(),
        "median": o.median(),
        "max": o.max(),
        "unicast": o.unicast,
        "ratio_to_unicast": o.ratio_to_unicast(),
        "completed": o.receivers(),
        "events": o.events,
    })
}

/// Records in `rdmc-bench`'s shape, for its report: one per outcome, and
/// the unicast of each (size, group size). The block size is left out when
/// it is automatic, so one algorithm is one line across group sizes; a
/// ready window other than the library's is named with the algorithm.
fn plot_records(outcomes: &[Outcome], args: &SimulateArgs) -> Vec<Value> {
    let mut records = Vec::new();
    for o in outcomes {
        let algorithm = if args.ready_window == READY_WINDOW {
            o.algorithm.name().to_owned()
        } else {
            format!("{} (window {})", o.algorithm.name(), args.ready_window)
        };
        let mut rec = json!({
            "experiment": "latency",
            "system": "rdmc",
            "algorithm": algorithm,
            "nodes": o.nodes,
            "size": o.size,
            "seconds": o.max(),
            "ratio_to_unicast": o.ratio_to_unicast(),
        });
        if args.block_size.0.is_some() {
            rec["block_size"] = json!(o.block_size);
        }
        records.push(rec);
        records.push(json!({
            "experiment": "latency",
            "system": "unicast",
            "nodes": o.nodes,
            "size": o.size,
            "seconds": o.unicast,
        }));
    }
    records
}

/// The human-readable table.
fn table(outcomes: &[Outcome], network: &Network) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "simulated: {} Mbit/s per host, latency {:?}{}",
        network.rate_bps / 1e6,
        network.latency,
        network
            .racks
            .map(|r| format!(
                ", {} racks ({:?}), uplinks {} Mbit/s",
                r.count,
                r.placement,
                r.uplink_bps / 1e6
            ))
            .unwrap_or_default()
    );
    let _ = writeln!(
        out,
        "{:<18} {:>6} {:>9} {:>7} {:>10} {:>10} {:>10} {:>10}",
        "algorithm", "nodes", "block", "blocks", "first s", "median s", "last s", "× unicast"
    );
    for o in outcomes {
        let _ = writeln!(
            out,
            "{:<18} {:>6} {:>9} {:>7} {:>10.4} {:>10.4} {:>10.4} {:>10.3}",
            o.algorithm.name(),
            o.nodes,
            block_label(o.block_size),
            o.blocks(),
            o.min(),
            o.median(),
            o.max(),
            o.ratio_to_unicast()
        );
    }
    out
}

fn block_label(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}KiB", b >> 10),
        b => format!("{b}B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_lists_and_ranges() {
        assert_eq!(parse_nodes("2,16,4").unwrap().0, [2, 4, 16]);
        assert_eq!(parse_nodes("2..64").unwrap().0, [2, 4, 8, 16, 32, 64]);
        assert_eq!(parse_nodes("3..20,1").unwrap().0, [1, 3, 4, 8, 16, 20]);
        assert!(parse_nodes("0").is_err());
        assert!(parse_nodes("9..2").is_err());
        assert!(parse_nodes("x").is_err());
    }

    #[test]
    fn rates_durations_and_slow_hosts() {
        assert_eq!(parse_rate("250mbit").unwrap(), 250e6);
        assert_eq!(parse_rate("1Gbit").unwrap(), 1e9);
        assert_eq!(parse_rate("62.5mbit").unwrap(), 62.5e6);
        assert!(parse_rate("0mbit").is_err());
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("10mb").is_err());
        assert_eq!(parse_duration("50us").unwrap(), Duration::from_micros(50));
        assert_eq!(
            parse_duration("1.5ms").unwrap(),
            Duration::from_micros(1500)
        );
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("-1ms").is_err());
        let s = parse_slow_host("5=2").unwrap();
        assert_eq!((s.host, s.factor), (5, 2.0));
        assert!(parse_slow_host("5").is_err());
        assert!(parse_slow_host("5=0").is_err());
        let l = parse_slow_link("0-3=1.5").unwrap();
        assert_eq!((l.a, l.b, l.factor), (0, 3, 1.5));
        assert!(parse_slow_link("0=2").is_err());
        assert_eq!(parse_block("auto").unwrap().0, None);
        assert_eq!(parse_block("1MiB").unwrap().0, Some(1 << 20));
        assert!(parse_block("0").is_err());
        assert_eq!(parse_algorithms("all").unwrap().0, Algorithm::ALL);
        assert_eq!(
            parse_algorithms("chain,binomial-pipeline").unwrap().0,
            [Algorithm::Chain, Algorithm::BinomialPipeline]
        );
        assert!(parse_algorithms("fastest").is_err());
    }
}
