//! [`GroupMember`]: the per-(group, member) protocol state machine.

use std::collections::VecDeque;

use crate::schedule::{BlockSize, NodeSchedule, Schedule, ScheduleError, Transfer};

mod close;
mod config;
mod delivery;
mod early;
mod events;
mod progress;

pub use config::{
    Announce, BATCH_FLAG, MAX_MESSAGES, MemberConfig, READY_WINDOW, Rank, block_count, block_len,
};
pub use events::{Action, Control, Failure, FailureKind, MemberError, write_cause};

use delivery::Unread;
use progress::Stall;

/// Progress on the message currently being transferred.
#[derive(Debug)]
struct MessageProgress {
    seq: u64,
    size: u64,
    /// Whether the transfer is a batch of small messages.
    batch: bool,
    /// This message's block size.
    block_size: usize,
    blocks: usize,
    steps: usize,
    /// Next send step to consider.
    send_step: usize,
    /// Target of the one outstanding block send, if any.
    sending: Option<Rank>,
    /// The block of the outstanding send.
    sending_block: usize,
    /// Sends of each block this member has not completed yet (for
    /// [`Action::ReleaseBlock`]).
    sends_left: Vec<u32>,
    /// Receives posted and announced with a ready-for-block whose blocks
    /// have not arrived, in step order (at most the ready window; all from
    /// one sender with [`Announce::OneSender`]), with the step each belongs to.
    expected: VecDeque<(usize, Transfer)>,
    /// The first step not yet considered for posting a receive.
    post_cursor: usize,
    /// The one block in `expected` has at most the early-announce threshold
    /// of bytes left (its transport said so): the next sender's receive
    /// may be announced ([`MemberConfig::early_announce`]).
    nearly_done: bool,
    /// Which blocks have arrived (empty on the root).
    received: Vec<bool>,
    num_received: usize,
}

impl MessageProgress {
    /// The immediate value of this transfer's blocks: its size, with
    /// [`BATCH_FLAG`] for a batch.
    fn immediate(&self) -> u64 {
        if self.batch {
            self.size | BATCH_FLAG
        } else {
            self.size
        }
    }
}

#[derive(Debug)]
enum Phase {
    Open,
    Closed,
    Failed(Failure),
}

#[derive(Debug)]
struct Closing {
    /// Number of messages in the group's lifetime.
    total: u64,
    /// Root: which members acknowledged. Others: whether we acknowledged.
    acked: Vec<bool>,
}

