//! The whole-group scenarios where a member fails, expanded by
//! `whole_group_suite!`: a member dropped, crashed or hung mid-transfer
//! (exactly one failure per survivor, naming it; unaffected groups close
//! `Ok`), and a member whose links go silent.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use rdmc::{Error, FailureKind, GroupConfig, GroupId, Node, NodeId, Receipt, Receiver, Sender};
use tokio::time::Instant;

use super::relay::Relay;
use super::{
    Fixture, LONG, Layout, Tuning, assert_failed, bounded, create_all, ids, pair, payload,
    queue_all, read_until_failure, receive_all, roles, run_group, scaled, shutdown,
};

/// The failure timeout of the failure scenarios: 1 s, [`scaled`].
pub fn failure_timeout() -> Duration {
    scaled(Duration::from_secs(1))
}

/// How the member dies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Death {
    /// The node and its group handles are dropped without a close: its node
    /// says goodbye (fails its groups, flushes) and closes its connections.
    Dropped,
    /// The transport's crash ([`Fixture::crash`]), then the runtime the node
    /// runs on is shut down: its tasks vanish, the connections close
    /// without a word.
    Crashed,
    /// The runtime the node runs on stops running anything, its
    /// connections open: only the failure detector can tell.
    Hung,
}

impl Death {
    /// The cause every survivor reports: the victim's own word that it
    /// left when it could say it (its report goes out before its
    /// connections close), else the loss every survivor sees.
    fn cause(self) -> FailureKind {
        match self {
            Death::Dropped => FailureKind::LocalShutdown,
            Death::Crashed | Death::Hung => FailureKind::Unreachable,
        }
    }
}

pub async fn a_member_dropped_mid_transfer_fails_its_groups_once_and_only_its_groups<F: Fixture>() {
    a_member_dies_mid_transfer::<F>(Death::Dropped).await;
}

pub async fn a_member_crashed_mid_transfer_fails_its_groups_once_and_only_its_groups<F: Fixture>() {
    a_member_dies_mid_transfer::<F>(Death::Crashed).await;
}

pub async fn a_member_hung_mid_transfer_is_found_within_the_failure_timeout<F: Fixture>() {
    a_member_dies_mid_transfer::<F>(Death::Hung).await;
}

