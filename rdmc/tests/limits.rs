//! Sizes and time limits bounded before anything is allocated or opened.

use std::time::Duration;

use rdmc::{
    ClusterConfigError, ClusterKey, DEFAULT_MAX_MESSAGE_SIZE, Error, GroupConfig, GroupId,
    MAX_BLOCK_SIZE, MemCluster, Node, NodeConfig, NodeId, TcpConfig,
};

#[test]
fn the_default_message_limit_is_16_gib() {
    assert_eq!(DEFAULT_MAX_MESSAGE_SIZE, 16 << 30);
    assert_eq!(GroupConfig::new().max_message_size(), 16 << 30);
    assert_eq!(MAX_BLOCK_SIZE, 1 << 30);
}

#[tokio::test]
async fn a_block_size_above_the_limit_is_refused_before_it_is_reserved() {
    let nodes = Node::in_memory_all(&MemCluster::new(2), NodeConfig::new()).unwrap();
    let members = [NodeId(0), NodeId(1)];
    // 1 TiB blocks: reserving the bounce buffer would abort the process.
    for block_size in [1usize << 40, MAX_BLOCK_SIZE + 1] {
        let config = GroupConfig::new().with_block_size(block_size);
        let err = nodes[1]
            .create_group(GroupId(block_size as u64), &members, config)
            .await
            .unwrap_err();
        assert_eq!(
            err,
            Error::InvalidConfig("the block size must be at most 1 GiB")
        );
    }
    // The limit itself is accepted (a group of one reserves no bounce buffer).
    let config = GroupConfig::new().with_block_size(MAX_BLOCK_SIZE);
    nodes[0]
        .create_group(GroupId(1), &[NodeId(0)], config)
        .await
        .unwrap();
}

#[tokio::test]
async fn node_tcp_refuses_an_invalid_cluster_before_it_listens() {
    let key = ClusterKey::from_bytes(*b"limits test key, 32 bytes long!!").unwrap();
    // Bound, so that a node that did listen would hold it (and the test
    // would notice nothing): the check must come first.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let cases: Vec<(TcpConfig, ClusterConfigError)> = vec![
        (
            TcpConfig::new(vec![addr, addr], NodeId(0), key.clone()),
            ClusterConfigError::DuplicateAddress {
                addr,
                first: NodeId(0),
                second: NodeId(1),
            },
        ),
        (
            TcpConfig::new(vec![addr], NodeId(0), key.clone()).with_failure_timeout(Duration::ZERO),
            ClusterConfigError::ZeroTimeout {
                what: "failure timeout",
            },
        ),
        (
            TcpConfig::new(vec![addr], NodeId(3), key.clone()),
            ClusterConfigError::NotAMember {
                id: NodeId(3),
                members: 1,
            },
        ),
    ];
    for (config, expected) in cases {
        assert_eq!(config.validate(), Err(expected.clone()));
        let err = Node::tcp(config, NodeConfig::new()).await.unwrap_err();
        assert_eq!(err, Error::ClusterConfig(expected));
        assert!(
            err.to_string()
                .starts_with("invalid cluster configuration: ")
        );
    }
    // An overflowing timeout is an error, not a panic.
    let config = TcpConfig::new(vec![addr], NodeId(0), key)
        .with_connect_timeout(Duration::from_secs_f64(1e19));
    let err = Node::tcp(config, NodeConfig::new()).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::ClusterConfig(ClusterConfigError::TimeoutTooLong {
                what: "connect timeout",
                ..
            })
        ),
        "{err}"
    );
    drop(listener);
}