/// The protocol state machine of one member of one group.
///
/// Drive it by calling one of the input methods ([`submit`](Self::submit),
/// [`close`](Self::close), [`message_consumed`](Self::message_consumed),
/// [`handle_block`](Self::handle_block),
/// [`handle_block_progress`](Self::handle_block_progress),
/// [`handle_send_complete`](Self::handle_send_complete),
/// [`handle_control`](Self::handle_control),
/// [`handle_peer_failure`](Self::handle_peer_failure),
/// [`shutdown`](Self::shutdown)), then passing the time with
/// [`handle_timeout`](Self::handle_timeout), and then draining
/// [`poll_action`](Self::poll_action) until it returns `None`; call
/// `handle_timeout` again at [`poll_timeout`](Self::poll_timeout). Actions
/// must be carried out in the order given; in particular a `PostRecv` comes
/// before the `ReadyForBlock` that allows the peer to send into it.
///
/// A receiver's application takes part in the close: the member
/// acknowledges the root's close only once the application has taken every
/// message ([`message_consumed`](Self::message_consumed)) and closed
/// ([`close`](Self::close)), which says what happens when it closes early.
#[derive(Debug)]
pub struct GroupMember {
    config: MemberConfig,
    schedule: NodeSchedule,
    /// Peers I exchange blocks with (by rank).
    neighbour: Vec<bool>,
    /// Ready-for-blocks each peer sent that no block sent to it used yet.
    ready: Vec<u8>,
    /// Ready-for-blocks to each peer held back to ride in front of this
    /// member's next block to it ([`Announce::AnySender`]): sent just
    /// before that block's [`Action::SendBlock`].
    riding: Vec<u8>,
    /// Where every message's first block comes from (non-root).
    first: Option<Transfer>,
    /// Whether the first-block receive of the next message is posted.
    armed: bool,
    /// The root's queue of submitted messages not yet started: (seq, size,
    /// whether it is a batch).
    queued: VecDeque<(u64, u64, bool)>,
    /// Root: sequence number of the next submitted message.
    next_seq: u64,
    /// Messages completed locally.
    completed: u64,
    /// Messages the application consumed (receivers).
    consumed: u64,
    /// Receiver: the application called `close` (it persisted what it took).
    app_closed: bool,
    /// Receiver: `Action::AllDelivered` was emitted.
    all_delivered: bool,
    current: Option<MessageProgress>,
    closing: Option<Closing>,
    phase: Phase,
    actions: VecDeque<Action>,
    /// Inputs handled so far: each one is progress (see `handle_timeout`).
    progress: u64,
    /// Since when this member has seen no progress, when it has checked.
    stall: Option<Stall>,
    /// Root: how many messages each member's application has taken (the
    /// root's own entry unused).
    taken: Vec<u64>,
    /// Root: messages every member's application has taken, as reported.
    delivered: u64,
    /// Root: how many messages each member's application has persisted;
    /// receiver: its own count, in the entry of rank 0.
    persisted: Vec<u64>,
    /// Root: messages every member's application has persisted, as reported.
    all_persisted: u64,
    /// Receiver: since when a delivered message waits for the application.
    unread: Option<Unread>,
    /// Receiver: the first failure another member reported after this one
    /// acknowledged the close (moot while the root's verdict can come; the
    /// cause this member fails with if it is cut off from the root).
    heard: Option<Failure>,
}

impl GroupMember {
    /// A new member; on a non-root it immediately arms for the first message.
    pub fn new(config: MemberConfig) -> Result<Self, ScheduleError> {
        let valid = match config.block_size {
            BlockSize::Fixed(size) => size > 0,
            BlockSize::Automatic { min, max } => min > 0 && min <= max,
        };
        assert!(valid, "block sizes must be positive");
        assert!(
            (1..=READY_WINDOW).contains(&config.ready_window),
            "the ready window must be 1..={READY_WINDOW}"
        );
        let schedule = match &config.topology {
            Some(topology) if topology.group_size() == config.group_size => {
                NodeSchedule::with_topology(config.algorithm, topology, config.rank)?
            }
            Some(topology) => {
                return Err(ScheduleError::TopologySize {
                    topology: topology.group_size(),
                    group_size: config.group_size,
                });
            }
            None => NodeSchedule::new(config.algorithm, config.group_size, config.rank)?,
        };
        let mut neighbour = vec![false; config.group_size];
        for peer in schedule.connections() {
            neighbour[peer] = true;
        }
        let first = schedule.first_block();
        let mut member = GroupMember {
            ready: vec![0; config.group_size],
            riding: vec![0; config.group_size],
            neighbour,
            first,
            armed: false,
            queued: VecDeque::new(),
            next_seq: 0,
            completed: 0,
            consumed: 0,
            app_closed: false,
            all_delivered: false,
            current: None,
            closing: None,
            phase: Phase::Open,
            actions: VecDeque::new(),
            progress: 0,
            stall: None,
            taken: vec![0; config.group_size],
            delivered: 0,
            persisted: vec![0; config.group_size],
            all_persisted: 0,
            unread: None,
            heard: None,
            schedule,
            config,
        };
        member.arm();
        Ok(member)
    }

    /// The members this one exchanges blocks with (its schedule's
    /// connections), by rank, in increasing order.
    pub fn connections(&self) -> Vec<Rank> {
        (0..self.neighbour.len())
            .filter(|&r| self.neighbour[r])
            .collect()
    }

    /// This member's configuration.
    pub fn config(&self) -> &MemberConfig {
        &self.config
    }

    /// Whether this member is the root.
    pub fn is_root(&self) -> bool {
        self.config.rank == 0
    }

