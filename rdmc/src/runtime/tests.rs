//! The actor over the in-memory transport, driven through its commands.

use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::sync::{mpsc, oneshot};

use super::actor::{Actor, Command, TableSizes};
use crate::config::GroupConfig;
use crate::group::Group;
use crate::ids::{GroupId, NodeId};
use crate::proto::Rendezvous;
use crate::transport::mem::MemCluster;
use crate::transport::pool::DEFAULT_BUDGET;
use crate::wait::CompletionMode;

/// A node's actor on `cluster`, and the sender of its commands.
fn start(cluster: &MemCluster, id: NodeId) -> mpsc::UnboundedSender<Command> {
    let (transport, completions) = cluster.attach(id, DEFAULT_BUDGET).unwrap();
    let (commands, inbox) = mpsc::unbounded_channel();
    let nodes = cluster.len();
    let actor = Actor::new(
        id,
        nodes,
        transport,
        inbox,
        completions,
        CompletionMode::Interrupt,
    );
    tokio::spawn(actor.run());
    commands
}

async fn create(
    commands: &mpsc::UnboundedSender<Command>,
    me: NodeId,
    id: GroupId,
    members: &[NodeId],
) -> Group {
    let (reply, response) = oneshot::channel();
    commands
        .send(Command::CreateGroup {
            id,
            members: members.to_vec(),
            config: GroupConfig::new().with_block_size(64),
            reply,
        })
        .unwrap();
    let deliveries = response.await.unwrap().unwrap();
    Group::new(id, me, members.to_vec(), commands.clone(), deliveries)
}

async fn sizes(commands: &mpsc::UnboundedSender<Command>) -> TableSizes {
    let (reply, response) = oneshot::channel();
    commands.send(Command::TableSizes { reply }).unwrap();
    response.await.unwrap()
}

/// A node that runs 100,000 groups one after another (each created,
/// used for one message, closed and dropped) holds no more than a bounded
/// number of entries in its tables: the actor forgets every ended group,
/// the rendezvous keeps only the most recent used ids.
#[tokio::test(flavor = "current_thread")]
async fn tables_stay_bounded_over_a_hundred_thousand_groups() {
    const GROUPS: u64 = 100_000;
    let cluster = MemCluster::new(2);
    let nodes = [start(&cluster, NodeId(0)), start(&cluster, NodeId(1))];
    let members = [NodeId(0), NodeId(1)];
    let bound = Rendezvous::<Instant>::KEPT + 16;
    let started = Instant::now();
    let mut peak = [0usize; 2];
    for i in 0..GROUPS {
        let id = GroupId(i);
        let (root, receiver) = tokio::join!(
            create(&nodes[0], NodeId(0), id, &members),
            create(&nodes[1], NodeId(1), id, &members),
        );
        let mut root = root.into_sender().unwrap();
        let mut receiver = receiver.into_receiver().unwrap();
        let _queued = root.send(vec![i as u8; 100]).await.unwrap();
        let receiving = async {
            let m = receiver.next().await.unwrap().unwrap();
            assert_eq!(m.data.len(), 100);
            assert!(
                receiver.next().await.is_none(),
                "the stream ends after the last"
            );
            receiver.close().await
        };
        let (a, b) = tokio::join!(root.close(), receiving);
        a.unwrap();
        b.unwrap();
        drop((root, receiver));
        if i % 10_000 == 9_999 || i + 1 == GROUPS {
            for (n, node) in nodes.iter().enumerate() {
                let s = sizes(node).await;
                // The group just dropped may still be on its way out.
                assert!(s.groups <= 1 && s.timers <= 1, "node {n} after {i}: {s:?}");
                assert!(s.rendezvous <= 2 * bound, "node {n} after {i}: {s:?}");
                peak[n] = peak[n].max(s.rendezvous);
            }
        }
    }
    // The most recent ids stay used; the oldest are forgotten.
    let (reply, response) = oneshot::channel();
    nodes[0]
        .send(Command::CreateGroup {
            id: GroupId(GROUPS - 1),
            members: members.to_vec(),
            config: GroupConfig::new(),
            reply,
        })
        .unwrap();
    assert_eq!(
        response.await.unwrap().unwrap_err(),
        crate::Error::GroupIdInUse(GroupId(GROUPS - 1))
    );
    let (old0, old1) = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::join!(
            create(&nodes[0], NodeId(0), GroupId(0), &members),
            create(&nodes[1], NodeId(1), GroupId(0), &members),
        )
    })
    .await
    .expect("an id forgotten long ago is accepted again");
    drop((old0, old1));
    eprintln!(
        "{GROUPS} groups in {:?}; peak rendezvous entries {peak:?}",
        started.elapsed()
    );
}
