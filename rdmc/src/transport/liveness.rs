//! Failure detection, shared by the transports: when each peer was last
//! heard from and last sent to, when a heartbeat is due, and which peers
//! have been silent past the failure timeout.
//!
//! Pure: every question takes the current time, so a transport's own loop
//! (the `tcp` link's reader and writer, the `ofi` and `rdma` drivers)
//! decides when to ask. Times are tokio's, so tests with a paused clock see
//! them advance. (The `tcp` link has one peer per reader and writer and
//! waits for its deadlines; the `ofi` and `rdma` drivers check all their
//! peers at once, with [`Liveness::check`].)

// Without `ofi` or `rdma`, nothing checks all its peers at once.
#![cfg_attr(not(any(feature = "ofi", feature = "rdma", test)), allow(dead_code))]

use std::time::Duration;

use tokio::time::Instant;

/// Heartbeats per failure timeout (see [`Liveness::heartbeat_interval`]).
const HEARTBEATS_PER_TIMEOUT: u32 = 16;

/// The failure detector's policy: a peer silent for the failure timeout is
/// down, and heartbeats go to a peer not sent anything for a sixteenth of
/// it, so only a hung peer or a dead path is ever silent that long — and
/// the timeout means what it says: a peer that stops is declared down
/// between 90 % and 100 % of the failure timeout after it stopped (its last
/// heartbeat went out at most a sixteenth of the timeout, plus a check
/// interval where peers are checked all at once, before it stopped), never
/// after a pause noticeably shorter than the timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Liveness {
    failure_timeout: Duration,
}

/// What a node knows of one peer's liveness: when it last heard from the
/// peer, and when it last sent the peer anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PeerClock {
    last_heard: Instant,
    last_sent: Instant,
}

/// The state of one peer at a given time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Heard from lately and sent to lately: nothing to do.
    Alive,
    /// Not sent anything for the heartbeat interval: send a heartbeat.
    HeartbeatDue,
    /// Silent for longer than the failure timeout: the peer is down.
    Silent,
}

/// The peers a [`Liveness::check`] found wanting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Check<K> {
    /// Peers to send a heartbeat to.
    pub(crate) heartbeats: Vec<K>,
    /// Peers silent past the failure timeout: down.
    pub(crate) silent: Vec<K>,
}

impl PeerClock {
    /// A peer just connected at `now`: heard from and sent to.
    pub(crate) fn new(now: Instant) -> Self {
        PeerClock {
            last_heard: now,
            last_sent: now,
        }
    }

    /// Something came from the peer at `now`.
    pub(crate) fn heard(&mut self, now: Instant) {
        self.last_heard = self.last_heard.max(now);
    }

    /// Something went to the peer at `now`.
    pub(crate) fn sent(&mut self, now: Instant) {
        self.last_sent = self.last_sent.max(now);
    }
}

impl Liveness {
    /// A detector that declares a peer down after `failure_timeout` of silence.
    pub(crate) fn new(failure_timeout: Duration) -> Self {
        Liveness { failure_timeout }
    }

    /// How long a peer may be silent before it is down.
    pub(crate) fn failure_timeout(&self) -> Duration {
        self.failure_timeout
    }

    /// How long a peer may go without anything from us before it gets a
    /// heartbeat: a sixteenth of the failure timeout. Silence after our
    /// last heartbeat counts towards the timeout before anything is wrong,
    /// so the interval must be short for the timeout to mean what it says
    /// (with a third, a peer paused for two thirds of the timeout could be
    /// declared down); a 32-byte heartbeat every 190 ms (3 s timeout) costs
    /// nothing.
    pub(crate) fn heartbeat_interval(&self) -> Duration {
        self.failure_timeout / HEARTBEATS_PER_TIMEOUT
    }

    /// How often a loop that checks all its peers at once should check:
    /// often enough that a heartbeat is never late by more than half its
    /// interval (at least every millisecond, not more often).
    pub(crate) fn check_interval(&self) -> Duration {
        (self.failure_timeout / (2 * HEARTBEATS_PER_TIMEOUT)).max(Duration::from_millis(1))
    }

