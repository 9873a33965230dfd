//! The `blob_store` example's store, driven on `mem` and on `tcp` loopback:
//! a batch of puts with a node killed while writes are in flight, then
//! every replica checked byte for byte.
//!
//! What must hold after the run:
//! - every write acknowledged (its `delivered()` resolved) is, byte for
//!   byte, in the file of every replica that survived, and a get returns it;
//! - every write started after the kill to a group the killed node is in
//!   fails with an error naming that node; every other write started after
//!   the kill succeeds (the other groups carry on);
//! - closing the store: the groups without the killed node close `Ok`, the
//!   others report the failure, naming it.

#[path = "common/scratch.rs"]
mod scratch;
#[path = "../examples/blob_store/store.rs"]
mod store;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use rdmc::{Durability, Error, NodeId};
use scratch::ScratchDir;
use store::{BlobRef, BlobStore, StoreError, Transport};

const NODES: usize = 6;
const OBJECTS: u64 = 90;
/// Acknowledged writes before the kill.
const KILL_AFTER: usize = 20;
const KILLED: NodeId = NodeId(2);
const CONCURRENCY: usize = 8;
/// The whole scenario, in a debug build on a shared machine, takes a few
/// seconds; past this it is stuck.
const LIMIT: Duration = Duration::from_secs(60);

/// Object `id`'s bytes: from 1 byte to 256 KiB, different for every id.
fn object(id: u64) -> Bytes {
    let len = 1 + (id as usize * 104_729) % (256 * 1024);
    let bytes = (0..len).map(|i| ((i as u64).wrapping_mul(31) ^ id) as u8);
    Bytes::from(bytes.collect::<Vec<_>>())
}

/// Whether `error` blames `node`.
fn names(error: &Error, node: NodeId) -> bool {
    match error {
        Error::GroupFailed { suspect, .. } => *suspect == Some(node),
        Error::NodeShutDown(n) => *n == node,
        _ => false,
    }
}

/// One put's outcome, and whether it was queued after the kill had finished.
struct Put {
    id: u64,
    after_kill: bool,
    outcome: Result<BlobRef, StoreError>,
}

