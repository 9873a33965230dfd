//! Allreduce by recursive halving and doubling, after Thakur, Rabenseifner
//! and Gropp, "Optimization of Collective Communication Operations in
//! MPICH" (2005): a reduce-scatter by recursive halving, then an allgather
//! by recursive doubling, each step one message each way between two
//! partners.
//!
//! Among `p` members (`p` a power of two) member `v`'s partner in the step
//! of mask `m` is `v ^ m`. The reduce-scatter takes the masks from `p / 2`
//! down to 1: both partners split the range they share in two, each sends
//! the half the other keeps and reduces the half it keeps, so after
//! `log2 p` steps member `v` holds the reduced `v`-th of `p` slices. The
//! allgather takes the masks back up, each partner sending what it holds.
//!
//! Any other `n` is folded first: with `p` the largest power of two not
//! above `n` and `r = n − p`, ranks `2i + 1` (for `i < r`) send their whole
//! buffer to rank `2i` before the halving, sit it out and get the result
//! from rank `2i` at the end.
//!
//! Every directed pair that exchanges has a two-member group of its own,
//! the sender its root, used once in each half of a call.

use bytes::{Bytes, BytesMut};
use futures::future::{Either, join_all, select, try_join_all};

use super::edge::{
    AllreduceError, MAX_RING_BLOCK, VERDICT, Verdict, copy_exact, failed, next_message,
    receiver_of, root_of,
};
use super::op::ReduceOp;
use crate::{Error, Group, GroupConfig, GroupId, Message, Node, NodeId, Receiver, Sender, Sent};

/// The largest power of two not above `n` (1 for `n <= 1`) and how many
/// members the fold sets aside, `n − p`.
pub(super) fn fold_sizes(n: usize) -> (usize, usize) {
    if n <= 1 {
        return (1, 0);
    }
    let p = 1usize << (usize::BITS - 1 - n.leading_zeros());
    (p, n - p)
}

/// Rank `rank`'s index among the `p` members that do the halving, or
/// `None` if the fold sets it aside (`r` members are set aside).
pub(super) fn active_index(rank: usize, r: usize) -> Option<usize> {
    if rank < 2 * r {
        rank.is_multiple_of(2).then_some(rank / 2)
    } else {
        Some(rank - r)
    }
}

/// The rank of the `v`-th active member.
pub(super) fn rank_of(v: usize, r: usize) -> usize {
    if v < r { 2 * v } else { v + r }
}

/// One step's pair of groups.
#[derive(Debug)]
struct Step {
    /// The partner's bit: the step's mask.
    mask: usize,
    /// The partner's rank.
    peer: usize,
    /// This member to the partner (this member the root).
    out: Sender,
    /// The partner to this member.
    inc: Receiver,
}

/// The fold's pair of groups between rank `2i` and rank `2i + 1`.
#[derive(Debug)]
struct Fold {
    /// The other rank of the pair.
    peer: usize,
    /// Whether this member is the one set aside (the odd rank).
    aside: bool,
    /// This member to the other (this member the root).
    out: Sender,
    /// The other to this member.
    inc: Receiver,
}

/// One member's groups of the recursive halving and doubling.
#[derive(Debug)]
pub(super) struct Halving {
    members: Vec<NodeId>,
    rank: usize,
    /// This member's index among the active ones (absent if set aside).
    index: Option<usize>,
    /// The steps in reduce-scatter order (masks from `p / 2` down to 1);
    /// empty for a member set aside.
    steps: Vec<Step>,
    fold: Option<Fold>,
    /// The last call's accumulator, kept for its pages: a fresh buffer
    /// per call is zeroed page by page as it is first written.
    scratch: Vec<u8>,
}

