//! The actor's handling of failures, driven through a scripted transport
//! whose completions the test injects: which member a failure is blamed
//! on when the transport's report of a peer gone and a member's report of
//! the failure that made it go arrive in either order, what a member that
//! was declared failed says when it hears of it, and a message whose
//! memory cannot be had. Tokio's clock is paused: time passes only when
//! every task waits, so the grace period is exact.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};

use super::actor::{Actor, Command, FAILURE_GRACE, config_digest};
use crate::config::GroupConfig;
use crate::error::Error;
use crate::group::{Group, Receiver, Sender};
use crate::ids::{GroupId, NodeId};
use crate::proto::Control;
use crate::proto::FailureKind;
use crate::schedule::Algorithm;
use crate::transport::{
    AllocError, BlockRef, Completion, CompletionSender, MessageBuffer, RecvRegion, Signal,
    Transport,
};
use crate::wait::CompletionMode;

pub(super) const GROUP: GroupId = GroupId(7);

/// Signals the node sent, in order.
type Sent = Arc<Mutex<Vec<(NodeId, Signal)>>>;

/// Receives the node posted, in order.
type Posted = Arc<Mutex<Vec<RecvRegion>>>;

/// Blocks the node sent, in order: (to, immediate, bytes).
type Blocks = Arc<Mutex<Vec<(NodeId, u64, Vec<u8>)>>>;

/// A transport that carries nothing: it records the signals and blocks it
/// is given and the receives posted, and refuses buffers larger than
/// `max_alloc`.
struct Scripted {
    sent: Sent,
    posted: Posted,
    blocks: Blocks,
    max_alloc: usize,
    /// Whether it connects peers on demand (tries a peer that went again).
    on_demand: bool,
}

impl Transport for Scripted {
    fn describe(&self) -> String {
        "scripted".to_owned()
    }

    fn post_recv(&mut self, _: GroupId, _: NodeId, region: RecvRegion) {
        self.posted.lock().unwrap().push(region);
    }
    fn post_send(&mut self, _: GroupId, to: NodeId, block: BlockRef, immediate: u64) {
        let bytes = block.as_slice().to_vec();
        self.blocks.lock().unwrap().push((to, immediate, bytes));
    }
    fn send_signal(&mut self, _: GroupId, to: NodeId, signal: Signal) {
        self.sent.lock().unwrap().push((to, signal));
    }
    fn release_group(&mut self, _: GroupId) {}
    fn reconnects_on_demand(&self) -> bool {
        self.on_demand
    }
    fn alloc_buffer(&mut self, len: usize) -> Result<Arc<MessageBuffer>, AllocError> {
        if len > self.max_alloc {
            return Err(AllocError { len });
        }
        MessageBuffer::try_new(len)
    }
    fn flush(&mut self) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

/// Node 1 of the group {0, 1, 2} (sequential: the root sends every block
/// to every member), created: its group handle, the completions the test
/// injects, and the signals it sends.
pub(super) struct Member {
    pub(super) group: Group,
    pub(super) inject: CompletionSender,
    pub(super) sent: Sent,
    pub(super) posted: Posted,
    pub(super) blocks: Blocks,
    commands: mpsc::UnboundedSender<Command>,
}

pub(super) fn config() -> GroupConfig {
    GroupConfig::new()
        .with_algorithm(Algorithm::Sequential)
        .with_block_size(1024)
}

async fn member(max_alloc: usize) -> Member {
    member_with(max_alloc, config()).await
}

async fn member_with(max_alloc: usize, config: GroupConfig) -> Member {
    node_with(1, max_alloc, config).await
}

/// Node `me` of the group {0, 1, 2}, as [`member_with`].
pub(super) async fn node_with(me: u32, max_alloc: usize, config: GroupConfig) -> Member {
    node_on(me, (max_alloc, false), config).await
}

/// As [`node_with`], over a transport that connects on demand or not.
async fn node_on(me: u32, (max_alloc, on_demand): (usize, bool), config: GroupConfig) -> Member {
    let me = NodeId(me);
    let members = vec![NodeId(0), NodeId(1), NodeId(2)];
    let sent = Sent::default();
    let posted = Posted::default();
    let blocks = Blocks::default();
    let transport = Scripted {
        sent: Arc::clone(&sent),
        posted: Arc::clone(&posted),
        blocks: Arc::clone(&blocks),
        max_alloc,
        on_demand,
    };
    let (inject, completions) = mpsc::unbounded_channel();
    let (commands, inbox) = mpsc::unbounded_channel();
    let actor = Actor::new(
        me,
        3,
        transport,
        inbox,
        completions,
        CompletionMode::Interrupt,
    );
    tokio::spawn(actor.run());
    let (reply, response) = oneshot::channel();
    commands
        .send(Command::CreateGroup {
            id: GROUP,
            members: members.clone(),
            config: config.clone(),
            reply,
        })
        .unwrap();
    let digest = config_digest(GROUP, &members, &config);
    for from in members.iter().copied().filter(|&n| n != me) {
        inject
            .send(Completion::Signal {
                group: GROUP,
                from,
                signal: Signal::Join { digest },
            })
            .unwrap();
    }
    let deliveries = response.await.unwrap().unwrap();
    Member {
        group: Group::new(GROUP, me, members, commands.clone(), deliveries),
        inject,
        sent,
        posted,
        blocks,
        commands,
    }
}

impl Member {
    /// The root's handle (node 0's).
    pub(super) fn root(&self) -> &Sender {
        match &self.group {
            Group::Root(sender) => sender,
            Group::Receiver(_) => panic!("this member is not the root"),
        }
    }