/// Node 2 of 4 dies in the middle of group 1 (all four nodes; node 2 holds
/// it back by not reading). Group 3 (nodes 3 and 2, idle) fails too; group
/// 2 (nodes 1, 3, 0) carries on.
async fn a_member_dies_mid_transfer<F: Fixture>(death: Death) {
    let mut layout = Layout::new(4);
    let tuning = Tuning {
        failure_timeout: Some(failure_timeout()),
        ..Tuning::default()
    };
    let nodes = FourNodes::start::<F>(&mut layout, tuning).await;
    let FourGroups {
        mut x_root,
        x1,
        mut x2,
        x3,
        mut y_root,
        y3,
        y0,
        mut z3,
        z2,
    } = FourGroups::create(&nodes).await;
    let x = GroupId(1);

    let x_messages: Vec<Bytes> = (0..40)
        .map(|i| payload(i, (1 << 20) + i as usize))
        .collect();
    let y_messages: Vec<Bytes> = (0..10).map(|i| payload(100 + i, 100_000)).collect();

    // Group 1: the root queues everything; node 2 reads two messages and
    // then nothing, so the transfer is in full swing, and stuck, when it dies.
    let x_sends = queue_all(&x_root, &x_messages).await;
    let survivors = [x1, x3].map(|g| tokio::spawn(read_until_failure(g, x_messages.clone(), 0)));
    let z_survivor = tokio::spawn(async move {
        let error = z3.closed().await.unwrap_err();
        let failed_at = Instant::now();
        assert_eq!(z3.close().await.unwrap_err(), error, "group 3 root: close");
        (error, failed_at)
    });
    for expected in &x_messages[..2] {
        let m = bounded(LONG, "node 2's first messages", x2.next())
            .await
            .unwrap()
            .unwrap();
        assert!(m.data == expected);
    }
    // Group 2 is under way too.
    drop(queue_all(&y_root, &y_messages[..5]).await);
    let y_receivers = [y3, y0].map(|mut g| {
        let expected = y_messages.clone();
        tokio::spawn(async move {
            receive_all(&mut g, &expected).await;
            g.close().await.unwrap();
            assert!(g.next().await.is_none());
        })
    });

    let killed = Instant::now();
    let FourNodes {
        mut victim_rt,
        n0,
        n1,
        victim,
        n3,
    } = nodes;
    let hung = kill::<F>(death, &layout, &mut victim_rt, (x2, z2, victim)).await;

    // Every survivor of groups 1 and 3 learns of it once: a dropped or
    // crashed member's connections break, a hung one's silence is found by
    // the failure detector. How soon (the failure timeout and a margin) is
    // checked in virtual time by the whole-node simulator, where the
    // machine's load cannot stretch it; here the wait is only bounded, and
    // the time printed.
    let assert_prompt = |took: Duration, who: &str| {
        eprintln!("{who} learned of the {death:?} member after {took:?}");
        if death == Death::Hung {
            // Not before the member has been silent for a good part of the
            // timeout (load only makes it later).
            assert!(took >= failure_timeout() / 2, "{who}: {took:?}");
        }
    };
    let (root_outcome, outcomes, z_outcome) = bounded(LONG, "the failure reports", async {
        tokio::join!(
            root_failure(x_sends, &mut x_root),
            futures::future::join_all(survivors),
            z_survivor
        )
    })
    .await;
    let (sent, root_error, root_failed_at) = root_outcome;
    let cause = death.cause();
    assert_failed(&root_error, x, 2, cause, "group 1 root");
    assert_prompt(root_failed_at - killed, "group 1 root");
    assert!(
        sent < x_messages.len(),
        "the transfer was over before the death"
    );
    for (who, outcome) in ["group 1 node 1", "group 1 node 3"]
        .into_iter()
        .zip(outcomes)
    {
        let s = outcome.unwrap();
        assert_failed(&s.error, x, 2, cause, who);
        assert_prompt(s.failed_at - killed, who);
        assert!(s.delivered < x_messages.len(), "{who}");
    }
    let (z_error, z_failed_at) = z_outcome.unwrap();
    assert_failed(&z_error, GroupId(3), 2, cause, "group 3 node 3");
    assert_prompt(z_failed_at - killed, "group 3 node 3");

    // Group 2 never had node 2: it finishes its messages and closes Ok.
    drop(queue_all(&y_root, &y_messages[5..]).await);
    bounded(LONG, "group 2 after the death", async {
        y_root.close().await.unwrap();
        for r in y_receivers {
            r.await.unwrap();
        }
    })
    .await;
    drop((x_root, y_root));
    shutdown(vec![n0, n1, n3]).await;
    drop(hung);
    if let Some(rt) = victim_rt {
        rt.shutdown_background();
    }
}

/// The four nodes of [`a_member_dies_mid_transfer`]; the victim, node 2,
/// runs on a runtime of its own, so that it can crash or hang.
struct FourNodes {
    victim_rt: Option<tokio::runtime::Runtime>,
    n0: Node,
    n1: Node,
    victim: Node,
    n3: Node,
}

impl FourNodes {
    /// Start the four members of `layout` on transport `F`, connected.
    async fn start<F: Fixture>(layout: &mut Layout, tuning: Tuning) -> Self {
        let victim_rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let victim = victim_rt.spawn(layout.start::<F>(NodeId(2), tuning));
        let others =
            futures::future::try_join_all([0, 1, 3].map(|i| layout.start::<F>(NodeId(i), tuning)));
        let (victim, others) =
            bounded(LONG, "connecting", async { tokio::join!(victim, others) }).await;
        let victim = victim.unwrap().unwrap();
        let mut others = others.unwrap().into_iter();
        let (n0, n1, n3) = (
            others.next().unwrap(),
            others.next().unwrap(),
            others.next().unwrap(),
        );
        FourNodes {
            victim_rt: Some(victim_rt),
            n0,
            n1,
            victim,
            n3,
        }
    }

    /// Node `i`.
    fn node(&self, i: u32) -> &Node {
        match i {
            0 => &self.n0,
            1 => &self.n1,
            2 => &self.victim,
            _ => &self.n3,
        }
    }
}

