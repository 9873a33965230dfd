//! Carrying out what the state machines ask, checked against the model:
//! every action a member or a rendezvous emits is checked as it is carried
//! out, and puts its packet, signal or receive on the modelled links.

use super::*;

impl Cluster {
    /// Drain `rank`'s actions, checking and carrying out each one.
    pub(super) fn drain(&mut self, rank: Rank) {
        let now = Duration::from_nanos(self.clock);
        if let Some(member) = self.nodes[rank].member.as_mut() {
            member.handle_timeout(now);
        }
        while let Some(action) = self.nodes[rank]
            .member
            .as_mut()
            .and_then(GroupMember::poll_action)
        {
            self.apply(rank, action);
        }
        let node = &mut self.nodes[rank];
        if node.creating() && node.closed > 0 {
            // The group closed before the last Join arrived here.
            node.rendezvous.handle_group_closed(GROUP);
            self.drive_rendezvous(rank);
        } else if node.creating() && node.member.as_ref().is_some_and(GroupMember::is_finished) {
            // The group failed before every member joined: so does its
            // creation, and the node drops the group (as the runtime does).
            let failure = node.member.as_ref().and_then(|m| m.failure().cloned());
            self.log(format_args!("{rank}: creation failed with the group"));
            self.drop_group(rank);
            (self.nodes[rank].rendezvous).handle_group_ended(GROUP, failure.as_ref());
            self.drive_rendezvous(rank);
        }
    }

    /// `rank` drops the group: its member and posted receives are gone, and
    /// nothing of the group reaches it any more but its rendezvous's signals.
    fn drop_group(&mut self, rank: Rank) {
        self.nodes[rank].member = None;
        self.nodes[rank].bounce_posted = false;
        for peer in 0..self.n {
            let inbound = self.link(peer, rank);
            self.links[inbound].posted.clear();
        }
    }

    /// Carry out `rank`'s rendezvous actions, as the runtime's actor does.
    pub(super) fn drive_rendezvous(&mut self, rank: Rank) {
        while let Some(action) = self.nodes[rank].rendezvous.poll_action() {
            self.log(format_args!("  {rank}: {action:?}"));
            match action {
                RendezvousAction::SendJoin { to, summary, .. } => {
                    self.send_signal(rank, to, Signal::Join(summary));
                }
                RendezvousAction::SendJoinRejected { to, summary, .. } => {
                    self.send_signal(rank, to, Signal::JoinRejected(summary));
                }
                RendezvousAction::SendIdInUse { to, .. } => {
                    self.send_signal(rank, to, Signal::IdInUse);
                }
                RendezvousAction::SendControl { to, control, .. } => {
                    self.send_signal(rank, to, Signal::Group(control));
                }
                RendezvousAction::DeliverEarly { from, control, .. } => {
                    let from = self.rank_of(from);
                    if let Some(member) = self.nodes[rank].member.as_mut() {
                        member.handle_control(from, control);
                        self.drain(rank);
                    }
                }
                RendezvousAction::Ready { .. } => {
                    // The member's own actions first: it may have failed,
                    // which fails the creation instead.
                    self.drain(rank);
                    if self.nodes[rank].creating() {
                        self.nodes[rank].ready = true;
                        if rank == 0 {
                            for op in std::mem::take(&mut self.at_ready) {
                                self.root_op(op);
                            }
                        }
                    }
                }
                RendezvousAction::CreateFailed { failure, .. } => {
                    if !self.nodes[rank].creating() {
                        self.bug(format_args!(
                            "{rank}: creation failed ({failure:?}) while not in progress"
                        ));
                    }
                    self.nodes[rank].create_failure = Some(failure);
                    self.drop_group(rank);
                }
                RendezvousAction::PeerRefused { peer, .. } => {
                    let peer = self.rank_of(peer);
                    if let Some(member) = self.nodes[rank].member.as_mut() {
                        member.handle_peer_failure(Some(peer));
                        self.drain(rank);
                    }
                }
            }
        }
    }

