//! The `pubsub` example's feed: a subscriber killed mid-feed (on `mem` and
//! on `tcp` loopback) is left out and every survivor still gets every
//! object exactly once, in order; a shutdown stops the feed cleanly with
//! every subscriber holding exactly what was delivered; a publisher that
//! sends what is not a feed makes subscribers stop with an error, not a
//! panic.

#[path = "../examples/pubsub/feed.rs"]
mod feed;

use std::net::TcpListener;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use rdmc::{ClusterKey, MemCluster, Node, NodeConfig, NodeId, TcpConfig};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const NODES: usize = 4;
const LIMIT: Duration = Duration::from_secs(60);

/// Object `i`: up to 96 KiB, different for every `i`.
fn object(i: u64) -> Bytes {
    let len = 1 + (i as usize * 7_919) % (96 * 1024);
    Bytes::from((0..len).map(|b| (b as u64 ^ i) as u8).collect::<Vec<_>>())
}

#[derive(Clone, Copy, Debug)]
enum Transport {
    Mem,
    Tcp,
}

async fn start(transport: Transport) -> (Vec<Node>, Option<MemCluster>) {
    match transport {
        Transport::Mem => {
            let cluster = MemCluster::new(NODES);
            let nodes = Node::in_memory_all(&cluster, NodeConfig::new()).unwrap();
            (nodes, Some(cluster))
        }
        Transport::Tcp => {
            let listeners: Vec<_> = (0..NODES)
                .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
                .collect();
            let addresses: Vec<_> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
            let mut key = [0; 32];
            aws_lc_rs::rand::fill(&mut key).unwrap();
            let key = ClusterKey::from_bytes(key.to_vec()).unwrap();
            let starts = listeners.into_iter().enumerate().map(|(id, listener)| {
                let config = TcpConfig::new(addresses.clone(), NodeId(id as u32), key.clone())
                    .with_listener(listener);
                Node::tcp(config, NodeConfig::new())
            });
            (futures::future::try_join_all(starts).await.unwrap(), None)
        }
    }
}

type Subscriber = JoinHandle<(Node, Result<feed::Received, feed::FeedError>)>;

/// Start a subscriber on every node but the publisher's (node 0).
fn subscribe_all(nodes: Vec<Node>, members: &[NodeId]) -> Vec<Subscriber> {
    nodes
        .into_iter()
        .map(|node| {
            let members = members.to_vec();
            tokio::spawn(async move {
                let received = feed::subscribe(&node, members).await;
                (node, received)
            })
        })
        .collect()
}

async fn a_subscriber_killed_mid_feed_is_left_out(transport: Transport) {
    let (mut nodes, mem) = start(transport).await;
    let members: Vec<NodeId> = (0..NODES as u32).map(NodeId).collect();
    let publisher = nodes.remove(0);
    let mut subscribers = subscribe_all(nodes, &members);
    // Node 2 dies as the publisher takes object 20 (earlier ones in flight):
    // on mem it crashes; on both, its task (and so its node) goes away.
    let victim = NodeId(2);
    let mut victim_task = Some(subscribers.remove(1));
    let count = 60;
    let objects = futures::stream::iter(0..count).then(|i| {
        let killing = (i == 20).then(|| victim_task.take()).flatten();
        let mem = &mem;
        async move {
            if let Some(task) = killing {
                if let Some(mem) = mem {
                    mem.kill(victim);
                }
                task.abort();
                // Cancelled, or it ended first with its own failure (a
                // crashed mem node learns of it at once).
                match task.await {
                    Err(e) => assert!(e.is_cancelled()),
                    Ok((_, outcome)) => assert!(
                        matches!(outcome, Err(feed::FeedError::Group(rdmc::Error::GroupFailed { suspect, .. })) if suspect == Some(victim))
                    ),
                }
            }
            object(i)
        }
    });
    let published = feed::publish(&publisher, members, objects, CancellationToken::new())
        .await
        .expect("the feed carries on without the victim");
    assert!(victim_task.is_none(), "the victim was killed");
    assert_eq!(
        published,
        feed::Published {
            delivered: count,
            left_out: vec![victim],
            stopped: false
        }
    );
    check_subscribers(subscribers, &[victim], count).await;
    publisher.shutdown().await;
}

