//! What `sideway` does not wrap yet: arming a CQ for a notification and
//! reading and acknowledging the completion channel's events
//! (`ibv_req_notify_cq`, `ibv_get_cq_event`, `ibv_ack_cq_events`, from
//! `rdma-mummy-sys`, the bindings `sideway` is built on).

use std::os::fd::{AsRawFd, RawFd};
use std::ptr;
use std::sync::Arc;

use sideway::ibverbs::completion::{BasicCompletionQueue, CompletionChannel, CompletionQueue};

/// The node's CQ and its completion channel, for arming and reading
/// events. The channel's fd is non-blocking (set when it was opened).
pub(super) struct Notifier {
    cq: Arc<BasicCompletionQueue>,
    channel: Arc<CompletionChannel>,
}

impl AsRawFd for Notifier {
    fn as_raw_fd(&self) -> RawFd {
        self.channel.as_raw_fd()
    }
}

impl Notifier {
    pub(super) fn new(cq: Arc<BasicCompletionQueue>, channel: Arc<CompletionChannel>) -> Self {
        Notifier { cq, channel }
    }

    /// Ask for an event on the channel at the CQ's next completion.
    pub(super) fn arm(&self) -> std::io::Result<()> {
        // SAFETY: the CQ is alive (we hold an `Arc` to it) and was created
        // with this channel; arming any number of times is allowed.
        let ret = unsafe { rdma_mummy_sys::ibv_req_notify_cq(self.cq.cq().as_ptr(), 0) };
        if ret == 0 {
            Ok(())
        } else {
            Err(std::io::Error::from_raw_os_error(ret))
        }
    }

    /// Read every event the channel holds and acknowledge them in one
    /// batch; how many there were. Never blocks (the fd is non-blocking).
    pub(super) fn take_events(&self) -> usize {
        let mut events = 0u32;
        loop {
            let mut cq = ptr::null_mut();
            let mut context = ptr::null_mut();
            // SAFETY: the channel is alive (we hold an `Arc`), its fd is
            // non-blocking, and the out-pointers are live locals.
            let ret = unsafe {
                rdma_mummy_sys::ibv_get_cq_event(
                    self.channel.comp_channel().as_ptr(),
                    &mut cq,
                    &mut context,
                )
            };
            if ret != 0 {
                break; // EAGAIN: nothing more
            }
            events += 1;
        }
        if events > 0 {
            // SAFETY: the CQ is alive; it is the channel's only CQ, so all
            // `events` were its events, each acknowledged exactly once here
            // (which `ibv_destroy_cq` waits for).
            unsafe { rdma_mummy_sys::ibv_ack_cq_events(self.cq.cq().as_ptr(), events) };
        }
        events as usize
    }
}