impl Halving {
    /// Create this member's groups: ids from `base`, `n` per slot, a slot
    /// per step and two for the fold. `expected` is the buffer size each group's block is sized for
    /// (unless `config` fixes the groups' configuration), so that every
    /// message is one block; `min_block` is the smallest block.
    pub(super) async fn new(
        node: &Node,
        base: u64,
        members: &[NodeId],
        rank: usize,
        expected: u64,
        min_block: usize,
        config: Option<GroupConfig>,
    ) -> Result<Self, Error> {
        let n = members.len();
        let (p, r) = fold_sizes(n);
        let log = p.trailing_zeros() as usize;
        let id = |slot: usize, from: usize| GroupId(base + (slot * n + from) as u64);
        // The biggest message at mask m is a slice of 2 m / p of the
        // buffer (before it is halved), plus the verdict; whole elements
        // may put a few bytes over, hence the slack.
        let config_for = |bytes: u64| {
            config.clone().unwrap_or_else(|| {
                let block = usize::try_from(bytes + VERDICT as u64 + 64)
                    .unwrap_or(usize::MAX)
                    .min(MAX_RING_BLOCK)
                    .max(min_block);
                GroupConfig::new().with_block_size(block)
            })
        };
        let pair = |root: usize, other: usize| [members[root], members[other]];
        let index = active_index(rank, r);
        let steps = async {
            let Some(v) = index else {
                return Ok(Vec::new());
            };
            try_join_all((0..log).rev().map(|bit| {
                let mask = 1usize << bit;
                let peer = rank_of(v ^ mask, r);
                let config = config_for(expected.saturating_mul(mask as u64) / p as u64);
                async move {
                    let (to, from) = (pair(rank, peer), pair(peer, rank));
                    let (out, inc) = tokio::try_join!(
                        node.create_group(id(bit, rank), &to, config.clone()),
                        node.create_group(id(bit, peer), &from, config.clone()),
                    )?;
                    let (out, inc) = (root_of(out), receiver_of(inc));
                    Ok::<_, Error>(Step {
                        mask,
                        peer,
                        out,
                        inc,
                    })
                }
            }))
            .await
        };
        let fold = async {
            if rank >= 2 * r {
                return Ok(None);
            }
            let aside = rank % 2 == 1;
            let peer = rank ^ 1;
            // Slot `log` carries the buffers in, slot `log + 1` the results out.
            let (out_slot, in_slot) = if aside {
                (log, log + 1)
            } else {
                (log + 1, log)
            };
            let config = config_for(expected);
            let (to, from) = (pair(rank, peer), pair(peer, rank));
            let (out, inc) = tokio::try_join!(
                node.create_group(id(out_slot, rank), &to, config.clone()),
                node.create_group(id(in_slot, peer), &from, config.clone()),
            )?;
            let (out, inc) = (root_of(out), receiver_of(inc));
            Ok(Some(Fold {
                peer,
                aside,
                out,
                inc,
            }))
        };
        let (steps, fold) = tokio::try_join!(steps, fold)?;
        Ok(Halving {
            members: members.to_vec(),
            rank,
            index,
            steps,
            fold,
            scratch: Vec::new(),
        })
    }

    /// Every group with the peer at its other end, for closing.
    pub(super) fn into_groups(self) -> Vec<(NodeId, Group)> {
        let mut out = Vec::new();
        for s in self.steps {
            let peer = self.members[s.peer];
            out.push((peer, Group::Root(s.out)));
            out.push((peer, Group::Receiver(s.inc)));
        }
        if let Some(f) = self.fold {
            let peer = self.members[f.peer];
            out.push((peer, Group::Root(f.out)));
            out.push((peer, Group::Receiver(f.inc)));
        }
        out
    }

