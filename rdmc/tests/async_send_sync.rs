//! Compile-time checks that the public handles and futures can cross tasks.

fn assert_send<T: Send>() {}
fn assert_sync<T: Sync>() {}
fn assert_unpin<T: Unpin>() {}

#[test]
fn handles_and_futures_are_send_sync_unpin() {
    assert_send::<rdmc::Node>();
    assert_sync::<rdmc::Node>();
    assert_send::<rdmc::Group>();
    assert_sync::<rdmc::Group>();
    assert_unpin::<rdmc::Group>();
    assert_send::<rdmc::SendFuture>();
    assert_sync::<rdmc::SendFuture>();
    assert_unpin::<rdmc::SendFuture>();
    assert_send::<rdmc::MemCluster>();
    assert_sync::<rdmc::MemCluster>();
    assert_send::<rdmc::Error>();
    assert_sync::<rdmc::Error>();
    assert_send::<rdmc::Message>();
    assert_sync::<rdmc::Message>();
}

#[test]
fn create_group_and_close_futures_are_send() {
    fn check<F: std::future::Future + Send>(_: F) {}
    let cluster = rdmc::MemCluster::new(1);
    // Building the futures needs no runtime; they are never polled.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let node = rdmc::Node::in_memory(&cluster, rdmc::NodeId(0), rdmc::NodeConfig::new()).unwrap();
    check(node.create_group(
        rdmc::GroupId(1),
        &[rdmc::NodeId(0)],
        rdmc::GroupConfig::new(),
    ));
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
