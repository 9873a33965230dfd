//! How much CPU an idle group costs: four members in this process, one
//! message multicast, then nothing for a while; the process's CPU time over
//! that idle spell (from `getrusage`) is printed as a share of one core.
//!
//! ```sh
//! cargo run --release --example idle_cpu                  # tcp, default mode, 10 s
//! cargo run --release --example idle_cpu -- mem hybrid 5  # transport, mode, seconds
//! ```
//!
//! Modes: `default`, `interrupt`, `polling`, `hybrid` (50 ms window),
//! `adaptive`.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use rdmc::{
    ClusterKey, CompletionMode, Group, GroupConfig, GroupId, MemCluster, Node, NodeConfig, NodeId,
    TcpConfig,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let transport = args.first().map_or("tcp", String::as_str);
    let mode = match args.get(1).map_or("default", String::as_str) {
        "default" => CompletionMode::default(),
        "interrupt" => CompletionMode::Interrupt,
        "polling" => CompletionMode::Polling,
        "hybrid" => CompletionMode::Hybrid {
            window: CompletionMode::PAPER_HYBRID_WINDOW,
        },
        "adaptive" => CompletionMode::Adaptive {
            gap: CompletionMode::DEFAULT_SPIN_GAP,
        },
        other => return Err(format!("unknown mode {other}").into()),
    };
    let seconds: u64 = args.get(2).map_or(Ok(10), |s| s.parse())?;
    let n = 4;
    let config = NodeConfig::new().with_completion_mode(mode);
    let nodes = match transport {
        "mem" => Node::in_memory_all(&MemCluster::new(n), config)?,
        "tcp" => {
            let listeners = (0..n)
                .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
                .collect::<std::io::Result<Vec<_>>>()?;
            let members = listeners
                .iter()
                .map(std::net::TcpListener::local_addr)
                .collect::<std::io::Result<Vec<_>>>()?;
            let key = ClusterKey::from_bytes(b"idle_cpu example: one process".to_vec())?;
            futures::future::try_join_all(listeners.into_iter().enumerate().map(|(i, l)| {
                let tcp =
                    TcpConfig::new(members.clone(), NodeId(i as u32), key.clone()).with_listener(l);
                Node::tcp(tcp, config.clone())
            }))
            .await?
        }
        other => return Err(format!("unknown transport {other}").into()),
    };
    let members: Vec<NodeId> = (0..n as u32).map(NodeId).collect();
    let mut groups = futures::future::try_join_all(
        nodes
            .iter()
            .map(|node| node.create_group(GroupId(1), &members, GroupConfig::new())),
    )
    .await?;
    // One message, so every member has seen traffic before going idle.
    for group in &mut groups {
        match group {
            Group::Root(root) => {
                root.send(Bytes::from(vec![7u8; 4 << 20])).await?;
            }
            Group::Receiver(receiver) => {
                receiver.next().await.ok_or("the group closed")??;
            }
        }
    }
    let before = cpu_seconds().ok_or("getrusage failed")?;
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let after = cpu_seconds().ok_or("getrusage failed")?;
    let share = (after - before) / seconds as f64;
    println!(
        "idle {n}-member group, {transport}, {mode:?}: {:.4} CPU seconds in {seconds} s = {:.3} % of a core",
        after - before,
        share * 100.0
    );
    // Every member closes at once: the root's close waits for the others'.
    futures::future::try_join_all(groups.iter_mut().map(|group| group.close())).await?;
    Ok(())
}

/// CPU seconds (user + system) this process has used, from `getrusage`.
#[allow(unsafe_code)]
fn cpu_seconds() -> Option<f64> {
    // SAFETY: `getrusage` fills the zeroed struct it is given and nothing else.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut usage) != 0 {
            return None;
        }
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(seconds(usage.ru_utime) + seconds(usage.ru_stime))
}