/// The groups of [`a_member_dies_mid_transfer`], each member's handle
/// named by its group and node: group 1 (x) of all four, root 0, held back
/// by node 2's small receive window; group 2 (y) of nodes 1, 3 and 0;
/// group 3 (z) of nodes 3 and 2, whose root learns of the failure from
/// `closed`.
struct FourGroups {
    x_root: Sender,
    x1: Receiver,
    x2: Receiver,
    x3: Receiver,
    y_root: Sender,
    y3: Receiver,
    y0: Receiver,
    z3: Sender,
    z2: Receiver,
}

impl FourGroups {
    async fn create(nodes: &FourNodes) -> Self {
        let x = GroupId(1);
        let x_members = ids(&[0, 1, 2, 3]);
        let x_config = GroupConfig::new().with_block_size(64 * 1024);
        let y = GroupId(2);
        let y_members = ids(&[1, 3, 0]);
        let z = GroupId(3);
        let z_members = ids(&[3, 2]);
        let (xs, ys, zs) = bounded(LONG, "creating the groups", async {
            tokio::join!(
                futures::future::try_join_all(x_members.iter().map(|&m| {
                    // The victim's small receive window holds the group back.
                    let config = if m == NodeId(2) {
                        x_config.clone().with_receive_window(Some(3))
                    } else {
                        x_config.clone()
                    };
                    nodes.node(m.0).create_group(x, &x_members, config)
                })),
                futures::future::try_join_all(y_members.iter().map(|&m| {
                    nodes
                        .node(m.0)
                        .create_group(y, &y_members, GroupConfig::new())
                })),
                futures::future::try_join_all(z_members.iter().map(|&m| {
                    nodes
                        .node(m.0)
                        .create_group(z, &z_members, GroupConfig::new())
                })),
            )
        })
        .await;
        let (x_root, xs) = roles(xs.unwrap());
        let [x1, x2, x3] = <[Receiver; 3]>::try_from(xs).unwrap();
        let (y_root, ys) = roles(ys.unwrap());
        let [y3, y0] = <[Receiver; 2]>::try_from(ys).unwrap();
        let (z3, z2) = pair(zs.unwrap());
        FourGroups {
            x_root,
            x1,
            x2,
            x3,
            y_root,
            y3,
            y0,
            z3,
            z2,
        }
    }
}

/// The victim's handles: its receivers of groups 1 and 3, and its node.
type VictimHandles = (Receiver, Receiver, Node);

/// Kill the victim as `death` says. A hung victim keeps its handles (and
/// its runtime's thread, until the returned sender is dropped).
async fn kill<F: Fixture>(
    death: Death,
    layout: &Layout,
    victim_rt: &mut Option<tokio::runtime::Runtime>,
    victim: VictimHandles,
) -> Option<(std::sync::mpsc::Sender<()>, VictimHandles)> {
    match death {
        Death::Dropped => {
            let (x2, z2, node) = victim;
            drop((x2, z2));
            drop(node);
            None
        }
        Death::Crashed => {
            F::crash(layout, NodeId(2));
            // Every task of the node is gone before its handles are: a
            // handle dropped while its node still ran would say goodbye
            // (leave its group), which a crash does not.
            let runtime = victim_rt.take().unwrap();
            let down = tokio::task::spawn_blocking(move || runtime.shutdown_timeout(LONG));
            down.await.unwrap();
            drop(victim);
            None
        }
        Death::Hung => {
            let (thaw, frozen) = std::sync::mpsc::channel::<()>();
            // The runtime's only worker blocks here: nothing of the node
            // runs, its timers and sockets are not served.
            victim_rt.as_ref().unwrap().spawn(async move {
                let _ = frozen.recv();
            });
            Some((thaw, victim))
        }
    }
}

/// Group 1's root after the death: how many of `sends` went out before
/// every later one failed alike, the failure (which `closed` and `close`
/// report too), and when it was seen.
async fn root_failure(sends: Vec<Receipt>, root: &mut Sender) -> (usize, Error, Instant) {
    let mut ok = 0;
    let mut error = None;
    for s in sends {
        match s.sent().await {
            Ok(_) if error.is_none() => ok += 1,
            Ok(_) => panic!("a send completed after an earlier one failed"),
            Err(e) => {
                if let Some(first) = &error {
                    assert_eq!(&e, first, "every pending send fails alike");
                } else {
                    error = Some(e);
                }
            }
        }
    }
    let failed_at = Instant::now();
    let error = error.expect("not every message can have been sent");
    assert_eq!(root.closed().await.unwrap_err(), error, "root: closed");
    assert_eq!(root.close().await.unwrap_err(), error, "root: close");
    (ok, error, failed_at)
}