    /// Whether this member holds the block its schedule sends next, with no
    /// send outstanding, and only waits for the target's ready-for-block
    /// (the papers' "waiting" state).
    pub fn waiting_for_ready(&self) -> bool {
        let Some(cur) = self.current.as_ref() else {
            return false;
        };
        if cur.sending.is_some() {
            return false;
        }
        let next = self
            .schedule
            .next_outgoing(cur.blocks, cur.send_step)
            .map(|(_, t)| t);
        next.is_some_and(|t| (self.is_root() || cur.received[t.block]) && self.ready[t.peer] == 0)
    }

    /// Number of messages completed locally so far.
    pub fn completed(&self) -> u64 {
        self.completed
    }

    /// The failure, once the group failed.
    pub fn failure(&self) -> Option<&Failure> {
        match &self.phase {
            Phase::Failed(f) => Some(f),
            _ => None,
        }
    }

    /// Whether the group reached a terminal state (closed or failed).
    pub fn is_finished(&self) -> bool {
        !matches!(self.phase, Phase::Open)
    }

    /// Next action for the driver, in order.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Root: queue a `size`-byte message; returns its sequence number.
    /// Messages are transferred one after another in submission order.
    pub fn submit(&mut self, size: u64) -> Result<u64, MemberError> {
        self.enqueue(size, false)
    }

    /// Root: queue a `size`-byte batch of small messages that the driver
    /// packed into one transfer (its blocks carry [`BATCH_FLAG`], so that
    /// every receiver's driver splits it again); returns its sequence
    /// number. Like [`submit`](Self::submit) otherwise: the core counts the
    /// batch as one message. At most [`MemberConfig::max_batch`] bytes.
    pub fn submit_batch(&mut self, size: u64) -> Result<u64, MemberError> {
        match self.config.max_batch {
            None => Err(MemberError::NoBatches),
            Some(max) if size > max => Err(MemberError::TooLarge { size, max }),
            Some(_) => self.enqueue(size, true),
        }
    }

    /// Root: whether a message of `size` bytes would be accepted now
    /// (the checks of [`submit`](Self::submit), without queueing it).
    pub fn check_submit(&self, size: u64) -> Result<(), MemberError> {
        if !self.is_root() {
            return Err(MemberError::NotRoot);
        }
        self.check_open()?;
        if self.closing.is_some() {
            return Err(MemberError::Closed);
        }
        let max = self.config.max_message_size.min(BATCH_FLAG - 1);
        if size > max {
            return Err(MemberError::TooLarge { size, max });
        }
        if self.next_seq >= MAX_MESSAGES {
            return Err(MemberError::TooManyMessages);
        }
        Ok(())
    }

    fn enqueue(&mut self, size: u64, batch: bool) -> Result<u64, MemberError> {
        self.check_submit(size)?;
        self.progress += 1;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queued.push_back((seq, size, batch));
        if self.current.is_none() {
            self.start_next();
        }
        Ok(seq)
    }

    /// A block arrived from `from` into the receive posted for it, carrying
    /// `immediate` (the message size) and `len` bytes.
    pub fn handle_block(&mut self, from: Rank, immediate: u64, len: usize) {
        if self.is_finished() {
            return;
        }
        self.progress += 1;
        let Some(cur) = self.current.as_mut() else {
            self.first_block(from, immediate, len);
            return;
        };
        if cur.expected.is_empty() {
            return self.violation(from, "a block arrived when none was expected");
        }
        // Each peer's blocks come in the order their receives were posted.
        let Some(index) = cur.expected.iter().position(|(_, t)| t.peer == from) else {
            return self.violation(from, "a block arrived from the wrong member");
        };
        let (_, expected) = cur.expected[index];
        if immediate != cur.immediate() {
            return self.violation(from, "the message size changed between blocks");
        }
        if len != block_len(cur.size, cur.block_size, expected.block) {
            return self.violation(from, "a block has the wrong length");
        }
        if std::mem::replace(&mut cur.received[expected.block], true) {
            return self.violation(from, "a block arrived twice");
        }
        cur.num_received += 1;
        cur.expected.remove(index);
        cur.nearly_done = false;
        tracing::trace!(
            rank = self.config.rank,
            seq = cur.seq,
            block = expected.block,
            from,
            "block received"
        );
        self.release_if_done(expected.block);
        self.expect_next_block();
        self.try_send();
        self.check_complete();
    }