    fn rank_of(&self, node: NodeId) -> Rank {
        let rank = node.0 as usize;
        if rank >= self.n {
            self.bug(format_args!("{node:?} is no member"));
        }
        rank
    }

    /// Put `signal` on the link `from → to`.
    fn send_signal(&mut self, from: Rank, to: NodeId, signal: Signal) {
        let to = self.rank_of(to);
        self.check_peer(from, to);
        let l = self.link(from, to);
        self.links[l].signals.push_back(signal);
        self.touch(Kind::Signal, l);
    }

    /// Check `me`'s action against the model and carry it out.
    fn apply(&mut self, me: Rank, action: Action) {
        self.log(format_args!("  {me}: {action:?}"));
        if self.nodes[me].terminal() {
            self.bug(format_args!(
                "member {me} acted after its terminal event: {action:?}"
            ));
        }
        match action {
            Action::PostFirstBlockRecv { from } => {
                self.check_peer(me, from);
                let node = &mut self.nodes[me];
                if node.bounce_posted || node.bounce_landed.is_some() {
                    self.bug(format_args!(
                        "member {me} posted the bounce buffer while it is in use"
                    ));
                }
                node.bounce_posted = true;
                let l = self.link(from, me);
                self.links[l].posted.push_back(Region::Bounce);
                self.links[l].posted_total += 1;
            }
            Action::BeginMessage {
                seq,
                size,
                first_block,
                first_block_len,
                block_size,
                ..
            } => self.begin_message(me, seq, size, first_block, first_block_len, block_size),
            Action::PostRecv {
                from,
                seq,
                offset,
                len,
            } => self.post_recv(me, from, seq, offset, len),
            Action::SendBlock {
                to,
                seq,
                offset,
                len,
                immediate,
            } => self.send_block(me, to, seq, offset, len, immediate),
            Action::SendControl { to, control } => self.send_control(me, to, control),
            Action::MessageComplete { seq } => self.complete_message(me, seq),
            Action::ReleaseBlock { seq, offset, len } => self.release_block(me, seq, offset, len),
            Action::MessageDelivered { seq } => self.announced(me, seq, false),
            Action::MessagePersisted { seq } => self.announced(me, seq, true),
            Action::AllDelivered => self.all_delivered(me),
            Action::Closed => self.check_closed(me),
            Action::Failed(failure) => {
                self.nodes[me].failures.push(failure);
            }
        }
    }

    /// A receiver begins a message: the first block it landed in the bounce
    /// buffer moves into the message's new buffer.
    fn begin_message(
        &mut self,
        me: Rank,
        seq: u64,
        size: u64,
        first_block: usize,
        first_block_len: usize,
        block_size: usize,
    ) {
        let bs = self.message_block_size(size);
        if block_size != bs {
            self.bug(format_args!(
                "member {me} began #{seq} ({size} bytes) in blocks of {block_size}, \
                 the group's choice is {bs}"
            ));
        }
        let node = &self.nodes[me];
        if me == 0 {
            self.bug(format_args!("the root began a message"));
        }
        if seq != node.completed || node.buffers.contains_key(&seq) {
            self.bug(format_args!(
                "member {me} began message {seq} out of order (delivered {})",
                node.completed
            ));
        }
        let Some(true_size) = self.messages.get(seq as usize).map(|m| m.len() as u64) else {
            self.bug(format_args!("member {me} began message {seq} never sent"));
        };
        if size != true_size || seq >= self.submitted {
            self.bug(format_args!(
                "member {me} began message {seq} with size {size}, root sent {true_size}"
            ));
        }
        let offset = first_block * bs;
        let Some((len, pseq, poffset)) = node.bounce_landed else {
            self.bug(format_args!(
                "member {me} began a message with an empty bounce buffer"
            ));
        };
        if len != first_block_len
            || pseq != seq
            || poffset != offset
            || first_block_len != block_len(size, bs, first_block)
            || first_block >= block_count(size, bs)
        {
            self.bug(format_args!(
                "member {me}: bounce buffer holds {len} bytes at {poffset} of #{pseq}, \
                 BeginMessage says block {first_block} ({first_block_len} bytes) of #{seq}"
            ));
        }
        let size = size as usize;
        let mut buf = Buffer {
            data: vec![0; size],
            received: vec![false; size],
            posted: vec![false; size],
        };
        let node = &mut self.nodes[me];
        buf.data[offset..offset + len].copy_from_slice(&node.bounce[..len]);
        buf.received[offset..offset + len].fill(true);
        buf.posted[offset..offset + len].fill(true);
        node.buffers.insert(seq, buf);
        node.bounce_landed = None;
    }

