//! `rdmc model`: the collectives' latency model
//! ([`rdmc::collective::model`]) as tables, JSON lines and SVG plots — the
//! Degree-k paper's broadcast and allreduce curves for large clusters, and
//! the pipelined tree against the ring and recursive halving and doubling
//! for the crate's own allreduce.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::{Args, ValueEnum};
use rdmc::collective::model::{self, LinkParams};
use serde_json::json;

use rdmc_cli::report::model_plots::{Curve, draw_model_chart};

/// Arguments of `rdmc model`.
#[derive(Debug, Args)]
pub(crate) struct ModelArgs {
    /// Cluster sizes of the paper's curves.
    #[arg(long, value_delimiter = ',', default_value = "512,1024")]
    nodes: Vec<usize>,
    /// Link parameters: the paper's cluster or this project's lab.
    #[arg(long, value_enum, default_value = "paper")]
    link: Link,
    /// Chunk size of the pipelined tree (bytes).
    #[arg(long, default_value_t = rdmc::collective::DEFAULT_CHUNK_SIZE as u64)]
    chunk: u64,
    /// Directory for model.jsonl and the SVG plots (none if absent).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Link {
    Paper,
    Lab,
}

/// The paper's sizes: 4 bytes to 4608 bytes.
const PAPER_SIZES: [u64; 12] = [4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 4608];
/// The paper's broadcast block size.
const PAPER_BLOCK: u64 = 3073;

pub(crate) fn run(args: &ModelArgs) -> anyhow::Result<()> {
    let p = match args.link {
        Link::Paper => LinkParams::paper(),
        Link::Lab => LinkParams::lab(),
    };
    let sizes: Vec<u64> = match args.link {
        Link::Paper => PAPER_SIZES.to_vec(),
        Link::Lab => (2..=24).step_by(2).map(|e| 1u64 << e).collect(),
    };
    let mut records = Vec::new();
    let mut text = String::new();
    for &n in &args.nodes {
        if n == 0 {
            bail!("--nodes: a cluster has at least one node");
        }
        let degrees = model::paper_degrees(n);
        let _ = writeln!(text, "\n{n} nodes ({:?} link), times in µs", args.link);
        let mut header = format!("{:>9} {:>10}", "size", "bcast");
        for k in &degrees {
            let _ = write!(header, " {:>10}", format!("deg-{k}"));
        }
        let _ = write!(
            header,
            " {:>6} {:>10} {:>10} {:>10} {:>6}",
            "best", "tree-pipe", "ring", "halving", "k-pipe"
        );
        let _ = writeln!(text, "{header}");
        let mut curves: Vec<Curve> = degrees
            .iter()
            .map(|k| (format!("degree-{k} allreduce"), Vec::new()))
            .collect();
        curves.push(("binomial broadcast".into(), Vec::new()));
        curves.push(("pipelined tree".into(), Vec::new()));
        curves.push(("ring".into(), Vec::new()));
        curves.push(("recursive halving".into(), Vec::new()));
        for &size in &sizes {
            let bcast = model::paper_broadcast(n, size, PAPER_BLOCK, &p);
            let mut line = format!("{size:>9} {bcast:>10.1}");
            for (i, &k) in degrees.iter().enumerate() {
                let t = model::paper_allreduce(n, size, k, &p);
                curves[i].1.push((size as f64, t));
                let _ = write!(line, " {t:>10.1}");
            }
            let best = model::paper_best_degree(n, size, &p);
            let kp = model::best_degree(n, size, args.chunk, &p);
            let tree = model::tree_allreduce(n, size, kp, args.chunk, &p);
            let ring = model::ring_allreduce(n, size, &p);
            let halving = model::halving_doubling_allreduce(n, size, &p);
            let d = degrees.len();
            curves[d].1.push((size as f64, bcast));
            curves[d + 1].1.push((size as f64, tree));
            curves[d + 2].1.push((size as f64, ring));
            curves[d + 3].1.push((size as f64, halving));
            let _ = writeln!(
                line,
                " {best:>6} {tree:>10.1} {ring:>10.1} {halving:>10.1} {kp:>6}"
            );
            text.push_str(&line);
            records.push(json!({
                "experiment": "model", "link": format!("{:?}", args.link).to_lowercase(),
                "nodes": n, "size": size, "broadcast_us": bcast,
                "allreduce_us": degrees.iter().map(|&k| json!({"degree": k, "us": model::paper_allreduce(n, size, k, &p)})).collect::<Vec<_>>(),
                "paper_best_degree": best, "pipelined_degree": kp,
                "pipelined_tree_us": tree, "ring_us": ring, "halving_us": halving,
            }));
        }
        match model::ring_crossover(n, args.chunk, &p) {
            Some(s) => {
                let _ = writeln!(
                    text,
                    "ring beats the pipelined tree from {} up",
                    rdmc_cli::size::human(s)
                );
            }
            None => {
                let _ = writeln!(text, "the pipelined tree beats the ring at every size");
            }
        }
        if let Some(dir) = &args.out {
            std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
            let path = dir.join(format!(
                "model-{}-{n}.svg",
                format!("{:?}", args.link).to_lowercase()
            ));
            let title = format!("Modelled allreduce and broadcast, {n} nodes");
            draw_model_chart(&path, &title, &curves)?;
            let _ = writeln!(text, "plot: {}", path.display());
        }
    }
    print!("{text}");
    if let Some(dir) = &args.out {
        let path = dir.join(format!(
            "model-{}.jsonl",
            format!("{:?}", args.link).to_lowercase()
        ));
        let body: String = records.iter().map(|r| format!("{r}\n")).collect();
        std::fs::write(&path, body).with_context(|| path.display().to_string())?;
        println!("records: {}", path.display());
    }
    Ok(())
}