    /// The outstanding block send to `to` completed.
    pub fn handle_send_complete(&mut self, to: Rank) {
        if self.is_finished() {
            return;
        }
        self.progress += 1;
        let block = match self.current.as_mut() {
            Some(cur) if cur.sending == Some(to) => {
                cur.sending = None;
                cur.sends_left[cur.sending_block] -= 1;
                cur.sending_block
            }
            _ => return self.violation(to, "a send completed that was not outstanding"),
        };
        tracing::trace!(rank = self.config.rank, to, "block send complete");
        self.release_if_done(block);
        self.try_send();
        self.check_complete();
    }

    /// A control message arrived from `from`.
    pub fn handle_control(&mut self, from: Rank, control: Control) {
        if from >= self.config.group_size || from == self.config.rank {
            // Not a member: the driver routes by membership, so this is its bug.
            return;
        }
        if self.is_finished() {
            return;
        }
        self.progress += 1;
        match control {
            Control::ReadyForBlock => {
                if !self.neighbour[from] {
                    return self.violation(from, "ready-for-block from a non-neighbour");
                }
                if usize::from(self.ready[from]) >= READY_WINDOW {
                    return self.violation(from, "more ready-for-blocks than the window allows");
                }
                self.ready[from] += 1;
                tracing::trace!(
                    rank = self.config.rank,
                    from,
                    ready = self.ready[from],
                    "ready-for-block"
                );
                self.try_send();
                self.check_complete();
            }
            Control::Close { messages } => {
                if from != 0 || self.is_root() {
                    return self.violation(from, "close from a non-root");
                }
                if self.closing.is_some() {
                    return self.violation(from, "close sent twice");
                }
                if messages < self.completed {
                    return self.violation(from, "close count below messages already received");
                }
                if messages > MAX_MESSAGES {
                    return self.violation(from, "impossible close count");
                }
                self.closing = Some(Closing {
                    total: messages,
                    acked: vec![false],
                });
                if self.completed == messages && self.current.is_none() {
                    // Nothing more will come: the armed first-block receive is moot.
                    self.armed = false;
                }
                self.check_close();
            }
            Control::CloseAck => {
                let Some(closing) = self.closing.as_mut().filter(|_| self.config.rank == 0) else {
                    return self.violation(from, "close acknowledged before close");
                };
                if std::mem::replace(&mut closing.acked[from], true) {
                    return self.violation(from, "close acknowledged twice");
                }
                self.check_close();
            }
            Control::Closed => {
                let acked = self.closing.as_ref().is_some_and(|c| c.acked[0]);
                if from != 0 || !acked {
                    return self.violation(from, "closed before every member acknowledged");
                }
                self.phase = Phase::Closed;
                self.actions.push_back(Action::Closed);
            }
            Control::Taken { messages } => self.handle_taken(from, messages),
            Control::Persisted { messages } => self.handle_persisted(from, messages),
            Control::Suspect { suspect } => {
                if !self.is_root() || suspect == 0 || suspect >= self.config.group_size {
                    return self.violation(from, "a suspicion the root alone takes, of a receiver");
                }
                self.handle_peer_failure(Some(suspect));
            }
            Control::Failed {
                suspect,
                kind,
                detector,
            } => self.handle_report(from, suspect, kind, detector),
        }
    }

    /// Non-root: post the first-block receive for the next message and tell
    /// its sender we are ready.
    ///
    /// Not while a message is in progress, once the close count is reached,
    /// or while the receive window is full.
    fn arm(&mut self) {
        let done = self
            .closing
            .as_ref()
            .is_some_and(|c| self.completed >= c.total);
        let window_full = self
            .config
            .receive_window
            .is_some_and(|w| self.completed - self.consumed >= w);
        if self.armed || self.current.is_some() || done || window_full {
            return;
        }
        if let Some(first) = self.first {
            self.armed = true;
            self.actions
                .push_back(Action::PostFirstBlockRecv { from: first.peer });
            self.control(first.peer, Control::ReadyForBlock);
        }
    }