    /// One allreduce of `buf` by `op`. `watch` is a group of every member
    /// that carries nothing during the call: its failure (a member down
    /// anywhere) ends the call with [`AllreduceError::MemberFailed`] even
    /// where no partner of this member failed. (Its root may close it once
    /// its own call is over, ending it for the others: it is then no
    /// longer watched.)
    ///
    /// The first message of the fold and every reduce-scatter message
    /// start with the sender's [`Verdict`]; after the reduce-scatter every
    /// active member's verdict covers all `n` buffers, so a bad buffer
    /// fails them all alike before the allgather, and the members set
    /// aside learn it in place of the result.
    pub(super) async fn allreduce(
        &mut self,
        buf: &mut [u8],
        op: &ReduceOp,
        watch: Option<&mut Group>,
    ) -> Result<(), AllreduceError> {
        let element = op.element_size();
        let mut call = Call {
            element,
            verdict: Verdict::of(buf.len() as u64, self.rank as u64, element),
            sends: Vec::new(),
            watch,
            started: std::time::Instant::now(),
        };
        if let Some(fold) = self.fold.as_mut().filter(|f| f.aside) {
            return set_aside(fold, &self.members, buf, call).await;
        }

        let mut acc = std::mem::take(&mut self.scratch);
        acc.clear();
        acc.extend_from_slice(buf);
        self.reduce_folded(&mut acc, op, &mut call).await?;
        let parts = self.reduce_scatter(&mut acc, op, &mut call).await?;
        if let Some(error) = call.verdict.error(&self.members, element) {
            // Every active member has the same verdict: none goes on.
            self.send_to_fold(&[], &mut call);
            call.finish().await?;
            return Err(error);
        }
        self.allgather(&mut acc, parts, &mut call).await?;
        self.send_to_fold(&acc, &mut call);
        call.finish().await?;
        buf.copy_from_slice(&acc);
        self.scratch = acc;
        Ok(())
    }

    /// With a partner set aside: its buffer reduced into `acc` first.
    async fn reduce_folded(
        &mut self,
        acc: &mut [u8],
        op: &ReduceOp,
        call: &mut Call<'_>,
    ) -> Result<(), AllreduceError> {
        let Some(fold) = self.fold.as_mut() else {
            return Ok(());
        };
        let peer = self.members[fold.peer];
        let msg = call.recv(&mut fold.inc, peer).await?;
        let whole = acc.len().is_multiple_of(call.element);
        call.reduce(
            op,
            acc,
            &msg,
            peer,
            whole,
            "a folded buffer of another length",
        )
    }

    /// Reduce-scatter: halve the range held at each step, reducing the
    /// half kept. Per step: the part kept and the part given away (in
    /// elements).
    async fn reduce_scatter(
        &mut self,
        acc: &mut [u8],
        op: &ReduceOp,
        call: &mut Call<'_>,
    ) -> Result<Vec<(Span, Span)>, AllreduceError> {
        let index = self.index.expect("an active member");
        let mut window = (0, acc.len() / call.element);
        let mut parts = Vec::with_capacity(self.steps.len());
        for step in &mut self.steps {
            let peer = self.members[step.peer];
            let (lo, hi) = window;
            let mid = lo + (hi - lo) / 2;
            let (keep, give) = if index & step.mask == 0 {
                ((lo, mid), (mid, hi))
            } else {
                ((mid, hi), (lo, mid))
            };
            let msg = call.with_verdict(&acc[call.bytes(give)]);
            call.sends.push((peer, step.out.queue(msg).sent()));
            let msg = call.recv_step(step, peer, "halving").await?;
            let kept = &mut acc[call.bytes(keep)];
            call.reduce(
                op,
                kept,
                &msg,
                peer,
                true,
                "a halving slice of another length",
            )?;
            parts.push((keep, give));
            window = keep;
        }
        Ok(parts)
    }

    /// Allgather: the steps backwards, each side sending what it holds.
    async fn allgather(
        &mut self,
        acc: &mut [u8],
        parts: Vec<(Span, Span)>,
        call: &mut Call<'_>,
    ) -> Result<(), AllreduceError> {
        for (step, (keep, give)) in self.steps.iter_mut().zip(parts).rev() {
            let peer = self.members[step.peer];
            let msg = Bytes::copy_from_slice(&acc[call.bytes(keep)]);
            call.sends.push((peer, step.out.queue(msg).sent()));
            let msg = call.recv_step(step, peer, "doubling").await?;
            copy_exact(
                &mut acc[call.bytes(give)],
                &msg.data,
                peer,
                "a gathered slice",
            )?;
        }
        Ok(())
    }

