//! Three members on loopback, in one process, over a network transport: the
//! root multicasts a few objects, the others read them as a stream.
//!
//! ```sh
//! cargo run --example cluster                      # authenticated TCP
//! cargo run --features ofi --example cluster ofi   # libfabric, `tcp` provider
//! ```
//!
//! In a real deployment each member is its own process (see `rdmc member`,
//! and `rdmc member --transport ofi`), with the member list and cluster key
//! from configuration.

use std::net::{SocketAddr, TcpListener};

use bytes::Bytes;
use futures::StreamExt;
use rdmc::{ClusterKey, Group, GroupConfig, GroupId, Node, NodeConfig, NodeId, TcpConfig};

/// Start member `id` of `members` on `transport`, accepting on `listener`.
async fn start(
    transport: &str,
    members: Vec<SocketAddr>,
    id: NodeId,
    key: ClusterKey,
    listener: TcpListener,
) -> Result<Node, Box<dyn std::error::Error>> {
    match transport {
        // Every member connects to the others (authenticating with the key).
        "tcp" => {
            let config = TcpConfig::new(members, id, key).with_listener(listener);
            Ok(Node::tcp(config, NodeConfig::new()).await?)
        }
        // Every member meets the others over TCP (authenticating with the
        // key), then connects its fabric endpoints to them. Pick the
        // provider with `OfiConfig::with_provider("verbs")` and so on on a
        // real fabric.
        #[cfg(feature = "ofi")]
        "ofi" => {
            let config = rdmc::OfiConfig::new(members, id, key).with_listener(listener);
            Ok(Node::ofi(config, NodeConfig::new()).await?)
        }
        other => Err(format!(
            "unknown transport {other:?}: tcp, or ofi (built with --features ofi)"
        )
        .into()),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let transport = std::env::args().nth(1).unwrap_or_else(|| "tcp".into());

    // Bind every member's port first so the member list is known up front.
    let listeners = (0..3)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    let addresses = listeners
        .iter()
        .map(TcpListener::local_addr)
        .collect::<std::io::Result<Vec<_>>>()?;
    let key = ClusterKey::from_bytes(b"example key: at least sixteen bytes".to_vec())?;
    let nodes =
        futures::future::try_join_all(listeners.into_iter().enumerate().map(|(id, listener)| {
            let id = NodeId(id as u32);
            start(&transport, addresses.clone(), id, key.clone(), listener)
        }))
        .await?;

    // Every member creates the group with the same membership; node 0 is the root.
    let members = [NodeId(0), NodeId(1), NodeId(2)];
    let config = GroupConfig::new().with_block_size(256 * 1024);
    let groups = futures::future::try_join_all(
        nodes
            .iter()
            .map(|node| node.create_group(GroupId(1), &members, config.clone())),
    )
    .await?;
    let mut root = None;
    let mut receivers = Vec::new();
    for group in groups {
        match group {
            Group::Root(sender) => root = Some(sender),
            Group::Receiver(mut receiver) => receivers.push(tokio::spawn(async move {
                let mut total = 0;
                while let Some(message) = receiver.next().await {
                    let message = message?;
                    total += message.data.len();
                    println!(
                        "rank {} got message {} ({} bytes)",
                        receiver.rank(),
                        message.seq,
                        message.data.len()
                    );
                }
                receiver.close().await?;
                Ok::<_, rdmc::Error>(total)
            })),
        }
    }

    let mut root = root.ok_or("node 0 is the root")?;
    for i in 0..3u8 {
        root.send(Bytes::from(vec![i; 5 * 1024 * 1024 + usize::from(i)]))
            .await?;
    }
    root.close().await?;
    for receiver in receivers {
        receiver.await??;
    }
    // Put the last control messages on the wire before the nodes go.
    for node in nodes {
        node.shutdown().await;
    }
    Ok(())
}
