//! Compile-time checks that the public handles and futures can cross
//! tasks and threads, and have the traits a tokio application expects.

use std::future::Future;

use bytes::Bytes;
use futures::Sink;
use futures::stream::FusedStream;
use rdmc::{Error, Message};

fn assert_send<T: Send>() {}

/// `T` is `Send` and `Sync` (a tuple: each of its types).
fn assert_send_sync<T: Send + Sync>() {}

/// `T` is `Send`, `Sync` and `Unpin` (a tuple: each of its types).
fn assert_send_sync_unpin<T: Send + Sync + Unpin>() {}

/// `f` can be spawned: it is `Send` (never polled).
fn check_send<F: Future + Send>(_: F) {}

#[test]
fn handles_and_futures_are_send_sync_unpin() {
    assert_send_sync::<(rdmc::Node, rdmc::MemCluster, rdmc::Error, rdmc::Message)>();
    assert_send_sync_unpin::<(
        rdmc::Group,
        rdmc::Sender,
        rdmc::Receiver,
        rdmc::Receipt,
        rdmc::Sent,
        rdmc::Delivered,
        rdmc::Permit<'static>,
    )>();
}

#[test]
fn the_receiver_is_a_fused_stream_and_the_sender_a_sink() {
    fn fused<T: FusedStream<Item = Result<Message, Error>>>() {}
    fn sink<T: Sink<Bytes, Error = Error>>() {}
    fused::<rdmc::Receiver>();
    sink::<rdmc::Sender>();
    // What a receipt's futures resolve with.
    fn resolves<F: Future<Output = T>, T>() {}
    resolves::<rdmc::Sent, Result<rdmc::MessageTimings, Error>>();
    resolves::<rdmc::Delivered, Result<(), Error>>();
}

/// The member list of a group, made on the spot (a temporary): the one
/// node of the test's cluster.
fn members_of(_group: u64) -> Vec<rdmc::NodeId> {
    vec![rdmc::NodeId(0)]
}

#[test]
fn create_group_futures_are_send_and_borrow_nothing() {
    fn check<F: Future + Send + 'static>(_: F) {}
    let cluster = rdmc::MemCluster::new(1);
    // Building the futures needs no runtime; they are never polled.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let node = rdmc::Node::in_memory(&cluster, rdmc::NodeId(0), rdmc::NodeConfig::new()).unwrap();
    // The member list is a temporary, gone before the future is used.
    check(node.create_group(rdmc::GroupId(1), &members_of(0), rdmc::GroupConfig::new()));
    let creates: Vec<_> = (2..4)
        .map(|x| node.create_group(rdmc::GroupId(x), &members_of(x), rdmc::GroupConfig::new()))
        .collect();
    // Nor does it borrow the node.
    drop(node);
    for create in creates {
        check(create);
    }
}

/// Every future of the handles is `Send`: each can be awaited inside a
/// spawned task.
#[tokio::test]
async fn the_handles_futures_are_send() {
    let nodes =
        rdmc::Node::in_memory_all(&rdmc::MemCluster::new(2), rdmc::NodeConfig::new()).unwrap();
    let members = [rdmc::NodeId(0), rdmc::NodeId(1)];
    let (root, receiver) = tokio::try_join!(
        nodes[0].create_group(rdmc::GroupId(1), &members, rdmc::GroupConfig::new()),
        nodes[1].create_group(rdmc::GroupId(1), &members, rdmc::GroupConfig::new()),
    )
    .unwrap();
    let mut root = root.into_sender().unwrap();
    let mut receiver = receiver.into_receiver().unwrap();
    // Never polled: nothing is sent, nothing closes.
    check_send(root.send(Bytes::new()));
    check_send(root.reserve());
    check_send(root.flush());
    check_send(root.closed());
    #[cfg(target_os = "linux")]
    check_send(root.send_file(std::fs::File::open("/dev/null").unwrap()));
    check_send(root.close());
    check_send(receiver.close());
    assert_eq!(root.in_flight(), 0, "an unpolled send queues nothing");
}

#[cfg(feature = "ofi")]
#[test]
fn the_ofi_start_future_is_send() {
    fn check<F: std::future::Future + Send>(_: F) {}
    assert_send::<rdmc::OfiConfig>();
    let key = rdmc::ClusterKey::from_bytes(b"sixteen bytes at least".to_vec()).unwrap();
    let config = rdmc::OfiConfig::new(vec![], rdmc::NodeId(0), key);
    // Never polled.
    check(rdmc::Node::ofi(config, rdmc::NodeConfig::new()));
}

#[test]
fn the_tcp_start_future_is_send() {
    fn check<F: std::future::Future + Send>(_: F) {}
    assert_send::<rdmc::TcpConfig>();
    let key = rdmc::ClusterKey::from_bytes(b"sixteen bytes at least".to_vec()).unwrap();
    let config = rdmc::TcpConfig::new(vec![], rdmc::NodeId(0), key);
    // Never polled.
    check(rdmc::Node::tcp(config, rdmc::NodeConfig::new()));
}

#[cfg(feature = "rdma")]
#[test]
fn the_rdma_start_future_is_send() {
    fn check<F: std::future::Future + Send>(_: F) {}
    assert_send::<rdmc::RdmaConfig>();
    let key = rdmc::ClusterKey::from_bytes(b"sixteen bytes at least".to_vec()).unwrap();
    let config = rdmc::RdmaConfig::new(vec![], rdmc::NodeId(0), key);
    // Never polled.
    check(rdmc::Node::rdma(config, rdmc::NodeConfig::new()));
}