    /// A receive posted into a message's buffer.
    fn post_recv(&mut self, me: Rank, from: Rank, seq: u64, offset: usize, len: usize) {
        self.check_peer(me, from);
        let Some(buf) = self.nodes[me].buffers.get(&seq) else {
            self.bug(format_args!(
                "member {me} posted a receive into message {seq}, which has no buffer"
            ));
        };
        if offset + len > buf.data.len() || buf.posted[offset..offset + len].contains(&true) {
            self.bug(format_args!(
                "member {me} posted {offset}..{} of message {seq} ({} bytes): \
                 out of range or posted twice",
                offset + len,
                buf.data.len()
            ));
        }
        let buf = self.nodes[me].buffers.get_mut(&seq).expect("checked");
        buf.posted[offset..offset + len].fill(true);
        let l = self.link(from, me);
        self.links[l]
            .posted
            .push_back(Region::Message { seq, offset, len });
        self.links[l].posted_total += 1;
    }

    /// A block sent: its bytes, as the sender holds them, go on the link.
    fn send_block(
        &mut self,
        me: Rank,
        to: Rank,
        seq: u64,
        offset: usize,
        len: usize,
        immediate: u64,
    ) {
        self.check_peer(me, to);
        let bytes = if me == 0 {
            if seq >= self.submitted {
                self.bug(format_args!("the root sent message {seq}, never submitted"));
            }
            let msg = &self.messages[seq as usize];
            if offset + len > msg.len() || immediate != msg.len() as u64 {
                self.bug(format_args!(
                    "the root sent {offset}..{} of message {seq} ({} bytes) \
                     with immediate {immediate}",
                    offset + len,
                    msg.len()
                ));
            }
            msg[offset..offset + len].to_vec()
        } else {
            let Some(buf) = self.nodes[me].buffers.get(&seq) else {
                self.bug(format_args!(
                    "member {me} sent from message {seq}, not held"
                ));
            };
            if offset + len > buf.data.len() || immediate != buf.data.len() as u64 {
                self.bug(format_args!(
                    "member {me} sent {offset}..{} of message {seq} ({} bytes) \
                     with immediate {immediate}",
                    offset + len,
                    buf.data.len()
                ));
            }
            if buf.received[offset..offset + len].contains(&false) {
                self.bug(format_args!(
                    "member {me} sent {offset}..{} of message {seq} before receiving it",
                    offset + len
                ));
            }
            buf.data[offset..offset + len].to_vec()
        };
        if self.nodes[me].released.contains(&(seq, offset)) {
            self.bug(format_args!(
                "member {me} sent block {offset} of message {seq} after releasing it"
            ));
        }
        self.nodes[me].sends.push((to, seq, offset));
        let l = self.link(me, to);
        if self.links[l].sent_total >= self.links[l].ready_delivered {
            self.bug(format_args!(
                "member {me} sent a block to {to} before {to} said it was ready"
            ));
        }
        self.links[l].sent_total += 1;
        self.links[l].data.push_back(Packet {
            seq,
            offset,
            bytes,
            immediate,
        });
        self.touch(Kind::Data, l);
    }