    /// Non-root: the first block of a new message arrived in the bounce
    /// buffer, carrying `immediate` (its size, and whether it is a batch).
    fn first_block(&mut self, from: Rank, immediate: u64, len: usize) {
        let first = match self.first {
            Some(first) if self.armed && from == first.peer => first,
            _ => return self.violation(from, "a first block arrived that was not asked for"),
        };
        if self.app_closed {
            // The application said it took everything it will take.
            return self.fail_closed_unread();
        }
        if self
            .closing
            .as_ref()
            .is_some_and(|c| self.completed >= c.total)
        {
            return self.violation(from, "a message arrived after the close count");
        }
        let batch = immediate & BATCH_FLAG != 0;
        let size = immediate & !BATCH_FLAG;
        if size > self.config.max_message_size {
            return self.violation(from, "announced message size exceeds the limit");
        }
        if batch && self.config.max_batch.is_none_or(|max| size > max) {
            return self.violation(from, "a batch the group does not allow");
        }
        let bs = self.block_size_of(size);
        let blocks = block_count(size, bs);
        let block = first.block.min(blocks - 1);
        if len != block_len(size, bs, block) {
            return self.violation(from, "the first block has the wrong length");
        }
        self.armed = false;
        let steps = self.schedule.total_steps(blocks);
        // The schedule's first incoming transfer for this k is the first block
        // (checked by the schedule tests).
        let first_step = self.schedule.next_incoming(blocks, 0).map(|(s, _)| s);
        debug_assert_eq!(
            first_step.and_then(|s| self.schedule.incoming(blocks, s)),
            Some(Transfer {
                peer: first.peer,
                block
            })
        );
        let mut received = vec![false; blocks];
        received[block] = true;
        let seq = self.completed;
        tracing::trace!(
            rank = self.config.rank,
            seq,
            size,
            blocks,
            block,
            from,
            "first block received"
        );
        self.actions.push_back(Action::BeginMessage {
            seq,
            size,
            first_block: block,
            first_block_len: len,
            block_size: bs,
            batch,
        });
        let mut progress = self.new_progress(seq, size, batch, bs);
        progress.post_cursor = first_step.map_or(steps, |s| s + 1);
        progress.received = received;
        progress.num_received = 1;
        self.current = Some(progress);
        self.release_if_done(block);
        self.expect_next_block();
        self.try_send();
        self.check_complete();
    }

