//! What a file receive target costs against memory: two members in one
//! process on loopback, one message of SIZE MiB at a time, received by
//! turns into memory and into a file (interleaved runs), timed from the
//! root's send to `delivered` (the receiver's application has taken it).
//! Over `ofi` and `rdma` a file's blocks go through registered bounce
//! buffers, so this measures that fallback too.
//!
//! ```sh
//! cargo run --release --example target_cost -- tcp 256 7
//! cargo run --release --features ofi --example target_cost -- ofi 256 7
//! ```

use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use rdmc::{
    ClusterKey, Group, GroupConfig, GroupId, Node, NodeConfig, NodeId, ReceiveTarget,
    ReceiveTargets, TcpConfig,
};

type BoxError = Box<dyn std::error::Error>;

async fn start(
    transport: &str,
    members: Vec<SocketAddr>,
    id: NodeId,
    listener: TcpListener,
) -> Result<Node, BoxError> {
    let key = ClusterKey::from_bytes(*b"target_cost example cluster key!")?;
    let node = match transport {
        "tcp" => {
            Node::tcp(
                TcpConfig::new(members, id, key).with_listener(listener),
                NodeConfig::new(),
            )
            .await?
        }
        #[cfg(feature = "ofi")]
        "ofi" => {
            Node::ofi(
                rdmc::OfiConfig::new(members, id, key).with_listener(listener),
                NodeConfig::new(),
            )
            .await?
        }
        other => return Err(format!("unknown or disabled transport {other}").into()),
    };
    Ok(node)
}

fn file_targets(path: std::path::PathBuf) -> ReceiveTargets {
    ReceiveTargets::new(move |_| ReceiveTarget::create_file(path.clone()))
}

/// One message through a fresh group; the seconds from send to delivered.
async fn once(
    nodes: &[Node],
    id: u64,
    message: &Bytes,
    file: Option<&std::path::Path>,
) -> Result<f64, BoxError> {
    let members = [NodeId(0), NodeId(1)];
    let mut receiving = GroupConfig::new();
    if let Some(path) = file {
        receiving = receiving.with_receive_targets(file_targets(path.to_path_buf()));
    }
    let (root, receiver) = tokio::try_join!(
        nodes[0].create_group(GroupId(id), &members, GroupConfig::new()),
        nodes[1].create_group(GroupId(id), &members, receiving),
    )?;
    let (mut root, mut receiver) = match (root, receiver) {
        (Group::Root(root), Group::Receiver(receiver)) => (root, receiver),
        _ => return Err("node 0 is the root".into()),
    };
    let reader = tokio::spawn(async move {
        let m = receiver.next().await.expect("a message")?;
        assert!(receiver.next().await.is_none());
        receiver.close().await?;
        Ok::<_, rdmc::Error>(m.file.map_or(m.data.len() as u64, |f| f.len()))
    });
    let started = Instant::now();
    root.send(message.clone()).await?.delivered().await?;
    let seconds = started.elapsed().as_secs_f64();
    root.close().await?;
    assert_eq!(reader.await??, message.len() as u64);
    Ok(seconds)
}

fn median_range(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let transport = args.first().map_or("tcp", String::as_str).to_owned();
    let mib: usize = args.get(1).map_or(Ok(256), |s| s.parse())?;
    let runs: usize = args.get(2).map_or(Ok(7), |s| s.parse())?;
    let listeners = (0..2)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()?;
    let members = listeners
        .iter()
        .map(TcpListener::local_addr)
        .collect::<Result<Vec<_>, _>>()?;
    let starts = listeners
        .into_iter()
        .enumerate()
        .map(|(i, l)| start(&transport, members.clone(), NodeId(i as u32), l));
    let nodes = futures::future::try_join_all(starts).await?;
    let message = Bytes::from(
        (0..mib << 20)
            .map(|i| (i * 7 + i / 4099) as u8)
            .collect::<Vec<u8>>(),
    );
    let path = std::env::temp_dir().join(format!("rdmc-target-cost-{}", std::process::id()));
    let (mut memory, mut file) = (Vec::new(), Vec::new());
    for run in 0..runs as u64 {
        memory.push(once(&nodes, 2 * run + 1, &message, None).await?);
        file.push(once(&nodes, 2 * run + 2, &message, Some(&path)).await?);
        std::fs::remove_file(&path)?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (what, times) in [("memory", memory), ("file", file)] {
        let (median, low, high) = median_range(times);
        let gib = |s: f64| (mib as f64 / 1024.0) / s;
        println!(
            "{transport} {mib} MiB into {what:6}: median {:.3} s ({:.2} GiB/s), range {:.3}-{:.3} s, {runs} runs",
            median,
            gib(median),
            low,
            high
        );
    }
    for node in nodes {
        node.shutdown().await;
    }
    Ok(())
}
