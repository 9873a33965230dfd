//! A pub/sub feed of large objects on rdmc: the library part of the
//! `pubsub` example (its test, `rdmc/tests/pubsub.rs`, includes this file
//! too).
//!
//! One publisher (the group's root) publishes a stream of objects to every
//! subscriber, at most [`IN_FLIGHT`] unacknowledged at a time (it waits for
//! room with [`Sender::reserve`](rdmc::Sender::reserve)), and keeps each
//! object until every subscriber's application has taken it
//! ([`Receipt::delivered`](rdmc::Receipt::delivered)).
//!
//! - **Shutdown**: when the shutdown token is cancelled (Ctrl-C in the
//!   example) the publisher stops taking new objects, waits until the ones
//!   in flight are delivered, and closes the group; subscribers read their
//!   streams to the end and close too.
//! - **Recovery**: when the group fails ([`Error::GroupFailed`], naming the
//!   member that failed), the publisher and the surviving subscribers each
//!   re-form it without that member, as a group with the next id; the
//!   publisher sends again every object not yet delivered to everybody, and
//!   subscribers skip the ones they already had. Every surviving subscriber
//!   ends with every object exactly once, in order.
//!
//! Each message is the object's index (8 bytes, little-endian) followed by
//! its bytes.

use std::collections::VecDeque;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures::stream::FuturesOrdered;
use futures::{Stream, StreamExt, TryStreamExt};
use rdmc::{Error, Group, GroupConfig, GroupId, Node, NodeId};
use tokio_util::sync::CancellationToken;

/// The most objects sent and not yet delivered to every subscriber.
pub const IN_FLIGHT: u64 = 4;

/// How often the feed re-forms after failures before giving up.
pub const MAX_REFORMS: usize = 8;

/// What the publisher did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Published {
    /// Objects delivered to every (surviving) subscriber, from the first.
    pub delivered: u64,
    /// The members left out by each re-forming, in order.
    pub left_out: Vec<NodeId>,
    /// Whether the shutdown token stopped the feed before the objects ran out.
    pub stopped: bool,
}

/// Why a subscriber stopped.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    /// The group failed in a way re-forming could not get past (see
    /// [`subscribe`]).
    #[error(transparent)]
    Group(#[from] Error),
    /// A message too short to hold an object's index: the publisher is not
    /// running this feed.
    #[error("message {seq} is {len} bytes, too short for the 8-byte object index")]
    Malformed {
        /// The message's sequence number in its group.
        seq: u64,
        /// Its length in bytes.
        len: usize,
    },
    /// An object arrived out of order: the feed lost or repeated objects.
    #[error("expected object {expected}, the feed sent object {got}")]
    OutOfOrder {
        /// The index of the next object this subscriber lacks.
        expected: u64,
        /// The index the message carried.
        got: u64,
    },
}

/// What a subscriber received.
#[derive(Debug, Default)]
pub struct Received {
    /// The objects, in order, each once.
    pub objects: Vec<Bytes>,
    /// The members left out by each re-forming, in order.
    pub left_out: Vec<NodeId>,
    /// Objects received again after a re-forming, and skipped.
    pub duplicates: u64,
}

/// The group every member creates for `epoch` (the feed's `epoch`-th
/// group, after `epoch` re-formings).
pub fn group_id(epoch: usize) -> GroupId {
    GroupId(1000 + epoch as u64)
}

/// The configuration of every group of the feed.
pub fn config() -> GroupConfig {
    GroupConfig::new().with_max_in_flight(Some(IN_FLIGHT))
}

/// The member to leave out after `error`, if it is one that re-forming can
/// get past: a group failure naming another member than `me`.
fn failed_member(error: &Error, me: NodeId) -> Option<NodeId> {
    match error {
        Error::GroupFailed {
            suspect: Some(node),
            ..
        } if *node != me => Some(*node),
        _ => None,
    }
}

