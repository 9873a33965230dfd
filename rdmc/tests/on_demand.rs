//! A `tcp` cluster connected on demand ([`Connections::OnDemand`]): a node
//! starts without waiting for the others, connects only to the members its
//! groups exchange blocks with and to its relay-tree neighbours, and the
//! rest of each group's signals travel hop by hop. Groups form, carry
//! every byte and close as over a full mesh; a member that never starts
//! fails the group naming it; a member that goes away mid-transfer fails
//! the group at every other member, those it was not connected to
//! included, naming it.

mod common;

use std::time::Duration;

use bytes::Bytes;
use rdmc::schedule::Algorithm;
use rdmc::{Connections, Error, Group, GroupConfig, GroupId, Node, NodeId, TcpConfig};

use common::{
    LONG, Layout, TcpOnDemandFixture, Tuning, all_sent, bounded, create_all, key, node_config,
    payload, queue_all, receive_all, run_group, shutdown,
};

/// `n` nodes on loopback connected on demand; node ids `absent` are
/// left out (listed, never started).
async fn cluster(n: usize, absent: &[u32]) -> Vec<Option<Node>> {
    let mut layout = Layout::new(n);
    let tuning = Tuning {
        connect_timeout: Some(Duration::from_secs(5)),
        ..Tuning::default()
    };
    let starts = (0..n as u32).map(|id| {
        let start = layout.start::<TcpOnDemandFixture>(NodeId(id), tuning);
        let absent = absent.contains(&id);
        async move {
            if absent {
                return Ok(None);
            }
            start.await.map(Some)
        }
    });
    let starts: Vec<_> = starts.collect();
    bounded(LONG, "starting", futures::future::try_join_all(starts))
        .await
        .expect("every node listens")
}

fn started(nodes: Vec<Option<Node>>) -> Vec<Node> {
    nodes.into_iter().map(|n| n.expect("started")).collect()
}

