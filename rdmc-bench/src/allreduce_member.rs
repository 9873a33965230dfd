//! `rdmc-bench allreduce-member` (hidden): one member of the allreduce benchmark
//! on the emulated lab (`scripts/allreduce_netlab.sh`). Every member
//! reduces `--size` bytes of f32 whose exact sum it knows, `--runs` times
//! after `--warmup` unmeasured runs, each run started by a 4-byte allreduce
//! as a barrier; rank 0 prints one JSON line with the slowest member's time
//! of each run (reduced with a max allreduce) and whether every result was
//! exact.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use rdmc::collective::{Allreduce, AllreduceAlgorithm, AllreduceConfig, DType, ReduceOp};
use rdmc::{GroupConfig, GroupId, NodeConfig};
use serde_json::json;

use rdmc_cli::cluster::{ClusterSetup, ModeChoice, SecurityChoice, Transport};
use rdmc_cli::size::parse_size;

/// Arguments of `rdmc-bench allreduce-member`.
#[derive(Debug, Args)]
pub(crate) struct AllreduceMemberArgs {
    /// File listing the members, one `host:port` per line in rank order.
    #[arg(long)]
    members: PathBuf,
    /// This member's rank.
    #[arg(long)]
    rank: u32,
    /// The cluster key file.
    #[arg(long)]
    key_file: PathBuf,
    /// Bytes of f32 to reduce (a multiple of 4).
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    size: u64,
    /// Measured runs.
    #[arg(long, default_value_t = 7)]
    runs: usize,
    /// Unmeasured warm-up runs.
    #[arg(long, default_value_t = 2)]
    warmup: usize,
    /// The tree's degree (default: the model's choice for `--size`).
    #[arg(long)]
    degree: Option<usize>,
    /// `auto` (the model picks the tree or the ring per call), `tree`,
    /// `ring` or `halving` (recursive halving and doubling).
    #[arg(long, default_value = "auto", value_parser = ["auto", "tree", "ring", "halving"])]
    algorithm: String,
    /// Pipelining chunk in bytes.
    #[arg(long, default_value_t = rdmc::collective::DEFAULT_CHUNK_SIZE as u64, value_parser = parse_size)]
    chunk: u64,
    /// Groups per ring edge, taken in turn by the ring's steps.
    #[arg(long, default_value_t = rdmc::collective::DEFAULT_RING_LANES)]
    ring_lanes: usize,
    /// Messages each ring step is split into (pipelined across steps).
    #[arg(long, default_value_t = rdmc::collective::DEFAULT_RING_PIECES)]
    ring_pieces: usize,
    /// Block size of every group (default: the allreduce's choice).
    #[arg(long, value_parser = parse_size)]
    block: Option<u64>,
    /// How each node waits for completions.
    #[arg(long, value_enum, default_value_t = ModeChoice::Adaptive)]
    completion: ModeChoice,
    /// How frames are protected on the wire (`none`, as MPI's tcp
    /// transport, is for trusted fabrics only).
    #[arg(long, value_enum, default_value_t = SecurityChoice::Authenticated)]
    wire_security: SecurityChoice,
}

pub(crate) fn run(args: AllreduceMemberArgs) -> ExitCode {
    // One thread runs the node and the allreduce, as `rdmc member` does: a
    // step's message then reaches the allreduce without waking another
    // thread (see `member::run`).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rdmc-bench allreduce-member: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (args, outcome) = runtime
        .block_on(async move {
            tokio::spawn(async move {
                let outcome = bench(&args).await;
                (args, outcome)
            })
            .await
        })
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdmc-bench allreduce-member (rank {}): {e}", args.rank);
            ExitCode::FAILURE
        }
    }
}

/// Member `rank`'s value at element `i`: small integers, so every sum is
/// exact in f32 whatever the order.
fn value(rank: usize, i: usize) -> f32 {
    ((rank * 7 + i) % 13) as f32
}