    /// When the peer of `clock` will have been silent too long, unless
    /// heard from before.
    pub(crate) fn silence_deadline(&self, clock: &PeerClock) -> Instant {
        clock.last_heard + self.failure_timeout
    }

    /// When the peer of `clock` is due a heartbeat, unless sent something
    /// before.
    pub(crate) fn heartbeat_due_at(&self, clock: &PeerClock) -> Instant {
        clock.last_sent + self.heartbeat_interval()
    }

    /// The state of the peer of `clock` at `now`.
    pub(crate) fn verdict(&self, clock: &PeerClock, now: Instant) -> Verdict {
        if now.saturating_duration_since(clock.last_heard) > self.failure_timeout {
            Verdict::Silent
        } else if now.saturating_duration_since(clock.last_sent) >= self.heartbeat_interval() {
            Verdict::HeartbeatDue
        } else {
            Verdict::Alive
        }
    }

    /// The verdicts on `peers` at `now`: which need a heartbeat, which are
    /// down.
    pub(crate) fn check<'a, K: 'a>(
        &self,
        now: Instant,
        peers: impl IntoIterator<Item = (K, &'a PeerClock)>,
    ) -> Check<K> {
        let mut check = Check {
            heartbeats: Vec::new(),
            silent: Vec::new(),
        };
        for (peer, clock) in peers {
            match self.verdict(clock, now) {
                Verdict::Alive => {}
                Verdict::HeartbeatDue => check.heartbeats.push(peer),
                Verdict::Silent => check.silent.push(peer),
            }
        }
        check
    }

    /// Why a silent peer is down, for the logs.
    pub(crate) fn silence_reason(&self) -> String {
        format!("silent for {:?}", self.failure_timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(3);
    /// A sixteenth of [`TIMEOUT`].
    const HEARTBEAT: Duration = Duration::from_micros(187_500);

    #[test]
    fn a_peer_is_alive_then_due_a_heartbeat_then_silent() {
        let liveness = Liveness::new(TIMEOUT);
        let start = Instant::now();
        let clock = PeerClock::new(start);
        assert_eq!(liveness.verdict(&clock, start), Verdict::Alive);
        let at = |d: Duration| start + d;
        assert_eq!(
            liveness.verdict(&clock, at(HEARTBEAT - Duration::from_micros(1))),
            Verdict::Alive
        );
        assert_eq!(
            liveness.verdict(&clock, at(HEARTBEAT)),
            Verdict::HeartbeatDue
        );
        // Exactly the timeout is not yet silent; past it is.
        assert_eq!(liveness.verdict(&clock, at(TIMEOUT)), Verdict::HeartbeatDue);
        assert_eq!(
            liveness.verdict(&clock, at(TIMEOUT + Duration::from_millis(1))),
            Verdict::Silent
        );
        assert_eq!(liveness.silence_deadline(&clock), at(TIMEOUT));
        assert_eq!(liveness.heartbeat_due_at(&clock), at(HEARTBEAT));
    }

    #[test]
    fn hearing_and_sending_reset_their_own_clocks_only() {
        let liveness = Liveness::new(TIMEOUT);
        let start = Instant::now();
        let mut clock = PeerClock::new(start);
        clock.sent(start + Duration::from_secs(2));
        // Sending does not make a silent peer heard.
        let late = start + TIMEOUT + Duration::from_millis(1);
        assert_eq!(liveness.verdict(&clock, late), Verdict::Silent);
        clock.heard(start + Duration::from_secs(2));
        assert_eq!(liveness.verdict(&clock, late), Verdict::HeartbeatDue);
        assert_eq!(
            liveness.verdict(&clock, start + Duration::from_millis(2100)),
            Verdict::Alive
        );
        assert_eq!(
            liveness.heartbeat_due_at(&clock),
            start + Duration::from_secs(2) + HEARTBEAT
        );
        // Hearing does not stand in for a heartbeat.
        clock.heard(start + Duration::from_secs(4));
        assert_eq!(
            liveness.verdict(&clock, start + Duration::from_secs(4)),
            Verdict::HeartbeatDue
        );
        // Times never go backwards.
        clock.heard(start);
        assert_eq!(
            liveness.silence_deadline(&clock),
            start + Duration::from_secs(4) + TIMEOUT
        );
    }

    #[test]
    fn a_check_sorts_the_peers() {
        let liveness = Liveness::new(TIMEOUT);
        let start = Instant::now();
        let fresh = PeerClock::new(start + Duration::from_secs(4));
        let idle = PeerClock::new(start + Duration::from_secs(2));
        let gone = PeerClock::new(start);
        let now = start + Duration::from_secs(4);
        let check = liveness.check(now, [(1, &fresh), (2, &idle), (3, &gone), (4, &idle)]);
        assert_eq!(
            check,
            Check {
                heartbeats: vec![2, 4],
                silent: vec![3],
            }
        );
    }

    #[test]
    fn intervals_derive_from_the_failure_timeout() {
        let liveness = Liveness::new(TIMEOUT);
        assert_eq!(liveness.failure_timeout(), TIMEOUT);
        assert_eq!(liveness.heartbeat_interval(), HEARTBEAT);
        assert_eq!(liveness.check_interval(), HEARTBEAT / 2);
        let tiny = Liveness::new(Duration::from_micros(600));
        assert_eq!(tiny.check_interval(), Duration::from_millis(1));
        assert_eq!(liveness.silence_reason(), "silent for 3s");
    }

    /// When a peer that sends heartbeats as the policy says, and that the
    /// other side checks as the `tcp` link does (a timer on the silence
    /// deadline) or as the `ofi` driver does (a check every check
    /// interval), stops at `stop` for `pause`: whether and when it is
    /// declared down. Runs on tokio's paused clock.
    async fn declared_down(stop: Duration, pause: Duration, all_at_once: bool) -> Option<Duration> {
        let liveness = Liveness::new(TIMEOUT);
        let start = Instant::now();
        let (beats, mut heard) = tokio::sync::mpsc::unbounded_channel::<()>();
        // The peer: a heartbeat whenever one is due, except while paused.
        let peer = tokio::spawn(async move {
            let mut clock = PeerClock::new(start);
            loop {
                let now = Instant::now();
                if now >= start + stop && now < start + stop + pause {
                    tokio::time::sleep_until(start + stop + pause).await;
                    continue;
                }
                if beats.send(()).is_err() {
                    return;
                }
                clock.sent(now);
                tokio::time::sleep_until(liveness.heartbeat_due_at(&clock)).await;
            }
        });
        let mut clock = PeerClock::new(start);
        let end = start + stop + pause + 2 * TIMEOUT;
        let mut next_check = start;
        let down = loop {
            let now = Instant::now();
            if now >= end {
                break None;
            }
            let wake = if all_at_once {
                if now >= next_check {
                    next_check = now + liveness.check_interval();
                    if liveness.check(now, [(0, &clock)]).silent == [0] {
                        break Some(now);
                    }
                }
                next_check
            } else {
                if liveness.verdict(&clock, now) == Verdict::Silent {
                    break Some(now);
                }
                // Just past the deadline: exactly at it is not yet silent.
                liveness.silence_deadline(&clock) + Duration::from_micros(1)
            };
            tokio::select! {
                Some(()) = heard.recv() => clock.heard(Instant::now()),
                () = tokio::time::sleep_until(wake.min(end)) => {}
            }
        };
        peer.abort();
        down.map(|at| at - (start + stop))
    }

    #[tokio::test(start_paused = true)]
    async fn the_failure_timeout_means_what_it_says() {
        for all_at_once in [false, true] {
            // Stops at various phases of the heartbeat cycle.
            for stop in (0..16).map(|i| Duration::from_millis(5_000 + 37 * i)) {
                let short = TIMEOUT.mul_f64(0.9);
                assert_eq!(
                    declared_down(stop, short, all_at_once).await,
                    None,
                    "a pause of 90 % of the timeout (stop at {stop:?}, checked at once: {all_at_once})"
                );
                let long = TIMEOUT.mul_f64(1.1);
                let after = declared_down(stop, long, all_at_once)
                    .await
                    .expect("a pause of 110 % of the timeout is noticed");
                assert!(
                    after >= TIMEOUT.mul_f64(0.9) && after <= TIMEOUT.mul_f64(1.1),
                    "declared down {after:?} after the stop at {stop:?} (checked at once: {all_at_once})"
                );
            }
        }
    }
}