/// How many peers each node is connected to now.
async fn connected(nodes: &[Node]) -> Vec<usize> {
    let mut counts = Vec::new();
    for node in nodes {
        let peers = node.peers().await.expect("the node runs");
        counts.push(peers.iter().filter(|p| p.up).count());
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_nodes_connect_only_where_their_groups_need_and_every_byte_arrives() {
    let nodes = started(cluster(16, &[]).await);
    assert_eq!(
        connected(&nodes).await,
        vec![0; 16],
        "nothing connected at start"
    );

    // The binomial pipeline over 16: each member's partners are its 4
    // hypercube neighbours, and so are its relay-tree neighbours.
    let all: Vec<NodeId> = (0..16).map(NodeId).collect();
    let config = GroupConfig::new()
        .with_algorithm(Algorithm::BinomialPipeline)
        .with_block_size(64 * 1024);
    let messages: Vec<Bytes> = (0..3)
        .map(|i| payload(i, (1 << 20) + 17 * i as usize))
        .collect();
    let groups = create_all(&nodes, GroupId(1), &all, config.clone()).await;
    run_group(groups, &messages).await;
    let counts = connected(&nodes).await;
    assert!(
        counts.iter().all(|&c| c == 4),
        "connections per node: {counts:?}"
    );

    // A second group in another order, rooted elsewhere, with a chain:
    // its own partners are connected too, and signals between members
    // that share no connection are relayed.
    let shuffled: Vec<NodeId> = [5, 12, 0, 9, 3, 14, 7, 1, 10, 6].map(NodeId).to_vec();
    let chain = config.with_algorithm(Algorithm::Chain);
    let groups = create_all(&nodes, GroupId(2), &shuffled, chain).await;
    run_group(groups, &messages[..2]).await;
    let counts = connected(&nodes).await;
    // At most the first group's 4, plus a chain's 2 and ⌈log₂ 10⌉ + 1
    // tree neighbours for the second.
    assert!(
        counts.iter().all(|&c| c <= 4 + 2 + 5),
        "connections per node: {counts:?}"
    );
    assert!(
        counts.iter().any(|&c| c > 4),
        "the second group connected more: {counts:?}"
    );
    shutdown(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_never_starts_fails_the_group_naming_it() {
    let mut nodes = cluster(4, &[3]).await;
    nodes.pop();
    let nodes = started(nodes);
    let members: Vec<NodeId> = (0..4).map(NodeId).collect();
    let config = GroupConfig::new().with_create_timeout(Duration::from_secs(3));
    let creates = (0..3).map(|i| nodes[i].create_group(GroupId(7), &members, config.clone()));
    let created = bounded(LONG, "creating", futures::future::join_all(creates)).await;
    for (i, result) in created.into_iter().enumerate() {
        let error = result
            .err()
            .unwrap_or_else(|| panic!("node {i}: created without node 3"));
        assert!(
            error.to_string().contains('3'),
            "node {i}: the failure names node 3: {error}"
        );
    }
    shutdown(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_gone_mid_transfer_fails_the_group_everywhere_naming_it() {
    let mut nodes = started(cluster(8, &[]).await);
    let members: Vec<NodeId> = (0..8).map(NodeId).collect();
    let config = GroupConfig::new().with_block_size(16 * 1024);
    let groups = create_all(&nodes, GroupId(3), &members, config).await;
    let first = payload(1, 256 * 1024);
    let mut groups = groups.into_iter();
    let Some(Group::Root(root)) = groups.next() else {
        panic!("node 0 is the root")
    };
    let mut receivers: Vec<_> = groups.map(|g| g.into_receiver().unwrap()).collect();
    let first = [first];
    all_sent(GroupId(3), queue_all(&root, &first).await).await;
    for r in &mut receivers {
        bounded(LONG, "the first message", receive_all(r, &first)).await;
    }
    // Node 5 goes away: connected to 4 and 1 (and 7) only, yet every
    // member hears of it.
    let gone = nodes.remove(5);
    let gone_receiver = receivers.remove(4);
    drop(gone_receiver);
    gone.shutdown().await;
    let _ = root.send(payload(2, 256 * 1024)).await;
    let mut errors = Vec::new();
    for mut r in receivers {
        let rank = r.rank();
        let error = bounded(LONG, "the failure", async move {
            loop {
                match futures::StreamExt::next(&mut r).await {
                    Some(Ok(_)) => {}
                    Some(Err(e)) => break e,
                    None => panic!("rank {rank}: ended without a failure"),
                }
            }
        })
        .await;
        errors.push((rank, error));
    }
    for (rank, error) in errors {
        match error {
            Error::GroupFailed { suspect, .. } => {
                assert_eq!(suspect, Some(NodeId(5)), "rank {rank}");
            }
            other => panic!("rank {rank}: {other}"),
        }
    }
    shutdown(nodes).await;
}

/// Two nodes that cannot connect: each one's group fails naming the
/// other, and says why.
async fn two_that_cannot_connect(
    zero: TcpConfig,
    one: TcpConfig,
) -> (Result<Group, Error>, Result<Group, Error>) {
    let config = GroupConfig::new().with_create_timeout(Duration::from_secs(3));
    let start = |c: TcpConfig| Node::tcp(c.with_connections(Connections::OnDemand), node_config());
    let (a, b) = tokio::try_join!(start(zero), start(one)).expect("both listen");
    let members = [NodeId(0), NodeId(1)];
    let created = bounded(LONG, "creating", async {
        tokio::join!(
            a.create_group(GroupId(1), &members, config.clone()),
            b.create_group(GroupId(1), &members, config.clone())
        )
    })
    .await;
    shutdown(vec![a, b]).await;
    created
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_that_cannot_connect_say_why() {
    // Node 1 holds `key_one`.
    let pair = |key_one: rdmc::ClusterKey| {
        let listeners = [common::loopback(), common::loopback()];
        let members: Vec<_> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
        let [l0, l1] = listeners;
        let config = |id: u32, l, key| {
            TcpConfig::new(members.clone(), NodeId(id), key)
                .with_listener(l)
                .with_connect_timeout(Duration::from_secs(2))
        };
        (config(0, l0, key()), config(1, l1, key_one))
    };
    // Another wire security.
    let (zero, one) = pair(key());
    let zero = zero.with_wire_security(rdmc::WireSecurity::None);
    let (a, b) = two_that_cannot_connect(zero, one).await;
    for (who, other, result) in [(0, 1, a), (1, 0, b)] {
        let error = result
            .err()
            .unwrap_or_else(|| panic!("node {who} created the group"));
        let text = error.to_string();
        assert!(
            text.contains(&format!("node {other}")) && text.contains("wire security mismatch"),
            "node {who}: {text}"
        );
    }
    // Another key: node 0, which node 1 dials, knows node 1 did not prove
    // it holds the key.
    let other_key =
        rdmc::ClusterKey::from_bytes(b"another cluster key, 32 bytes!!!".to_vec()).unwrap();
    let (zero, one) = pair(other_key);
    let (a, b) = two_that_cannot_connect(zero, one).await;
    let text = a.expect_err("node 0 created the group").to_string();
    assert!(
        text.contains("node 1") && text.contains("prove it holds the cluster key"),
        "node 0: {text}"
    );
    let text = b.expect_err("node 1 created the group").to_string();
    assert!(text.contains("node 0"), "node 1: {text}");
}