    /// A control message sent; a ready-for-block is checked against the
    /// receives posted and the announce rule.
    fn send_control(&mut self, me: Rank, to: Rank, control: Control) {
        self.check_peer(me, to);
        if control == Control::ReadyForBlock {
            // Every ready-for-block stands for one receive posted
            // before it on the link it invites data on.
            let inbound = self.link(to, me);
            // One sender at a time holds the receiver's readiness:
            // no block announced to another peer is still to come.
            for other in (0..self.nodes.len()).filter(|&p| p != to && p != me) {
                let link = &self.links[self.link(other, me)];
                if self.announce == Announce::OneSender && link.ready_sent > link.arrived {
                    self.bug(format_args!(
                        "member {me} told {to} it is ready while {} block(s) it \
                         announced to {other} have not arrived",
                        link.ready_sent - link.arrived
                    ));
                }
            }
            // Whoever sends, never more than a window announced.
            let outstanding: u64 = (0..self.nodes.len())
                .filter(|&p| p != me)
                .map(|p| {
                    let link = &self.links[self.link(p, me)];
                    link.ready_sent - link.arrived
                })
                .sum();
            if outstanding >= READY_WINDOW as u64 {
                self.bug(format_args!(
                    "member {me} told {to} it is ready with {outstanding} block(s) \
                     announced that have not arrived"
                ));
            }
            let link = &mut self.links[inbound];
            link.ready_sent += 1;
            if link.ready_sent > link.posted_total {
                self.bug(format_args!(
                    "member {me} told {to} it is ready before posting the receive"
                ));
            }
        }
        self.send_signal(me, NodeId(to as u32), Signal::Group(control));
    }

    /// A message complete here: every block released, no send of it
    /// outstanding, a receiver's copy whole and right.
    fn complete_message(&mut self, me: Rank, seq: u64) {
        let node = &self.nodes[me];
        if seq != node.completed {
            self.bug(format_args!(
                "member {me} completed message {seq}, expected {}",
                node.completed
            ));
        }
        let bs = self.message_block_size(self.messages[seq as usize].len() as u64);
        let blocks = block_count(self.messages[seq as usize].len() as u64, bs);
        let released = node.released.range((seq, 0)..=(seq, usize::MAX)).count();
        if released != blocks {
            self.bug(format_args!(
                "member {me} completed message {seq} with {released} of its {blocks} \
                 blocks released"
            ));
        }
        if node.sends.iter().any(|&(_, s, _)| s == seq) {
            self.bug(format_args!(
                "member {me} completed message {seq} with a send of it outstanding"
            ));
        }
        if me != 0 {
            let Some(buf) = self.nodes[me].buffers.remove(&seq) else {
                self.bug(format_args!(
                    "member {me} delivered message {seq} it never began"
                ));
            };
            if buf.received.contains(&false) || buf.posted.contains(&false) {
                self.bug(format_args!(
                    "member {me} delivered message {seq} before all its bytes arrived"
                ));
            }
            if buf.data != self.messages[seq as usize] {
                self.bug(format_args!(
                    "member {me} delivered message {seq} with the wrong bytes"
                ));
            }
        }
        self.nodes[me].completed += 1;
    }

    /// A block released: one this member holds, once, with no send of it
    /// outstanding.
    fn release_block(&mut self, me: Rank, seq: u64, offset: usize, len: usize) {
        let node = &self.nodes[me];
        let size = self.messages.get(seq as usize).map_or(0, Vec::len);
        let bs = self.message_block_size(size as u64);
        let here = if me == 0 {
            seq < self.submitted
        } else {
            node.buffers.get(&seq).is_some_and(|b| {
                offset + len <= b.data.len() && !b.received[offset..offset + len].contains(&false)
            })
        };
        if !here || !offset.is_multiple_of(bs) || len != block_len(size as u64, bs, offset / bs) {
            self.bug(format_args!(
                "member {me} released {offset}..{} of message {seq}, not a block it holds",
                offset + len
            ));
        }
        if node.sends.iter().any(|&(_, s, o)| s == seq && o == offset) {
            self.bug(format_args!(
                "member {me} released block {offset} of message {seq} with a send of it \
                 outstanding"
            ));
        }
        if !self.nodes[me].released.insert((seq, offset)) {
            self.bug(format_args!(
                "member {me} released block {offset} of message {seq} twice"
            ));
        }
    }

