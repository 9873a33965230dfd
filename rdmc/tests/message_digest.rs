//! End-to-end message digests
//! ([`GroupConfig::with_message_digest`]): with them on, every algorithm
//! delivers every size byte-exact — the digest crosses block boundaries
//! and is stripped before delivery — and members that disagree on the
//! setting do not form a group.

use bytes::Bytes;
use futures::StreamExt;
use rdmc::{Algorithm, Error, GroupConfig, GroupId, MemCluster, Node, NodeConfig, NodeId};

fn payload(seed: u64, len: usize) -> Bytes {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(2654435761).wrapping_add(seed) as u8)
        .collect::<Vec<u8>>()
        .into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_algorithm_delivers_every_size_byte_exact_with_digests() {
    let nodes = Node::in_memory_all(&MemCluster::new(5), NodeConfig::new()).unwrap();
    let members: Vec<NodeId> = (0..5).map(NodeId).collect();
    // Block size 16: the 32-byte digest spans blocks, or is a block of its own.
    let sizes = [0usize, 1, 15, 16, 17, 31, 32, 33, 47, 48, 100, 1000];
    for (g, algorithm) in [
        Algorithm::Sequential,
        Algorithm::Chain,
        Algorithm::BinomialTree,
        Algorithm::BinomialPipeline,
    ]
    .into_iter()
    .enumerate()
    {
        let config = GroupConfig::new()
            .with_algorithm(algorithm)
            .with_block_size(16)
            .with_message_digest(true);
        let id = GroupId(g as u64);
        let mut groups = futures::future::try_join_all(
            nodes
                .iter()
                .map(|n| n.create_group(id, &members, config.clone())),
        )
        .await
        .unwrap();
        let messages: Vec<Bytes> = sizes
            .iter()
            .enumerate()
            .map(|(i, &len)| payload(i as u64, len))
            .collect();
        let mut root = groups.remove(0).into_sender().unwrap();
        let sending = async {
            for m in &messages {
                root.send(m.clone()).await.unwrap().sent().await.unwrap();
            }
            root.close().await.unwrap();
        };
        let receiving = futures::future::join_all(groups.into_iter().map(|g| {
            let mut g = g.into_receiver().unwrap();
            let messages = &messages;
            async move {
                for (i, m) in messages.iter().enumerate() {
                    let got = g.next().await.unwrap().unwrap();
                    assert!(
                        got.data == m,
                        "{algorithm}: message {i} ({} bytes)",
                        m.len()
                    );
                }
                assert!(g.next().await.is_none());
                g.close().await.unwrap();
            }
        }));
        tokio::join!(sending, receiving);
    }
}

/// The digest counts towards nothing the user sees: a message of exactly
/// the largest size is accepted, one byte more is refused with the
/// configured limit.
#[tokio::test]
async fn the_digest_does_not_eat_into_the_message_limit() {
    let nodes = Node::in_memory_all(&MemCluster::new(2), NodeConfig::new()).unwrap();
    let members = [NodeId(0), NodeId(1)];
    let config = GroupConfig::new()
        .with_block_size(64)
        .with_max_message_size(100)
        .with_message_digest(true);
    let (root, receiver) = tokio::try_join!(
        nodes[0].create_group(GroupId(1), &members, config.clone()),
        nodes[1].create_group(GroupId(1), &members, config),
    )
    .unwrap();
    let (root, mut receiver) = (
        root.into_sender().unwrap(),
        receiver.into_receiver().unwrap(),
    );
    // The limit is the application's bytes (the digest rides on top).
    assert_eq!(
        root.send(vec![1u8; 101]).await.unwrap_err(),
        Error::MessageTooLarge {
            size: 101,
            max: 100
        }
    );
    root.send(vec![2u8; 100])
        .await
        .unwrap()
        .sent()
        .await
        .unwrap();
    assert_eq!(receiver.next().await.unwrap().unwrap().data.len(), 100);
}

/// Members that disagree on digests would misread every message: creating
/// the group fails.
#[tokio::test]
async fn members_disagreeing_on_digests_do_not_form_a_group() {
    let nodes = Node::in_memory_all(&MemCluster::new(2), NodeConfig::new()).unwrap();
    let members = [NodeId(0), NodeId(1)];
    let (a, b) = tokio::join!(
        nodes[0].create_group(
            GroupId(1),
            &members,
            GroupConfig::new().with_message_digest(true)
        ),
        nodes[1].create_group(
            GroupId(1),
            &members,
            GroupConfig::new().with_message_digest(false)
        ),
    );
    assert!(matches!(a, Err(Error::MembershipMismatch { .. })), "{a:?}");
    assert!(matches!(b, Err(Error::MembershipMismatch { .. })), "{b:?}");
}