    /// Post the next receives of the schedule, in step order, and send
    /// their ready-for-blocks: at most the ready window
    /// ([`MemberConfig::ready_window`]) ahead and, with
    /// [`Announce::OneSender`], all from one sender: the next receive from
    /// another sender is announced only once every block announced to the
    /// current one has arrived. With [`Announce::AnySender`], at least
    /// half the window at a time ([`MemberConfig::announce_batch`]; or all
    /// that are left).
    ///
    /// # Why no window, announce rule or timing can stall a message
    ///
    /// Every transfer of the schedule has a step, and everything it waits
    /// for belongs to earlier steps. Take the earliest step `t` with a
    /// transfer not yet done (its block received and its send completed),
    /// say from `p` to `q`:
    /// * `p` holds the block: it arrived at an earlier step (or `p` is the
    ///   root). `p`'s sends go out in step order, one at a time, and those
    ///   before `t` are done, so this send is `p`'s next one.
    /// * `q` has posted its receive: every incoming transfer of `q` before
    ///   `t` arrived, so `t`'s is the earliest one not received. The
    ///   posted receives are always the earliest not received, in step
    ///   order; `q` posts whenever fewer than the window are posted (with
    ///   `AnySender`, once at most `window - batch` are: in particular when
    ///   none are), so the front of its posted receives is `t`'s. With
    ///   `OneSender` the front is always announced at once.
    /// * `q`'s ready-for-block for it reached `p`: it was sent when posted,
    ///   or it rides in front of `q`'s next block to `p` at a step before
    ///   `t` ([`sends_to_before`]), a transfer that is done. A sender's
    ///   ready-for-blocks from one peer are counted, not named, and used in
    ///   step order by its sends to that peer, in the order the peer posted
    ///   them, so those of earlier steps were used by earlier sends.
    ///
    /// So `p` sends, the block arrives (the transport delivers what a
    /// receive was posted for), the send completes, and the earliest
    /// undone step moves on. What the window holds back is only ever a
    /// later step's, so it cannot close a cycle. A driver must not hold
    /// ready-for-blocks back and release them in another order than the
    /// member emits them: riding announcements are emitted later than
    /// announcements of later steps, and a driver that narrowed the
    /// window by releasing them first come, first served deadlocked the
    /// binomial pipeline (the window belongs here, in the member).
    fn expect_next_block(&mut self) {
        let one_sender = self.config.announce == Announce::OneSender;
        let window = self.config.ready_window;
        let batch = self.config.announce_batch();
        let cur = self.current.as_mut().expect("a message is in progress");
        let bs = cur.block_size;
        if !one_sender && cur.expected.len() > window - batch {
            // Whoever sends: top the window up only in batches, so what is
            // announced to one sender can travel as one signal.
            return;
        }
        while cur.expected.len() < window {
            let next = self.schedule.next_incoming(cur.blocks, cur.post_cursor);
            let Some((step, t)) = next else {
                cur.post_cursor = cur.steps;
                return;
            };
            if one_sender && cur.expected.back().is_some_and(|(_, e)| e.peer != t.peer) {
                // Another sender: it may send only once the current one's
                // blocks are here (no two blocks ever share our port), or
                // its one block has little enough left to arrive.
                let early = cur.nearly_done && cur.expected.len() == 1;
                if !early {
                    return;
                }
                cur.nearly_done = false;
            }
            cur.post_cursor = step + 1;
            cur.expected.push_back((step, t));
            self.actions.push_back(Action::PostRecv {
                from: t.peer,
                seq: cur.seq,
                offset: t.block * bs,
                len: block_len(cur.size, bs, t.block),
            });
            if !one_sender && sends_to_before(&self.schedule, cur, t.peer, step) {
                // Announced in the frame of our next block to that peer,
                // which leaves before it needs this.
                self.riding[t.peer] += 1;
                continue;
            }
            self.actions.push_back(Action::SendControl {
                to: t.peer,
                control: Control::ReadyForBlock,
            });
        }
    }

    /// The block size of a `size`-byte message: the group's policy, for
    /// this schedule and the transport's send completion (its topology's
    /// buffered sends), the same at every member.
    fn block_size_of(&self, size: u64) -> usize {
        let buffered = self
            .config
            .topology
            .as_ref()
            .is_some_and(|t| t.buffered_sends());
        self.config
            .block_size
            .for_message_over(&self.schedule, size, buffered)
    }

    /// Message `seq` (`size` bytes in blocks of `block_size`; a batch or
    /// not) before any of its blocks moved here: nothing sent, received,
    /// posted or expected (a receiver then marks the first block it has).
    fn new_progress(&self, seq: u64, size: u64, batch: bool, block_size: usize) -> MessageProgress {
        let blocks = block_count(size, block_size);
        let steps = self.schedule.total_steps(blocks);
        MessageProgress {
            seq,
            size,
            batch,
            block_size,
            blocks,
            steps,
            send_step: 0,
            sending: None,
            sending_block: 0,
            sends_left: self.sends_per_block(blocks, steps),
            expected: VecDeque::new(),
            post_cursor: 0,
            nearly_done: false,
            received: Vec::new(),
            num_received: 0,
        }
    }

