//! [`Durability::Synced`]: a receiver's stream syncs each message received
//! into a file before it hands it over, and a sync that fails fails the
//! group, naming the receiver, with nothing handed over after it; the
//! root's `Receipt::persisted` follows the receivers' acknowledgements.

use std::path::PathBuf;

use bytes::Bytes;
use futures::StreamExt;

use crate::{
    Durability, Error, FailureKind, GroupConfig, GroupId, MemCluster, Node, NodeConfig, NodeId,
    ReceiveTarget, ReceiveTargets, Receiver, Sender,
};

/// A directory of this test's own, emptied.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rdmc-durability-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn into_files(dir: PathBuf) -> ReceiveTargets {
    ReceiveTargets::new(move |incoming| {
        ReceiveTarget::create_file(dir.join(format!("message-{}", incoming.seq)))
    })
}

fn payload(seq: u64) -> Bytes {
    (0..100_000u32)
        .map(|i| (i as u64).wrapping_mul(31).wrapping_add(seq) as u8)
        .collect()
}

/// A root and two receivers, every receiver `Synced`; receiver 1 puts
/// its messages into files in `dir`, receiver 2 keeps them in memory.
async fn group(dir: &std::path::Path) -> (Vec<Node>, Sender, Receiver, Receiver) {
    let nodes = Node::in_memory_all(&MemCluster::new(3), NodeConfig::new()).unwrap();
    let members = [NodeId(0), NodeId(1), NodeId(2)];
    let synced = GroupConfig::new().with_durability(Durability::Synced);
    let (root, a, b) = tokio::try_join!(
        nodes[0].create_group(GroupId(1), &members, GroupConfig::new()),
        nodes[1].create_group(
            GroupId(1),
            &members,
            synced
                .clone()
                .with_receive_targets(into_files(dir.to_path_buf()))
        ),
        nodes[2].create_group(GroupId(1), &members, synced),
    )
    .unwrap();
    let root = root.into_sender().unwrap();
    (
        nodes,
        root,
        a.into_receiver().unwrap(),
        b.into_receiver().unwrap(),
    )
}

