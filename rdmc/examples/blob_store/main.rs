//! A 3-replica blob store over many overlapping groups with rotating roots:
//! puts acknowledged once every replica holds the object, replicas written
//! to files by the receive-target hook, gets checked against the object's
//! SHA-256, and a node taken down half-way.
//!
//! ```sh
//! cargo run --example blob_store                  # 6 in-process nodes
//! cargo run --example blob_store -- --tcp         # 6 tcp nodes on loopback
//! cargo run --example blob_store -- --nodes 8 --objects 200 --kill 3
//! cargo run --example blob_store -- --tcp --restart  # the killed node comes back
//! cargo run --example blob_store -- --durability taken  # acknowledged once written, not synced
//! ```
//!
//! Puts are acknowledged once every copy is on stable storage (each file's
//! data synced), unless `--durability taken` says once written.
//!
//! The store itself is in `store.rs`; its test (`rdmc/tests/blob_store.rs`)
//! checks every replica byte for byte after a run with a node killed while
//! writes are in flight.

mod store;

use bytes::Bytes;
use futures::{FutureExt, StreamExt, TryStreamExt};
use rdmc::{Durability, NodeId};
use store::{BlobRef, BlobStore, StoreError, Transport};

/// How many puts (and gets) are in flight at once.
const CONCURRENCY: usize = 8;

struct Options {
    transport: Transport,
    nodes: usize,
    objects: u64,
    kill: Option<u32>,
    restart: bool,
    durability: Durability,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        transport: Transport::Mem,
        nodes: 6,
        objects: 60,
        kill: Some(1),
        restart: false,
        durability: Durability::Synced,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--durability" {
            options.durability = match args.next().as_deref() {
                Some("synced") => Durability::Synced,
                Some("taken") => Durability::Taken,
                _ => return Err("--durability takes synced or taken".into()),
            };
            continue;
        }
        let mut value = |what: &str| {
            args.next()
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or(format!("{arg} takes {what}"))
        };
        match arg.as_str() {
            "--tcp" => options.transport = Transport::Tcp,
            "--nodes" => options.nodes = value("a number of nodes")? as usize,
            "--objects" => options.objects = value("a number of objects")?,
            "--kill" => options.kill = Some(value("a node id")? as u32),
            "--no-kill" => options.kill = None,
            "--restart" => options.restart = true,
            other => {
                return Err(format!(
                    "unknown option {other:?}; options: --tcp, --nodes N, --objects N, \
                     --kill NODE, --no-kill, --restart (with --tcp), \
                     --durability synced|taken"
                ));
            }
        }
    }
    Ok(options)
}

/// Object `id`'s bytes: from a few bytes to a few hundred KiB.
fn object(id: u64) -> Bytes {
    let len = 1 + (id as usize * 7919) % (300 * 1024);
    Bytes::from((0..len).map(|i| (i as u64 ^ id) as u8).collect::<Vec<_>>())
}

/// Put objects `ids`, `CONCURRENCY` at a time: each put's outcome.
async fn put_all(
    store: &BlobStore,
    ids: std::ops::Range<u64>,
) -> Vec<(u64, Result<BlobRef, StoreError>)> {
    futures::stream::iter(ids)
        .map(|id| store.put(id, object(id)).map(move |put| (id, put)))
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let options = options()?;
    let dir = std::env::temp_dir().join(format!("rdmc-blob-store-{}", std::process::id()));
    let store =
        BlobStore::start(options.transport, options.nodes, &dir, options.durability).await?;
    println!(
        "{} nodes on {:?}, replicas under {}",
        store.len(),
        options.transport,
        dir.display()
    );

    // Half the objects with every node up.
    let half = options.objects / 2;
    let mut stored: Vec<BlobRef> = Vec::new();
    let started = std::time::Instant::now();
    for (id, put) in put_all(&store, 0..half).await {
        stored.push(put.map_err(|e| format!("put {id}: {e}"))?);
    }
    let took = started.elapsed();
    println!(
        "put {} objects, each on 3 replicas ({:?}), in {:.3} s: {:.0} puts/s",
        stored.len(),
        options.durability,
        took.as_secs_f64(),
        stored.len() as f64 / took.as_secs_f64()
    );

    // A node goes down: the groups it is in fail, naming it; the rest carry on.
    if let Some(node) = options.kill {
        store.kill(NodeId(node)).await;
        println!("node {node} is down");
    }
    let mut failed = Vec::new();
    for (id, put) in put_all(&store, half..options.objects).await {
        match put {
            Ok(blob) => stored.push(blob),
            Err(e) => {
                failed.push(id);
                println!(
                    "put {id} (replicas {:?}) failed: {e}",
                    store.replicas_of(id)
                );
            }
        }
    }
    println!("second half: {} puts failed", failed.len());

    // The node comes back: its groups form again, and the failed puts are
    // retried.
    if let (Some(node), true) = (options.kill, options.restart) {
        store.restart(NodeId(node)).await?;
        println!("node {node} is back; retrying {} puts", failed.len());
        for id in failed {
            stored.push(store.put(id, object(id)).await?);
        }
    }

    // Read every acknowledged object back from a replica that is up.
    futures::stream::iter(&stored)
        .map(Ok)
        .try_for_each_concurrent(CONCURRENCY, |blob| {
            let store = &store;
            async move {
                let data = store.get(blob).await?;
                assert_eq!(data, object(blob.id));
                Ok::<_, StoreError>(())
            }
        })
        .await?;
    println!("read back all {} acknowledged objects intact", stored.len());

    for (group, outcome) in store.shutdown().await {
        if let Err(e) = outcome {
            println!("group {group} closed with: {e}");
        }
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