    /// A receiver's handle (any other node's).
    pub(super) fn receiver(&mut self) -> &mut Receiver {
        match &mut self.group {
            Group::Receiver(receiver) => receiver,
            Group::Root(_) => panic!("this member is the root"),
        }
    }

    fn peer_down(&self, node: u32) {
        let node = NodeId(node);
        self.inject
            .send(Completion::peer_down(node, 0, "lost in a test"))
            .unwrap();
    }

    /// Node `from` reports that it found `kind`, naming `suspect`.
    fn failure_report(&self, from: u32, suspect: usize, kind: FailureKind) {
        self.inject
            .send(Completion::Signal {
                group: GROUP,
                from: NodeId(from),
                signal: Signal::Group(Control::Failed {
                    suspect: Some(suspect),
                    kind,
                    detector: from as usize,
                }),
            })
            .unwrap();
    }

    /// The group's failure, as its message stream reports it.
    pub(super) async fn failure(&mut self) -> Error {
        match self.receiver().next().await {
            Some(Err(e)) => e,
            other => panic!("expected the group's failure, got {other:?}"),
        }
    }

    /// The failure reports this node sent, as (to, report), sorted.
    fn reports_sent(&self) -> Vec<(u32, Control)> {
        let mut sent: Vec<_> = self
            .sent
            .lock()
            .unwrap()
            .iter()
            .filter_map(|(to, s)| match s {
                Signal::Group(report @ Control::Failed { .. }) => Some((to.0, *report)),
                _ => None,
            })
            .collect();
        sent.sort_by_key(|(to, _)| *to);
        sent
    }
}

/// The failure of node `suspect` this node found as `kind`.
pub(super) fn failed(suspect: u32, kind: FailureKind) -> Error {
    Error::GroupFailed {
        group: GROUP,
        suspect: Some(NodeId(suspect)),
        kind,
        reported_by: None,
        detail: None,
    }
}

/// Node `suspect` lost by the transport ("lost in a test"), as this node
/// found it: unreachable, with the transport's reason.
pub(super) fn lost(suspect: u32) -> Error {
    Error::GroupFailed {
        group: GROUP,
        suspect: Some(NodeId(suspect)),
        kind: FailureKind::Unreachable,
        reported_by: None,
        detail: Some("lost in a test".to_owned()),
    }
}

/// The failure of node `suspect` node `by` found as `kind` and reported.
fn reported(suspect: u32, kind: FailureKind, by: u32) -> Error {
    Error::GroupFailed {
        group: GROUP,
        suspect: Some(NodeId(suspect)),
        kind,
        reported_by: Some(NodeId(by)),
        detail: None,
    }
}

/// The report naming `suspect`, of `kind`, that `detector` found (as this
/// member, rank 1, relays it or sends its own).
fn report(suspect: usize, kind: FailureKind, detector: usize) -> Control {
    Control::Failed {
        suspect: Some(suspect),
        kind,
        detector,
    }
}

/// Node 2 left because node 0 failed: its connection broke before its
/// report (naming node 0, which broke the protocol) arrived. The report,
/// arriving within the grace period, decides the suspect and the cause:
/// node 0 broke the protocol, as node 2 found — not "node 2 unreachable".
#[tokio::test(start_paused = true)]
async fn a_report_arriving_after_the_reporters_connection_broke_names_the_first_failure() {
    let mut m = member(usize::MAX).await;
    m.peer_down(2);
    tokio::time::sleep(FAILURE_GRACE / 2).await;
    m.failure_report(2, 0, FailureKind::ProtocolViolation);
    assert_eq!(
        m.failure().await,
        reported(0, FailureKind::ProtocolViolation, 2)
    );
    // Everyone is told about node 0, node 0 included, as node 2 found it.
    let relayed = report(0, FailureKind::ProtocolViolation, 2);
    assert_eq!(m.reports_sent(), vec![(0, relayed), (2, relayed)]);
}

/// Without a report, the peer the transport lost is named once the grace
/// period is over — not before.
#[tokio::test(start_paused = true)]
async fn a_peer_lost_without_a_report_is_named_after_the_grace_period() {
    let mut m = member(usize::MAX).await;
    let start = tokio::time::Instant::now();
    m.peer_down(2);
    let error = m.failure().await;
    assert_eq!(error, lost(2));
    assert_eq!(tokio::time::Instant::now() - start, FAILURE_GRACE);
    // The suspect is told too: it may only have been stopped.
    let own = report(2, FailureKind::Unreachable, 1);
    assert_eq!(m.reports_sent(), vec![(0, own), (2, own)]);
    // A report arriving later changes nothing.
    m.failure_report(0, 0, FailureKind::NoProgress);
    assert!(m.receiver().next().await.is_none());
}

/// A second peer lost during the grace period does not replace the first.
#[tokio::test(start_paused = true)]
async fn the_first_peer_lost_is_named_when_two_are() {
    let mut m = member(usize::MAX).await;
    m.peer_down(2);
    tokio::time::sleep(Duration::from_millis(10)).await;
    m.peer_down(0);
    assert_eq!(m.failure().await, lost(2));
}

/// A member that was stopped and declared failed by the others hears of it
/// when it resumes: it names itself, not the member whose connection it
/// finds closed.
#[tokio::test(start_paused = true)]
async fn a_resumed_member_declared_failed_names_itself() {
    let mut m = member(usize::MAX).await;
    // On resuming, a closed connection and the buffered report arrive
    // together, in either order.
    m.peer_down(0);
    m.failure_report(2, 1, FailureKind::Unreachable);
    assert_eq!(m.failure().await, reported(1, FailureKind::Unreachable, 2));
}

/// Node 1 in the middle of a two-block message from node 0, with a 1 s
/// progress timeout: it waits twice that for the second block.
async fn waiting_for_a_block() -> Member {
    let config = config().with_progress_timeout(Some(Duration::from_secs(1)));
    let m = member_with(usize::MAX, config).await;
    m.inject
        .send(Completion::Received {
            group: GROUP,
            from: NodeId(0),
            immediate: 2048,
            len: 1024,
        })
        .unwrap();
    m
}

/// No progress is seen from outside: the member waits the grace period
/// after its progress timeout before it names the peer it waits on.
#[tokio::test(start_paused = true)]
async fn no_progress_is_named_a_grace_period_after_the_progress_timeout() {
    let mut m = waiting_for_a_block().await;
    let start = tokio::time::Instant::now();
    assert_eq!(m.failure().await, failed(0, FailureKind::NoProgress));
    let waited = tokio::time::Instant::now() - start;
    assert_eq!(waited, Duration::from_secs(2) + FAILURE_GRACE);
}

/// A report that arrives after the progress timeout, within the grace
/// period, decides the cause: node 2 found that node 0's application left.
#[tokio::test(start_paused = true)]
async fn a_report_within_the_grace_after_the_progress_timeout_decides() {
    let mut m = waiting_for_a_block().await;
    tokio::time::sleep(Duration::from_secs(2) + FAILURE_GRACE / 2).await;
    m.failure_report(2, 0, FailureKind::LocalShutdown);
    assert_eq!(
        m.failure().await,
        reported(0, FailureKind::LocalShutdown, 2)
    );
}

/// A message announced larger than the memory this node can get fails the
/// group — naming this node, out of memory, every other member told —
/// instead of aborting the process.
#[tokio::test(start_paused = true)]
async fn a_message_whose_memory_cannot_be_had_fails_the_group() {
    let mut m = member(1 << 20).await;
    let size = 1u64 << 30;
    m.inject
        .send(Completion::Received {
            group: GROUP,
            from: NodeId(0),
            immediate: size,
            len: 1024,
        })
        .unwrap();
    assert_eq!(
        m.failure().await,
        failed(1, FailureKind::OutOfMemory { size })
    );
    let own = report(1, FailureKind::OutOfMemory { size }, 1);
    assert_eq!(m.reports_sent(), vec![(0, own), (2, own)]);
    let e = m.receiver().close().await.unwrap_err();
    assert!(e.to_string().contains("out of memory"), "{e}");
}

/// Node 1, with message digests on, receives a one-block message from the
/// root: `wire` (the message and its digest) lands in the receive posted
/// for it. Its stream's first item.
async fn receive_with_digest(wire: Vec<u8>) -> Result<crate::Message, Error> {
    let mut m = member_with(usize::MAX, config().with_message_digest(true)).await;
    let region = m.posted.lock().unwrap().remove(0);
    let len = wire.len();
    region.write(&wire);
    m.inject
        .send(Completion::Received {
            group: GROUP,
            from: NodeId(0),
            immediate: len as u64,
            len,
        })
        .unwrap();
    m.receiver().next().await.expect("an item")
}

fn with_digest(message: &[u8]) -> Vec<u8> {
    let mut wire = message.to_vec();
    wire.extend_from_slice(blake3::hash(message).as_bytes());
    wire
}

/// A message whose digest matches is delivered without it.
#[tokio::test(start_paused = true)]
async fn a_message_with_its_digest_is_delivered_without_it() {
    let message = b"one hundred bytes, more or less, of a message that arrives intact";
    let got = receive_with_digest(with_digest(message)).await.unwrap();
    assert_eq!(&got.data[..], &message[..]);
}

/// One bit changed anywhere — in the message or in its digest — fails the
/// group before delivery, naming the member that sent the blocks.
#[tokio::test(start_paused = true)]
async fn a_corrupted_message_fails_the_group_naming_its_sender() {
    let message = b"a message that one flipped bit will corrupt on its way";
    let wire = with_digest(message);
    for at in [
        0,
        message.len() / 2,
        message.len() - 1,
        message.len(),
        wire.len() - 1,
    ] {
        let mut corrupted = wire.clone();
        corrupted[at] ^= 0x10;
        assert_eq!(
            receive_with_digest(corrupted).await.unwrap_err(),
            failed(0, FailureKind::DigestMismatch { seq: 0 }),
            "bit flipped at {at}"
        );
    }
    // Too short to hold a digest at all.
    assert_eq!(
        receive_with_digest(vec![0; 31]).await.unwrap_err(),
        failed(0, FailureKind::DigestMismatch { seq: 0 })
    );
}

/// After this member acknowledged the close, losing another receiver is
/// moot (only the root's verdict counts) — but losing the root too, within
/// the same grace period, is not: the group fails naming the root instead
/// of waiting forever for a verdict that cannot come.
#[tokio::test(start_paused = true)]
async fn a_moot_loss_does_not_hide_the_roots_loss_in_the_same_grace_period() {
    let mut m = member(usize::MAX).await;
    m.inject
        .send(Completion::Signal {
            group: GROUP,
            from: NodeId(0),
            signal: Signal::Group(Control::Close { messages: 0 }),
        })
        .unwrap();
    assert!(m.receiver().next().await.is_none(), "nothing was sent");
    let inject = m.inject.clone();
    let (closed, ()) = tokio::join!(m.receiver().close(), async {
        // Acknowledged: now lose receiver 2, then the root.
        tokio::time::sleep(Duration::from_millis(1)).await;
        for node in [NodeId(2), NodeId(0)] {
            inject
                .send(Completion::peer_down(node, 0, "lost in a test"))
                .unwrap();
        }
    });
    let acked = m
        .sent
        .lock()
        .unwrap()
        .iter()
        .any(|(to, s)| *to == NodeId(0) && *s == Signal::Group(Control::CloseAck));
    assert!(acked, "the member acknowledged the close");
    assert_eq!(closed.unwrap_err(), lost(0));
}

/// A peer that comes back in a new run while the group it was in fails is
/// not told of that group: its new run may have made a group of the same
/// id, which must not take the old one's failure for its own.
#[tokio::test(start_paused = true)]
async fn a_peer_back_in_a_new_run_hears_nothing_of_its_old_group() {
    let mut m = member(usize::MAX).await;
    m.peer_down(2);
    m.inject
        .send(Completion::PeerUp {
            node: NodeId(2),
            incarnation: 7,
            addr: None,
        })
        .unwrap();
    assert_eq!(m.failure().await, failed(2, FailureKind::Unreachable));
    // Node 0 hears of the failure; node 2's new run does not.
    let own = report(2, FailureKind::Unreachable, 1);
    assert_eq!(m.reports_sent(), vec![(0, own)]);
}

/// Connected on demand, a peer whose connection ended is tried again by a
/// new group (it may have restarted): the group sends it its `Join` and
/// forms once the peer's new run joins; the new run's connection is no
/// gap for it. Connected at start, such a group fails at once.
#[tokio::test(start_paused = true)]
async fn on_demand_a_new_group_takes_a_peer_back_after_it_went() {
    for on_demand in [true, false] {
        let mut m = node_on(1, (usize::MAX, on_demand), config()).await;
        m.peer_down(2);
        assert_eq!(m.failure().await, lost(2));
        let joins_to_two = |m: &Member| {
            let sent = m.sent.lock().unwrap();
            sent.iter()
                .filter(|(to, s)| *to == NodeId(2) && matches!(s, Signal::Join { .. }))
                .count()
        };
        let before = joins_to_two(&m);
        let (id, members) = (GroupId(8), vec![NodeId(0), NodeId(1), NodeId(2)]);
        let (reply, response) = oneshot::channel();
        m.commands
            .send(Command::CreateGroup {
                id,
                members: members.clone(),
                config: config(),
                reply,
            })
            .unwrap();
        // The creation is under way before anything of node 2's new run.
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        if !on_demand {
            let error = response.await.unwrap().unwrap_err();
            assert!(
                matches!(
                    &error,
                    Error::GroupFailed {
                        suspect: Some(NodeId(2)),
                        ..
                    }
                ),
                "{error:?}"
            );
            continue;
        }
        // Node 2's new run connects, and both others join.
        m.inject
            .send(Completion::PeerUp {
                node: NodeId(2),
                incarnation: 9,
                addr: None,
            })
            .unwrap();
        let digest = config_digest(id, &members, &config());
        for from in [NodeId(0), NodeId(2)] {
            m.inject
                .send(Completion::Signal {
                    group: id,
                    from,
                    signal: Signal::Join { digest },
                })
                .unwrap();
        }
        let joined = tokio::time::timeout(std::time::Duration::from_secs(5), response)
            .await
            .expect("the group forms")
            .unwrap();
        assert!(joined.is_ok(), "{:?}", joined.err());
        assert_eq!(
            joins_to_two(&m),
            before + 1,
            "node 2 was sent the new group's Join"
        );
    }
}