async fn killed_mid_way_every_surviving_replica_holds_every_acknowledged_write(
    transport: Transport,
) {
    let scratch = ScratchDir::new(&format!("blob-store-test-{transport:?}"));
    let store = BlobStore::start(transport, NODES, &scratch, Durability::Synced)
        .await
        .expect("the store starts");
    let killed = AtomicBool::new(false);

    // Put every object, `CONCURRENCY` at a time; once `KILL_AFTER` are
    // acknowledged, kill a node while the next writes are in flight (their
    // messages queued in the nodes).
    let mut puts = futures::stream::iter(0..OBJECTS)
        .map(|id| {
            // `put` queues the object as it is called: buffer_unordered
            // calls this as it fills its slots, before it yields anything.
            let after_kill = killed.load(Ordering::SeqCst);
            let put = store.put(id, object(id));
            async move {
                Put {
                    id,
                    after_kill,
                    outcome: put.await,
                }
            }
        })
        .buffer_unordered(CONCURRENCY);
    let mut done = Vec::new();
    let mut acknowledged = 0;
    // Puts started before the kill and finished after it: in flight at the kill.
    let mut in_flight_at_kill = 0;
    while let Some(put) = puts.next().await {
        acknowledged += usize::from(put.outcome.is_ok());
        in_flight_at_kill += usize::from(killed.load(Ordering::SeqCst) && !put.after_kill);
        done.push(put);
        if acknowledged == KILL_AFTER && !killed.load(Ordering::SeqCst) {
            store.kill(KILLED).await;
            killed.store(true, Ordering::SeqCst);
        }
    }
    drop(puts);
    assert!(killed.load(Ordering::SeqCst), "the kill happened");
    assert!(in_flight_at_kill > 0, "writes were in flight at the kill");
    assert_eq!(done.len(), OBJECTS as usize);

    let mut failed_after = 0;
    let mut carried_on = 0;
    for put in &done {
        let replicas = store.replicas_of(put.id);
        let with_killed = replicas.contains(&KILLED);
        match &put.outcome {
            Ok(blob) => {
                assert_eq!(blob.replicas, replicas);
                assert!(
                    !(put.after_kill && with_killed),
                    "put {} to {replicas:?} started after node {KILLED} was killed, \
                     and was acknowledged",
                    put.id
                );
                carried_on += usize::from(put.after_kill);
            }
            Err(StoreError::Replication(e)) if with_killed && names(e, KILLED) => {
                failed_after += usize::from(put.after_kill);
            }
            Err(e) => panic!(
                "put {} to {replicas:?} (after the kill: {}) failed without naming node {KILLED}: {e}",
                put.id, put.after_kill
            ),
        }
        if put.after_kill && !with_killed {
            assert!(
                put.outcome.is_ok(),
                "put {} does not involve node {KILLED}",
                put.id
            );
        }
    }
    assert!(failed_after > 0, "some writes failed after the kill");
    assert!(carried_on > 0, "some writes succeeded after the kill");

    // Every acknowledged write is on every surviving replica, byte for
    // byte, and a get returns it.
    let acknowledged: Vec<&BlobRef> = done
        .iter()
        .filter_map(|p| p.outcome.as_ref().ok())
        .collect();
    assert!(acknowledged.len() >= KILL_AFTER);
    for blob in &acknowledged {
        let expected = object(blob.id);
        for &node in blob.replicas.iter().filter(|&&n| n != KILLED) {
            let path = store::replica_file(&scratch, node, blob.group, blob.seq);
            let held = std::fs::read(&path)
                .unwrap_or_else(|e| panic!("object {} on node {node}: {e}", blob.id));
            assert!(
                held == expected[..],
                "object {} on node {node} ({}): {} bytes, differ from the {} written",
                blob.id,
                path.display(),
                held.len(),
                expected.len()
            );
        }
        assert_eq!(store.get(blob).await.expect("a get"), expected);
    }

    // Closing: the groups without the killed node close cleanly; the
    // others report its failure.
    for (group, outcome) in store.shutdown().await {
        let members = store::members_of(group.0 as usize % NODES, NODES);
        match outcome {
            Ok(()) => assert!(!members.contains(&KILLED), "group {group} closed Ok"),
            Err(e) => assert!(
                members.contains(&KILLED) && names(&e, KILLED),
                "group {group} ({members:?}) closed with {e}"
            ),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mem_killed_mid_way_every_surviving_replica_holds_every_acknowledged_write() {
    let run = killed_mid_way_every_surviving_replica_holds_every_acknowledged_write(Transport::Mem);
    tokio::time::timeout(LIMIT, run)
        .await
        .expect("within the limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_killed_mid_way_every_surviving_replica_holds_every_acknowledged_write() {
    let run = killed_mid_way_every_surviving_replica_holds_every_acknowledged_write(Transport::Tcp);
    tokio::time::timeout(LIMIT, run)
        .await
        .expect("within the limit");
}

/// Put objects `ids`, `CONCURRENCY` at a time: each put's id and outcome.
async fn put_all(
    store: &BlobStore,
    ids: std::ops::Range<u64>,
) -> Vec<(u64, Result<BlobRef, StoreError>)> {
    futures::stream::iter(ids)
        .map(|id| {
            let put = store.put(id, object(id));
            async move { (id, put.await) }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await
}

/// On `tcp`, a replica is taken down and started again while the others run
/// on: writes to its groups fail naming it while it is down; once it is
/// back, its groups form again, the failed writes are retried and new
/// ones made, and every acknowledged write is, byte for byte, on all three
/// of its replicas — the restarted one included — and every group closes
/// cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_a_restarted_replica_rejoins_its_groups_and_every_write_is_on_every_replica() {
    let run = async {
        let scratch = ScratchDir::new("blob-store-test-restart");
        let store = BlobStore::start(Transport::Tcp, NODES, &scratch, Durability::Synced)
            .await
            .expect("the store starts");
        let mut stored: Vec<BlobRef> = Vec::new();
        for (id, put) in put_all(&store, 0..30).await {
            stored.push(put.unwrap_or_else(|e| panic!("put {id}: {e}")));
        }
        store.kill(KILLED).await;
        let mut failed = Vec::new();
        for (id, put) in put_all(&store, 30..60).await {
            let with_killed = store.replicas_of(id).contains(&KILLED);
            match put {
                Ok(blob) => {
                    assert!(!with_killed, "put {id} acknowledged without node {KILLED}");
                    stored.push(blob);
                }
                Err(StoreError::Replication(e)) if with_killed && names(&e, KILLED) => {
                    failed.push(id);
                }
                Err(e) => panic!("put {id}: {e}"),
            }
        }
        assert!(
            !failed.is_empty(),
            "some writes failed while node {KILLED} was down"
        );
        let before = store.group_of(KILLED.0 as u64);
        store.restart(KILLED).await.expect("the node restarts");
        assert_ne!(
            store.group_of(KILLED.0 as u64),
            before,
            "its groups formed again"
        );
        for &id in &failed {
            let blob = store.put(id, object(id)).await;
            stored.push(blob.unwrap_or_else(|e| panic!("retried put {id}: {e}")));
        }
        for (id, put) in put_all(&store, 60..OBJECTS).await {
            stored.push(put.unwrap_or_else(|e| panic!("put {id} after the restart: {e}")));
        }
        assert_eq!(stored.len(), OBJECTS as usize);
        for blob in &stored {
            let expected = object(blob.id);
            for &node in &blob.replicas {
                let path = store::replica_file(&scratch, node, blob.group, blob.seq);
                let held = std::fs::read(&path)
                    .unwrap_or_else(|e| panic!("object {} on node {node}: {e}", blob.id));
                assert!(
                    held == expected[..],
                    "object {} on node {node} differs",
                    blob.id
                );
            }
            assert_eq!(store.get(blob).await.expect("a get"), expected);
        }
        for (group, outcome) in store.shutdown().await {
            assert!(outcome.is_ok(), "group {group}: {outcome:?}");
        }
    };
    tokio::time::timeout(LIMIT, run)
        .await
        .expect("within the limit");
}