    /// With a partner set aside: the verdict and `payload` (the result, or
    /// nothing after a bad buffer) to it.
    fn send_to_fold(&self, payload: &[u8], call: &mut Call<'_>) {
        if let Some(fold) = &self.fold {
            let msg = call.with_verdict(payload);
            call.sends
                .push((self.members[fold.peer], fold.out.queue(msg).sent()));
        }
    }
}

/// A range of elements, `(first, end)`.
type Span = (usize, usize);

/// One call of a member in progress.
struct Call<'w> {
    /// Bytes per element.
    element: usize,
    /// The verdict over the buffers reduced into this member's so far.
    verdict: Verdict,
    /// The messages queued, each with its peer (awaited at the call's end).
    sends: Vec<(NodeId, Sent)>,
    /// The group every member watches for failures.
    watch: Option<&'w mut Group>,
    /// For the per-step timings of `debug` events.
    started: std::time::Instant,
}

impl Call<'_> {
    /// The bytes of the elements `span`.
    fn bytes(&self, (lo, hi): Span) -> std::ops::Range<usize> {
        lo * self.element..hi * self.element
    }

    /// A message: the verdict, then `payload`.
    fn with_verdict(&self, payload: &[u8]) -> Bytes {
        let mut msg = BytesMut::with_capacity(VERDICT + payload.len());
        self.verdict.put(&mut msg);
        msg.extend_from_slice(payload);
        msg.freeze()
    }

    /// Fold the verdict `msg` from `peer` starts with into this member's,
    /// and reduce the rest of `msg` into `into` by `op`. A rest of another
    /// length (or a buffer not `whole` elements) is skipped if the verdict
    /// says the call fails anyway, and is the protocol error `what` if not.
    fn reduce(
        &mut self,
        op: &ReduceOp,
        into: &mut [u8],
        msg: &Message,
        peer: NodeId,
        whole: bool,
        what: &str,
    ) -> Result<(), AllreduceError> {
        self.verdict.combine(&verdict_of(msg, peer)?);
        let data = &msg.data[VERDICT..];
        if data.len() == into.len() && whole {
            op.apply(into, data);
        } else if self.verdict.is_ok() {
            return Err(AllreduceError::Protocol {
                member: peer,
                detail: what.into(),
            });
        }
        Ok(())
    }

    /// The next message of `group` (see [`recv`]).
    async fn recv(
        &mut self,
        group: &mut Receiver,
        peer: NodeId,
    ) -> Result<Message, AllreduceError> {
        recv(group, peer, &mut self.watch).await
    }

    /// The partner's message of `step` in the `phase` ("halving" or
    /// "doubling"), its arrival logged.
    async fn recv_step(
        &mut self,
        step: &mut Step,
        peer: NodeId,
        phase: &str,
    ) -> Result<Message, AllreduceError> {
        let msg = self.recv(&mut step.inc, peer).await?;
        tracing::debug!(
            mask = step.mask,
            bytes = msg.data.len(),
            arrived_us = self.started.elapsed().as_micros() as u64,
            "{phase} message arrived"
        );
        Ok(msg)
    }

    /// Await the sends (see [`finish`]).
    async fn finish(mut self) -> Result<(), AllreduceError> {
        finish(self.sends, &mut self.watch).await
    }
}

/// A member set aside by the fold: its whole buffer to the partner, the
/// result (or the error every active member found) back.
async fn set_aside(
    fold: &mut Fold,
    members: &[NodeId],
    buf: &mut [u8],
    mut call: Call<'_>,
) -> Result<(), AllreduceError> {
    let peer = members[fold.peer];
    let msg = call.with_verdict(buf);
    call.sends.push((peer, fold.out.queue(msg).sent()));
    let msg = call.recv(&mut fold.inc, peer).await?;
    let theirs = verdict_of(&msg, peer)?;
    let outcome = match theirs.error(members, call.element) {
        Some(error) => Err(error),
        None if msg.data.len() - VERDICT != buf.len() => {
            return Err(AllreduceError::Protocol {
                member: peer,
                detail: "a result of another length".into(),
            });
        }
        None => {
            buf.copy_from_slice(&msg.data[VERDICT..]);
            Ok(())
        }
    };
    call.finish().await?;
    outcome
}