async fn bench(args: &AllreduceMemberArgs) -> Result<(), String> {
    if !args.size.is_multiple_of(4) {
        return Err(format!("--size {} is not a whole number of f32", args.size));
    }
    let mut cluster = ClusterSetup::prepare(
        &args.members,
        args.rank,
        Some(&args.key_file),
        (60.0, 10.0),
        Transport::Tcp,
        "tcp",
    )
    .map_err(|e| format!("{e:#}"))?;
    cluster.wire_security = args.wire_security.into();
    let node = cluster
        .start(NodeConfig::new().with_completion_mode(args.completion.into()))
        .await
        .map_err(|e| format!("{e:#}"))?;
    let members = cluster.ids();
    let n = members.len();
    let rank = args.rank as usize;
    let algorithm = match args.algorithm.as_str() {
        "tree" => AllreduceAlgorithm::Tree,
        "ring" => AllreduceAlgorithm::Ring,
        "halving" => AllreduceAlgorithm::HalvingDoubling,
        _ => AllreduceAlgorithm::Auto,
    };
    let mut config = AllreduceConfig::new()
        .with_algorithm(algorithm)
        .with_expected_size(args.size)
        .with_chunk_size(args.chunk as usize)
        .with_ring_lanes(args.ring_lanes)
        .with_ring_pieces(args.ring_pieces);
    if let Some(block) = args.block {
        config = config.with_group_config(GroupConfig::new().with_block_size(block as usize));
    }
    if let Some(k) = args.degree {
        config = config.with_degree(k);
    }
    let mut allreduce = Allreduce::new(&node, GroupId(9000), &members, config)
        .await
        .map_err(|e| e.to_string())?;
    let elems = (args.size / 4) as usize;
    let mine: Vec<u8> = (0..elems)
        .flat_map(|i| value(rank, i).to_ne_bytes())
        .collect();
    let want: Vec<f32> = (0..elems)
        .map(|i| (0..n).map(|r| value(r, i)).sum())
        .collect();
    let sum = ReduceOp::sum(DType::F32);
    let max = ReduceOp::max(DType::F64);
    let (mut times, mut exact) = (Vec::new(), true);
    // One buffer for every run: fresh memory would be faulted in and
    // zeroed each time, work the members still reducing would wait for.
    let mut buf = mine.clone();
    for run in 0..args.warmup + args.runs {
        let mut barrier = [0u8; 4];
        allreduce
            .allreduce(&mut barrier, &sum)
            .await
            .map_err(|e| e.to_string())?;
        buf.copy_from_slice(&mine);
        let started = Instant::now();
        allreduce
            .allreduce(&mut buf, &sum)
            .await
            .map_err(|e| e.to_string())?;
        let elapsed = started.elapsed().as_secs_f64();
        let ok = buf
            .chunks_exact(4)
            .zip(&want)
            .all(|(b, w)| f32::from_ne_bytes(b.try_into().expect("4 bytes")) == *w);
        // The slowest member's time, and whether everyone was exact.
        let mut stats = [
            elapsed.to_ne_bytes(),
            (if ok { 0f64 } else { 1f64 }).to_ne_bytes(),
        ]
        .concat();
        allreduce
            .allreduce(&mut stats, &max)
            .await
            .map_err(|e| e.to_string())?;
        let slowest = f64::from_ne_bytes(stats[..8].try_into().expect("8 bytes"));
        let wrong = f64::from_ne_bytes(stats[8..].try_into().expect("8 bytes"));
        if run >= args.warmup {
            times.push(slowest);
            exact &= wrong == 0.0;
        }
    }
    let degree = allreduce.degree();
    // What ran: the model's choice under `auto`.
    let ran = match allreduce.algorithm_for(args.size) {
        AllreduceAlgorithm::Ring => "ring",
        AllreduceAlgorithm::HalvingDoubling => "halving",
        _ => "tree",
    };
    allreduce.close().await.map_err(|e| e.to_string())?;
    node.shutdown().await;
    if rank == 0 {
        let mut sorted = times.clone();
        sorted.sort_by(f64::total_cmp);
        let median = sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN);
        println!(
            "{}",
            json!({
                "system": "rdmc", "experiment": "allreduce", "nodes": n, "size": args.size,
                "dtype": "f32", "op": "sum", "algorithm": ran, "degree": degree, "chunk": args.chunk,
                "ring_lanes": args.ring_lanes, "ring_pieces": args.ring_pieces, "block": args.block,
                "completion": format!("{:?}", args.completion).to_lowercase(),
                "wire_security": args.wire_security.name(),
                "runs": times.len(), "seconds": median, "all": times, "exact": exact,
            })
        );
    }
    if exact {
        Ok(())
    } else {
        Err("a result was not the exact sum".into())
    }
}