    /// Root: begin the next queued message, if any.
    fn start_next(&mut self) {
        let Some((seq, size, batch)) = self.queued.pop_front() else {
            return;
        };
        let progress = self.new_progress(seq, size, batch, self.block_size_of(size));
        let blocks = progress.blocks;
        tracing::trace!(
            rank = self.config.rank,
            seq,
            size,
            blocks,
            "message started"
        );
        self.current = Some(progress);
        // Blocks the root never sends (a group of one) are done at once.
        for block in 0..blocks {
            self.release_if_done(block);
        }
        self.try_send();
        self.check_complete();
    }

    /// Issue the next send of the schedule if its block is here and its
    /// target is ready; at most one block send is outstanding.
    fn try_send(&mut self) {
        let is_root = self.is_root();
        let Some(cur) = self.current.as_mut() else {
            return;
        };
        let bs = cur.block_size;
        if cur.sending.is_some() {
            return;
        }
        cur.send_step = self
            .schedule
            .next_outgoing(cur.blocks, cur.send_step)
            .map_or(cur.steps, |(s, _)| s);
        let Some(t) = self
            .schedule
            .outgoing(cur.blocks, cur.send_step)
            .filter(|_| cur.send_step < cur.steps)
        else {
            return;
        };
        if (!is_root && !cur.received[t.block]) || self.ready[t.peer] == 0 {
            return;
        }
        self.ready[t.peer] -= 1;
        cur.sending = Some(t.peer);
        cur.sending_block = t.block;
        cur.send_step += 1;
        tracing::trace!(
            rank = self.config.rank,
            seq = cur.seq,
            block = t.block,
            to = t.peer,
            "block send"
        );
        for _ in 0..std::mem::take(&mut self.riding[t.peer]) {
            self.actions.push_back(Action::SendControl {
                to: t.peer,
                control: Control::ReadyForBlock,
            });
        }
        self.actions.push_back(Action::SendBlock {
            to: t.peer,
            seq: cur.seq,
            offset: t.block * bs,
            len: block_len(cur.size, bs, t.block),
            immediate: cur.immediate(),
        });
    }

    /// Complete the current message once all its sends and receives are done.
    fn check_complete(&mut self) {
        let Some(cur) = self.current.as_ref() else {
            return;
        };
        let sends_done = cur.sending.is_none()
            && self
                .schedule
                .next_outgoing(cur.blocks, cur.send_step)
                .is_none();
        if !sends_done || (!self.is_root() && cur.num_received < cur.blocks) {
            return;
        }
        debug_assert!(
            self.riding.iter().all(|&n| n == 0),
            "every held-back ready-for-block rode a block sent before the end"
        );
        let seq = cur.seq;
        tracing::debug!(seq, size = cur.size, "message complete");
        self.current = None;
        self.completed += 1;
        self.actions.push_back(Action::MessageComplete { seq });
        if self.is_root() {
            self.check_delivered();
            self.check_persisted();
            self.start_next();
        } else {
            self.arm();
        }
        self.check_close();
    }
}

/// Whether this member's schedule for `cur` sends `peer` a block it has
/// not begun to send yet (one not before `cur.send_step`) at a step before
/// `step`, the step of a transfer from `peer` whose receive is announced
/// now: then the announcement can ride in that block's frame
/// ([`Announce::AnySender`]). Over TCP a ready-for-block sent alone is a
/// packet of its own on the receiver's uplink (about 90 bytes with the
/// TCP/IP headers, a quarter of the announcements in the binomial
/// pipeline), one that rides costs its 24 bytes.
///
/// It cannot hold the group up: the ride leaves at an earlier step than
/// the transfer waiting for it, and what that ride waits for (its block,
/// the peer's announcement of it) belongs to earlier steps still, so no
/// chain of waits comes back to this one. In the binomial pipeline the
/// peer also still holds announcements for the blocks it sends before it.
fn sends_to_before(
    schedule: &NodeSchedule,
    cur: &MessageProgress,
    peer: Rank,
    step: usize,
) -> bool {
    let mut at = cur.send_step;
    while let Some((s, t)) = schedule.next_outgoing(cur.blocks, at) {
        if s >= step {
            return false;
        }
        if t.peer == peer {
            return true;
        }
        at = s + 1;
    }
    false
}
