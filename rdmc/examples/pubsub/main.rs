//! A pub/sub feed of large objects: one publisher, subscribers reading the
//! feed as a stream, graceful shutdown on Ctrl-C, and the feed re-formed
//! without a subscriber that fails.
//!
//! ```sh
//! cargo run --example pubsub                       # 4 nodes; node 2 dies at object 20
//! cargo run --example pubsub -- --objects 100000   # press Ctrl-C to stop it early
//! cargo run --example pubsub -- --no-kill
//! ```
//!
//! The feed itself is in `feed.rs`; its test is `rdmc/tests/pubsub.rs`.

mod feed;

use bytes::Bytes;
use futures::StreamExt;
use rdmc::{MemCluster, Node, NodeConfig, NodeId};
use tokio_util::sync::CancellationToken;

const NODES: usize = 4;
/// Each object's size.
const OBJECT: usize = 1024 * 1024;

fn options() -> Result<(u64, Option<u64>), String> {
    let (mut objects, mut kill_at) = (100, Some(20));
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--objects" => {
                objects = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .ok_or("--objects takes a number")?;
            }
            "--no-kill" => kill_at = None,
            other => {
                return Err(format!(
                    "unknown option {other:?}; options: --objects N, --no-kill"
                ));
            }
        }
    }
    Ok((objects, kill_at))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let (count, kill_at) = options()?;
    let cluster = MemCluster::new(NODES);
    let mut nodes: Vec<Option<Node>> = Node::in_memory_all(&cluster, NodeConfig::new())?
        .into_iter()
        .map(Some)
        .collect();
    let members: Vec<NodeId> = (0..NODES as u32).map(NodeId).collect();
    let victim = NodeId(2);

    // Ctrl-C asks the publisher to stop; it finishes what is in flight.
    let shutdown = CancellationToken::new();
    let on_ctrl_c = shutdown.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            println!("Ctrl-C: finishing the objects in flight");
            on_ctrl_c.cancel();
        }
    });

    let mut subscribers = Vec::new();
    for node in nodes.iter_mut().skip(1) {
        let node = node.take().expect("a subscriber's node");
        let members = members.clone();
        subscribers.push(tokio::spawn(async move {
            let received = feed::subscribe(&node, members).await;
            (node, received)
        }));
    }
    let publisher = nodes[0].take().expect("the publisher's node");

    // The objects, made as the publisher takes them; the victim dies when
    // object `kill_at` is taken, with earlier ones still in flight.
    let victim_task = subscribers.remove(victim.index() - 1);
    let mut victim_task = Some(victim_task);
    let objects = futures::stream::iter(0..count).then(|i| {
        let killing = (Some(i) == kill_at).then(|| victim_task.take()).flatten();
        let cluster = &cluster;
        async move {
            if let Some(task) = killing {
                println!("node {victim} crashes");
                cluster.kill(victim);
                task.abort();
            }
            Bytes::from(vec![i as u8; OBJECT])
        }
    });
    let published = feed::publish(&publisher, members, objects, shutdown).await?;
    if let Some(spared) = victim_task {
        subscribers.insert(victim.index() - 1, spared);
    }
    println!(
        "published {} objects of {OBJECT} bytes{}; left out: {:?}",
        published.delivered,
        if published.stopped {
            " (stopped early)"
        } else {
            ""
        },
        published.left_out
    );

    for subscriber in subscribers {
        let (node, received) = subscriber.await?;
        let received = received?;
        let intact = received
            .objects
            .iter()
            .enumerate()
            .all(|(i, o)| o.len() == OBJECT && o.iter().all(|&b| b == i as u8));
        println!(
            "node {}: {} objects, intact: {intact}; left out: {:?}; {} received again and skipped",
            node.id(),
            received.objects.len(),
            received.left_out,
            received.duplicates
        );
        node.shutdown().await;
    }
    publisher.shutdown().await;
    Ok(())
}