/// Nodes 1 and 2 reach node 0 through a relay, which then stops forwarding
/// without closing anything: node 0 goes silent, as a hung host or a dead
/// network path would, and node 0 finds its peers silent.
pub async fn a_member_gone_silent_is_detected_within_the_failure_timeout<F: Fixture>() {
    assert!(
        F::RELAYABLE && F::HEARTBEATS,
        "{}: a silent link needs a relay in front of a member and heartbeats",
        F::NAME
    );
    let mut layout = Layout::new(3);
    let relay = Relay::start(layout.addrs[0], None).await;
    layout.addrs[0] = relay.addr;
    let nodes = layout
        .start_all::<F>(Tuning {
            failure_timeout: Some(failure_timeout()),
            ..Tuning::default()
        })
        .await;

    let x = GroupId(1);
    let x_members = ids(&[0, 1, 2]);
    let config = GroupConfig::new().with_block_size(64 * 1024);
    let mut xs = bounded(LONG, "creating group 1", async {
        futures::future::try_join_all(x_members.iter().map(|m| {
            // Node 2's small receive window holds the group back.
            let config = if *m == NodeId(2) {
                config.clone().with_receive_window(Some(3))
            } else {
                config.clone()
            };
            nodes[m.index()].create_group(x, &x_members, config)
        }))
        .await
    })
    .await
    .unwrap()
    .into_iter();
    let mut x_root = xs.next().unwrap().into_sender().unwrap();
    let (x1, mut x2) = (
        xs.next().unwrap().into_receiver().unwrap(),
        xs.next().unwrap().into_receiver().unwrap(),
    );
    let ys = create_all(&nodes, GroupId(2), &ids(&[1, 2]), GroupConfig::new()).await;

    let messages: Vec<Bytes> = (0..40)
        .map(|i| payload(i, (1 << 20) + 3 * i as usize))
        .collect();
    let sends = queue_all(&x_root, &messages).await;
    let reader_1 = tokio::spawn(read_until_failure(x1, messages.clone(), 0));
    for (i, m) in messages.iter().enumerate().take(2) {
        let got = bounded(LONG, "node 2's first messages", x2.next())
            .await
            .unwrap()
            .unwrap();
        assert!(got.data == m, "message {i}");
    }
    relay.freeze.cancel();
    let frozen = Instant::now();
    let reader_2 = tokio::spawn(read_until_failure(x2, messages.clone(), 2));

    let root = async {
        let mut error = None;
        for s in sends {
            if let Err(e) = s.sent().await {
                error.get_or_insert(e);
            }
        }
        let error = error.expect("the transfer cannot have finished");
        assert_eq!(x_root.closed().await.unwrap_err(), error);
        assert_eq!(x_root.close().await.unwrap_err(), error);
        (error, Instant::now())
    };
    let ((root_error, root_at), r1, r2) = bounded(LONG, "detecting the silence", async {
        tokio::join!(root, reader_1, reader_2)
    })
    .await;
    for (who, s) in [("node 1", r1.unwrap()), ("node 2", r2.unwrap())] {
        assert_failed(&s.error, x, 0, FailureKind::Unreachable, who);
        let took = s.failed_at - frozen;
        // Found by the failure detector: not before the peer has been
        // silent for a good part of the timeout (how soon after it is
        // checked in virtual time by the whole-node simulator).
        eprintln!("{who} found the silence after {took:?}");
        assert!(took >= failure_timeout() / 2, "{who} took {took:?}");
        assert!(s.delivered < messages.len(), "{who}");
    }
    // Node 0 finds both its peers silent; it names one of them.
    match &root_error {
        Error::GroupFailed {
            group,
            suspect: Some(s),
            ..
        } if *group == x && (s.0 == 1 || s.0 == 2) => {}
        other => panic!("node 0: {other:?}"),
    }
    eprintln!("node 0 found the silence after {:?}", root_at - frozen);

    // Group 2 does not involve node 0.
    run_group(ys, &messages[..3]).await;
    drop(x_root);
    shutdown(nodes).await;
}