/// Every subscriber ended `Ok`, left out exactly `left_out`, and holds
/// objects 0..`count`, each intact; then its node shuts down.
async fn check_subscribers(subscribers: Vec<Subscriber>, left_out: &[NodeId], count: u64) {
    for subscriber in subscribers {
        let (node, received) = subscriber.await.unwrap();
        let received = received.unwrap_or_else(|e| panic!("node {}: {e}", node.id()));
        assert_eq!(received.left_out, left_out, "node {}", node.id());
        assert_eq!(received.objects.len() as u64, count, "node {}", node.id());
        for (i, got) in received.objects.iter().enumerate() {
            assert!(
                *got == object(i as u64),
                "node {}: object {i} differs",
                node.id()
            );
        }
        node.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mem_a_subscriber_killed_mid_feed_is_left_out_every_survivor_gets_every_object_once() {
    let run = a_subscriber_killed_mid_feed_is_left_out(Transport::Mem);
    tokio::time::timeout(LIMIT, run)
        .await
        .expect("within the limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_a_subscriber_killed_mid_feed_is_left_out_every_survivor_gets_every_object_once() {
    let run = a_subscriber_killed_mid_feed_is_left_out(Transport::Tcp);
    tokio::time::timeout(LIMIT, run)
        .await
        .expect("within the limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_stops_the_feed_cleanly_with_every_subscriber_holding_what_was_delivered() {
    let run = async {
        let (mut nodes, _) = start(Transport::Mem).await;
        let members: Vec<NodeId> = (0..NODES as u32).map(NodeId).collect();
        let publisher = nodes.remove(0);
        let subscribers = subscribe_all(nodes, &members);
        // The shutdown comes as the publisher takes object 25 of a feed
        // that would go on for ever.
        let shutdown = CancellationToken::new();
        let trigger = shutdown.clone();
        let objects = futures::stream::iter(0..).map(|i| {
            if i == 25 {
                trigger.cancel();
            }
            object(i)
        });
        let published = feed::publish(&publisher, members, objects, shutdown)
            .await
            .expect("a clean stop");
        assert!(published.stopped);
        assert!(published.left_out.is_empty());
        // Object 25 was taken before the shutdown was seen, at the latest.
        assert!((1..=26).contains(&published.delivered), "{published:?}");
        check_subscribers(subscribers, &[], published.delivered).await;
        publisher.shutdown().await;
    };
    tokio::time::timeout(LIMIT, run)
        .await
        .expect("within the limit");
}

/// A root that creates the feed's first group and sends `messages` as they
/// are, instead of the feed's framing; every subscriber's outcome.
async fn subscribers_of_a_rogue_publisher(messages: Vec<Bytes>) -> Vec<feed::FeedError> {
    let (mut nodes, _) = start(Transport::Mem).await;
    let members: Vec<NodeId> = (0..NODES as u32).map(NodeId).collect();
    let publisher = nodes.remove(0);
    let subscribers = subscribe_all(nodes, &members);
    let group = publisher
        .create_group(feed::group_id(0), &members, feed::config())
        .await
        .unwrap()
        .into_sender()
        .unwrap();
    for message in messages {
        // The subscribers may already have left: the send's outcome is not
        // what this test is about.
        let _ = group.send(message).await;
    }
    let mut errors = Vec::new();
    for subscriber in subscribers {
        let (node, received) = subscriber.await.unwrap();
        match received {
            Ok(r) => panic!("node {}: accepted a rogue feed: {r:?}", node.id()),
            Err(e) => errors.push(e),
        }
        node.shutdown().await;
    }
    drop(group);
    publisher.shutdown().await;
    errors
}

/// Every subscriber stopped with an error: at least one saw the rogue
/// message itself (`saw`); the others may instead have lost that one when
/// it left the group (it relays in the schedule) and failed with the group.
fn assert_rejected(errors: &[feed::FeedError], saw: impl Fn(&feed::FeedError) -> bool) {
    assert_eq!(errors.len(), NODES - 1);
    assert!(errors.iter().any(&saw), "{errors:?}");
    for e in errors {
        assert!(saw(e) || matches!(e, feed::FeedError::Group(_)), "{e}");
    }
}

#[tokio::test]
async fn a_message_too_short_for_an_index_is_an_error_not_a_panic() {
    let run = subscribers_of_a_rogue_publisher(vec![Bytes::from_static(b"abc")]);
    let errors = tokio::time::timeout(LIMIT, run)
        .await
        .expect("within the limit");
    assert_rejected(&errors, |e| {
        matches!(e, feed::FeedError::Malformed { seq: 0, len: 3 })
    });
}

#[tokio::test]
async fn an_object_out_of_order_is_an_error() {
    let framed = |index: u64| {
        let mut m = index.to_le_bytes().to_vec();
        m.extend_from_slice(b"object");
        Bytes::from(m)
    };
    let run = subscribers_of_a_rogue_publisher(vec![framed(0), framed(2)]);
    let errors = tokio::time::timeout(LIMIT, run)
        .await
        .expect("within the limit");
    assert_rejected(&errors, |e| {
        matches!(
            e,
            feed::FeedError::OutOfOrder {
                expected: 1,
                got: 2
            }
        )
    });
}