#[tokio::test]
async fn synced_file_messages_are_synced_before_they_are_handed_over() {
    let dir = scratch("synced");
    let (_nodes, mut root, mut files, mut memory) = group(&dir).await;
    let sending = async {
        for seq in 0..3 {
            root.send(payload(seq)).await?.delivered().await?;
        }
        root.close().await
    };
    let into_files = async {
        for seq in 0..3 {
            let message = files.next().await.expect("a message")?;
            assert_eq!(message.seq, seq);
            assert_eq!(message.file.as_ref().map(|f| f.len()), Some(100_000));
            let copy = std::fs::read(dir.join(format!("message-{seq}"))).unwrap();
            assert_eq!(copy, payload(seq));
        }
        assert!(files.next().await.is_none());
        files.close().await
    };
    let in_memory = async {
        for seq in 0..3 {
            let message = memory.next().await.expect("a message")?;
            assert_eq!((message.seq, message.data), (seq, payload(seq)));
        }
        assert!(memory.next().await.is_none());
        memory.close().await
    };
    tokio::try_join!(sending, into_files, in_memory).unwrap();
    assert_eq!(files.syncs, 3, "one sync per message received into a file");
    assert_eq!(memory.syncs, 0, "nothing to sync in memory");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_sync_that_fails_fails_the_group_naming_the_receiver() {
    let dir = scratch("fails");
    let (_nodes, root, mut files, mut memory) = group(&dir).await;
    files.fail_sync = Some(1);
    // The root sends three messages; the first is delivered, the second
    // fails naming receiver 1 (whose copy could not be made durable).
    let sending = async {
        let receipts = [
            root.send(payload(0)).await.unwrap(),
            root.send(payload(1)).await.unwrap(),
        ];
        let _ = root.send(payload(2)).await;
        let [first, second] = receipts;
        (first.delivered().await, second.delivered().await)
    };
    let into_files = async {
        let first = files.next().await.expect("a message").unwrap();
        assert_eq!(first.seq, 0);
        // Message 1 (and 2, arrived meanwhile) never come out: the
        // failure does, then the end.
        let failure = files.next().await.expect("the failure");
        assert!(files.next().await.is_none());
        failure
    };
    // The other receiver hears of it too.
    let in_memory = async {
        let mut heard = None;
        while let Some(item) = memory.next().await {
            if let Err(e) = item {
                heard = Some(e);
            }
        }
        heard
    };
    let ((first, second), failure, heard) = tokio::join!(sending, into_files, in_memory);
    // Receiver 1 says why; the others learn what failed, and where.
    let failure = failure.unwrap_err();
    assert!(
        failure.to_string().contains("cannot sync the file"),
        "{failure}"
    );
    // The first message may have been delivered before the failure, or
    // failed with it; the second is not delivered.
    let mut failures = vec![failure, second.unwrap_err(), heard.expect("told")];
    failures.extend(first.err());
    for error in failures {
        assert!(
            matches!(
                error,
                Error::GroupFailed {
                    suspect: Some(NodeId(1)),
                    kind: FailureKind::ReceiveTarget,
                    ..
                }
            ),
            "not the sync failure: {error:?}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A message `len` bytes long, different for each `seq`.
fn sized(seq: u64, len: usize) -> Bytes {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(131).wrapping_add(seq * 7) as u8)
        .collect()
}

/// Files written past the page cache (`O_DIRECT`, in chunks of lent
/// memory) hold every byte when their message is handed over, in order
/// and numbered as the hook was told, with blocks that are not aligned to
/// pages, several messages in flight and batches of small messages (in
/// memory) between them.
#[tokio::test]
async fn files_hold_every_byte_when_handed_over_with_batches_between() {
    let dir = scratch("direct");
    let nodes = Node::in_memory_all(&MemCluster::new(3), NodeConfig::new()).unwrap();
    let members = [NodeId(0), NodeId(1), NodeId(2)];
    // Blocks of an odd size: chunks and pages are shared between blocks.
    let config = GroupConfig::new().with_block_size(49_129);
    let (root, a, b) = tokio::try_join!(
        nodes[0].create_group(GroupId(1), &members, config.clone()),
        nodes[1].create_group(
            GroupId(1),
            &members,
            config
                .clone()
                .with_receive_targets(into_files(dir.join("a")))
        ),
        nodes[2].create_group(
            GroupId(1),
            &members,
            config.with_receive_targets(into_files(dir.join("b")))
        ),
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("a")).unwrap();
    std::fs::create_dir_all(dir.join("b")).unwrap();
    let mut root = root.into_sender().unwrap();
    // Large, then small ones sent at once (batched), then large again.
    let sizes = [3 << 20, 7, 9, 11, 13, (5 << 20) + 3, 40_000, (2 << 20) + 1];
    let sending = async {
        let mut receipts = Vec::new();
        for (seq, &len) in sizes.iter().enumerate() {
            receipts.push(root.send(sized(seq as u64, len)).await?);
        }
        for receipt in receipts {
            receipt.delivered().await?;
        }
        root.close().await
    };
    let receive = |mut receiver: Receiver, dir: PathBuf| async move {
        let mut seq = 0;
        while let Some(message) = receiver.next().await {
            let message = message?;
            assert_eq!(message.seq, seq, "in order");
            let expected = sized(seq, sizes[seq as usize]);
            match &message.file {
                Some(file) => {
                    assert_eq!(file.len(), expected.len() as u64);
                    let copy = std::fs::read(dir.join(format!("message-{seq}"))).unwrap();
                    assert!(copy == expected, "message {seq}'s file differs");
                }
                None => assert_eq!(message.data, expected, "message {seq}"),
            }
            seq += 1;
        }
        assert_eq!(seq, sizes.len() as u64, "every message");
        receiver.close().await
    };
    tokio::try_join!(
        sending,
        receive(a.into_receiver().unwrap(), dir.join("a")),
        receive(b.into_receiver().unwrap(), dir.join("b")),
    )
    .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `Receipt::persisted`: the `Synced` receiver acknowledges each message
/// it received into a file and synced, the other acknowledges what its
/// application persisted (`Receiver::persisted`, cumulative); a message
/// one of them never acknowledged fails at the close, naming it.
#[tokio::test]
async fn persisted_waits_for_every_receivers_acknowledgement() {
    let dir = scratch("persisted");
    let (_nodes, mut root, mut files, mut memory) = group(&dir).await;
    let mut persisted = Vec::new();
    for seq in 0..3 {
        persisted.push(root.send(payload(seq)).await.unwrap().persisted());
    }
    for seq in 0..3 {
        assert_eq!(files.next().await.expect("a message").unwrap().seq, seq);
        assert_eq!(memory.next().await.expect("a message").unwrap().seq, seq);
    }
    match memory.persisted(3) {
        Err(Error::NotTaken { seq: 3, .. }) => {}
        other => panic!("persisting a message not sent: {other:?}"),
    }
    assert_eq!(files.syncs, 3);
    // Messages 0 and 1: the synced copies and the application's.
    memory.persisted(1).unwrap();
    let mut persisted = persisted.into_iter();
    for seq in 0..2 {
        persisted
            .next()
            .unwrap()
            .await
            .unwrap_or_else(|e| panic!("{seq}: {e}"));
    }
    let last = tokio::spawn(persisted.next().unwrap());
    tokio::task::yield_now().await;
    assert!(!last.is_finished(), "receiver 2 did not persist message 2");
    tokio::try_join!(root.close(), files.close(), memory.close()).unwrap();
    match last.await.unwrap() {
        Err(Error::NotPersisted { group, members }) => {
            assert_eq!((group, members), (GroupId(1), vec![NodeId(2)]));
        }
        other => panic!("message 2 at the close: {other:?}"),
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A message every receiver acknowledged is persisted; one the group
/// fails before is not, with the group's failure.
#[tokio::test]
async fn persisted_fails_with_the_group() {
    let dir = scratch("persisted-failed");
    let (_nodes, root, mut files, mut memory) = group(&dir).await;
    let first = root.send(payload(0)).await.unwrap().persisted();
    let second = root.send(payload(1)).await.unwrap().persisted();
    files.next().await.expect("a message").unwrap();
    memory.next().await.expect("a message").unwrap();
    memory.persisted(0).unwrap();
    first.await.unwrap();
    files.next().await.expect("a message").unwrap();
    // Receiver 2 leaves before it takes message 1.
    drop(memory);
    match second.await {
        Err(Error::GroupFailed {
            suspect: Some(NodeId(2)),
            ..
        }) => {}
        other => panic!("message 1 of a group receiver 2 left: {other:?}"),
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