    /// The root announced message `seq` as taken (`MessageDelivered`) or
    /// persisted (`MessagePersisted`) by every receiver's application: it
    /// must be the next one so announced, complete at the root, and so at
    /// every receiver.
    fn announced(&mut self, me: Rank, seq: u64, persisted: bool) {
        let what = if persisted { "persisted" } else { "taken" };
        // The root's count of those announced; a receiver's own.
        let root = |node: &Node| {
            if persisted {
                node.persisted
            } else {
                node.delivered
            }
        };
        let app = |node: &Node| {
            if persisted {
                node.persisted
            } else {
                node.taken
            }
        };
        let node = &self.nodes[me];
        if me != 0 || seq != root(node) || seq >= node.completed {
            self.bug(format_args!(
                "member {me}: message {seq} announced {what} ({} announced, {} completed)",
                root(node),
                node.completed
            ));
        }
        if let Some(rank) = (1..self.n).find(|&r| app(&self.nodes[r]) <= seq) {
            self.bug(format_args!(
                "the root announced message {seq} {what} by everyone, member {rank}'s \
                 application {what} {}",
                app(&self.nodes[rank])
            ));
        }
        let node = &mut self.nodes[0];
        *if persisted {
            &mut node.persisted
        } else {
            &mut node.delivered
        } += 1;
    }

    /// A receiver delivered every message up to the close count.
    fn all_delivered(&mut self, me: Rank) {
        let node = &self.nodes[me];
        if me == 0 || node.stream_ended {
            self.bug(format_args!(
                "member {me}: AllDelivered twice or on the root"
            ));
        }
        if !self.close_called || node.completed != self.submitted {
            self.bug(format_args!(
                "member {me}: AllDelivered with {} of {} messages (root closed: {})",
                node.completed, self.submitted, self.close_called
            ));
        }
        self.nodes[me].stream_ended = true;
    }

    /// The group closed here: every application took every message and
    /// closed, and every member has every message.
    fn check_closed(&mut self, me: Rank) {
        for (rank, node) in self.nodes.iter().enumerate().skip(1) {
            // "Closed" means every receiver's application took every
            // message and closed: the root's vouches for everyone, a
            // receiver's for itself.
            if (me == 0 || rank == me) && (!node.app_closed || node.taken != self.submitted) {
                self.bug(format_args!(
                    "member {me} closed while the application of {rank} took {} of {} \
                     messages (closed: {})",
                    node.taken, self.submitted, node.app_closed
                ));
            }
        }
        if !self.close_called {
            self.bug(format_args!(
                "member {me} closed, but the root never closed"
            ));
        }
        if me == 0 && self.nodes[0].persisted != self.submitted {
            self.bug(format_args!(
                "the root closed with {} of {} messages announced as persisted by everyone \
                 (each application persisted all it took before it closed)",
                self.nodes[0].persisted, self.submitted
            ));
        }
        if me == 0 && self.nodes[0].delivered != self.submitted {
            self.bug(format_args!(
                "the root closed with {} of {} messages announced as taken by everyone",
                self.nodes[0].delivered, self.submitted
            ));
        }
        for (rank, node) in self.nodes.iter().enumerate() {
            // The root's Closed vouches for everyone (a crashed member
            // included: it acknowledged before it crashed); a
            // receiver's for itself.
            if (me == 0 || rank == me) && node.completed != self.submitted {
                self.bug(format_args!(
                    "member {me} closed while member {rank} has {} of {} messages",
                    node.completed, self.submitted
                ));
            }
        }
        self.nodes[me].closed += 1;
    }

    fn check_peer(&self, me: Rank, peer: Rank) {
        if peer == me || peer >= self.n {
            self.bug(format_args!("member {me} addressed rank {peer}"));
        }
    }
}
