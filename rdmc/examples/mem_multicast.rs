//! Replicate one object to several in-process members and read it back.
//!
//! ```sh
//! cargo run --example mem_multicast
//! ```

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use rdmc::{Algorithm, GroupConfig, GroupId, MemCluster, Node, NodeConfig, NodeId};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n = 5;
    let cluster = MemCluster::new(n);
    let nodes = Node::in_memory_all(&cluster, NodeConfig::new())?;
    let members: Vec<NodeId> = (0..n as u32).map(NodeId).collect();
    let config = GroupConfig::new()
        .with_algorithm(Algorithm::BinomialPipeline)
        .with_block_size(64 * 1024);

    let mut groups = futures::future::try_join_all(
        nodes
            .iter()
            .map(|node| node.create_group(GroupId(1), &members, config.clone())),
    )
    .await?
    .into_iter();
    // The first member is the root: its handle sends; every other member's
    // handle is a stream of the root's messages.
    let mut root = groups
        .next()
        .and_then(|group| group.into_sender().ok())
        .ok_or("node 0 is the root")?;

    let object = Bytes::from(vec![42u8; 3 * 1024 * 1024 + 17]);
    let readers: Vec<_> = groups
        .map(|group| {
            let mut receiver = group.into_receiver().expect("every other member receives");
            tokio::spawn(async move {
                let messages: Vec<_> = receiver.by_ref().take(2).try_collect().await?;
                receiver.close().await?;
                Ok::<_, rdmc::Error>((receiver.rank(), messages))
            })
        })
        .collect();

    // Each send queues its message; the close resolves once every member's
    // application has both.
    root.send(object.clone()).await?;
    root.send(Bytes::from_static(b"done")).await?;
    root.close().await?;

    for reader in readers {
        let (rank, messages) = reader.await??;
        assert_eq!(messages[0].data, object);
        println!(
            "rank {rank}: {} messages, first {} bytes",
            messages.len(),
            messages[0].data.len()
        );
    }
    Ok(())
}