/// Publish `objects` from `node`, the root of `members`, until they run
/// out or `shutdown` is cancelled. Re-forms the group without a member
/// that fails, up to [`MAX_REFORMS`] times.
///
/// # Errors
/// A failure that re-forming cannot get past (this node's own, or too many),
/// or one from creating or closing a group; [`Error::NotRoot`] if `node` is
/// not the first of `members`.
pub async fn publish(
    node: &Node,
    mut members: Vec<NodeId>,
    objects: impl Stream<Item = Bytes>,
    shutdown: CancellationToken,
) -> Result<Published, Error> {
    let mut objects = std::pin::pin!(objects.fuse());
    let mut report = Published::default();
    // Objects sent and not yet delivered to everybody, with their index.
    let mut unacked: VecDeque<(u64, Bytes)> = VecDeque::new();
    let mut next_index = 0;
    for epoch in 0.. {
        let id = group_id(epoch);
        let Group::Root(mut group) = node.create_group(id, &members, config()).await? else {
            return Err(Error::NotRoot(id));
        };
        // After a re-forming, what was not delivered goes again first.
        let mut resend = unacked.clone();
        let mut pending = FuturesOrdered::new();
        let outcome: Result<(), Error> = async {
            loop {
                let sending = !report.stopped && (!resend.is_empty() || !objects.is_done());
                tokio::select! {
                    biased;
                    Some(delivered) = pending.next() => {
                        delivered?;
                        unacked.pop_front();
                        report.delivered += 1;
                    }
                    () = shutdown.cancelled(), if sending => report.stopped = true,
                    // Room for one more object in flight.
                    permit = group.reserve(), if sending => {
                        let permit = permit?;
                        let (index, object) = match resend.pop_front() {
                            Some(again) => again,
                            None => match objects.next().await {
                                Some(object) => {
                                    let index = next_index;
                                    next_index += 1;
                                    unacked.push_back((index, object.clone()));
                                    (index, object)
                                }
                                // No more objects: the permit's room goes back.
                                None => continue,
                            },
                        };
                        pending.push_back(permit.send(frame(index, &object)).delivered());
                    }
                    // Nothing in flight and nothing more to send.
                    else => break,
                }
            }
            group.close().await
        }
        .await;
        match outcome {
            Ok(()) => return Ok(report),
            Err(e) => match failed_member(&e, node.id()) {
                Some(failed) if report.left_out.len() < MAX_REFORMS => {
                    tracing::info!(%failed, "re-forming the feed without the failed member");
                    members.retain(|&m| m != failed);
                    report.left_out.push(failed);
                }
                _ => return Err(e),
            },
        }
    }
    unreachable!("the loop returns")
}

/// Subscribe from `node`, a member of `members` (the first is the
/// publisher): every object, in order, each once, until the publisher
/// closes the feed. Re-forms the group as the publisher does.
///
/// # Errors
/// The publisher's failure, this node's own, or too many re-formings
/// ([`FeedError::Group`]); a message that is not part of this feed
/// ([`FeedError::Malformed`], [`FeedError::OutOfOrder`]), after which the
/// subscriber leaves the group without reading further.
///
/// # Panics
/// If `node` is the first of `members`: the publisher does not subscribe.
pub async fn subscribe(node: &Node, mut members: Vec<NodeId>) -> Result<Received, FeedError> {
    let mut received = Received::default();
    for epoch in 0.. {
        let Group::Receiver(mut group) = node
            .create_group(group_id(epoch), &members, config())
            .await?
        else {
            panic!("node {} is the feed's publisher", node.id());
        };
        let (objects, duplicates) = (&mut received.objects, &mut received.duplicates);
        let have = objects.len() as u64;
        let read: Result<(), FeedError> = group
            .by_ref()
            .err_into::<FeedError>()
            .and_then(|message| std::future::ready(unframe(message.seq, message.data)))
            // After a re-forming the publisher first sends again what not
            // every subscriber had: skip what this one has.
            .try_skip_while(|(index, _)| {
                let again = *index < have;
                *duplicates += u64::from(again);
                std::future::ready(Ok(again))
            })
            .try_for_each(|(index, object)| {
                let expected = objects.len() as u64;
                if index != expected {
                    return std::future::ready(Err(FeedError::OutOfOrder {
                        expected,
                        got: index,
                    }));
                }
                objects.push(object);
                std::future::ready(Ok(()))
            })
            .await;
        // Read to the end: this member has every object (a store would
        // sync them first); closing says so.
        let outcome = match read {
            Ok(()) => group.close().await,
            Err(FeedError::Group(e)) => Err(e),
            Err(malformed) => return Err(malformed),
        };
        match outcome {
            Ok(()) => return Ok(received),
            Err(e) => match failed_member(&e, node.id()) {
                Some(failed) if failed != members[0] && received.left_out.len() < MAX_REFORMS => {
                    members.retain(|&m| m != failed);
                    received.left_out.push(failed);
                }
                _ => return Err(e.into()),
            },
        }
    }
    unreachable!("the loop returns")
}

/// A message: the object's index, then its bytes.
fn frame(index: u64, object: &[u8]) -> Bytes {
    let mut message = BytesMut::with_capacity(8 + object.len());
    message.put_u64_le(index);
    message.put_slice(object);
    message.freeze()
}

/// A message's index and object, or why message `seq` is not one.
fn unframe(seq: u64, mut message: Bytes) -> Result<(u64, Bytes), FeedError> {
    if message.len() < 8 {
        return Err(FeedError::Malformed {
            seq,
            len: message.len(),
        });
    }
    let index = message.get_u64_le();
    Ok((index, message))
}