/// The verdict a message from `peer` starts with.
fn verdict_of(msg: &Message, peer: NodeId) -> Result<Verdict, AllreduceError> {
    Verdict::get(&msg.data).ok_or_else(|| AllreduceError::Protocol {
        member: peer,
        detail: "a halving message shorter than its header".into(),
    })
}

/// The next message of `group`, or the failure `watch` reports first. A
/// watched group that ends (its root, done with the call, closed it) is
/// watched no more.
async fn recv(
    group: &mut Receiver,
    peer: NodeId,
    watch: &mut Option<&mut Group>,
) -> Result<Message, AllreduceError> {
    or_watched(next_message(group, peer), watch, |_| peer).await
}

/// Await the sends (each answered by its peer), or the failure `watch`
/// reports first.
async fn finish(
    sends: Vec<(NodeId, Sent)>,
    watch: &mut Option<&mut Group>,
) -> Result<(), AllreduceError> {
    let (peers, futures): (Vec<NodeId>, Vec<Sent>) = sends.into_iter().unzip();
    let all = async move {
        for (peer, r) in peers.into_iter().zip(join_all(futures).await) {
            r.map_err(|e| failed(peer, e))?;
        }
        Ok(())
    };
    let root = |w: &Group| w.members().first().copied().unwrap_or(NodeId(u32::MAX));
    or_watched(all, watch, root).await
}

/// The outcome of `fut`, or the error for an event of `watch` that comes
/// first (naming the member `blame` says). A watched group that ends
/// normally (its root, done with the call, closed it) is watched no more.
async fn or_watched<T>(
    fut: impl std::future::Future<Output = Result<T, AllreduceError>>,
    watch: &mut Option<&mut Group>,
    blame: impl FnOnce(&Group) -> NodeId,
) -> Result<T, AllreduceError> {
    let mut fut = std::pin::pin!(fut);
    {
        let Some(w) = watch.as_deref_mut() else {
            return fut.await;
        };
        let (id, peer) = (w.id(), blame(w));
        match select(fut.as_mut(), std::pin::pin!(w.next_event())).await {
            Either::Left((outcome, _)) => return outcome,
            Either::Right((None, _)) => {}
            Either::Right((event, _)) => return Err(watched(id, event, peer)),
        }
    }
    *watch = None;
    fut.await
}

/// The error for an event of the watched group during a call: its
/// failure, or a message it should not carry.
fn watched(id: GroupId, event: Option<Result<Message, Error>>, peer: NodeId) -> AllreduceError {
    match event {
        Some(Err(e)) => failed(peer, e),
        _ => AllreduceError::Protocol {
            member: peer,
            detail: format!("a message on group {} during a halving call", id.0),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fold_keeps_a_power_of_two_and_pairs_the_rest() {
        for n in 1usize..=200 {
            let (p, r) = fold_sizes(n);
            assert!(p.is_power_of_two() && p <= n && n < 2 * p, "n = {n}");
            assert_eq!(p + r, n);
            // Each active index is one rank, and back.
            let active: Vec<usize> = (0..n).filter_map(|rank| active_index(rank, r)).collect();
            assert_eq!(active, (0..p).collect::<Vec<_>>(), "n = {n}");
            for v in 0..p {
                assert_eq!(active_index(rank_of(v, r), r), Some(v), "n = {n}");
            }
            // The ones set aside are the odd ranks below 2 r.
            let aside: Vec<usize> = (0..n).filter(|&k| active_index(k, r).is_none()).collect();
            assert_eq!(aside, (0..r).map(|i| 2 * i + 1).collect::<Vec<_>>());
        }
    }
}
