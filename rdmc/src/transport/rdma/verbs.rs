//! The verbs objects a node owns, on `sideway`: the device context, the
//! protection domain, the one completion queue and its completion channel,
//! queue pairs and memory registrations — and the typed errors of opening
//! them.

use std::sync::Arc;

use sideway::ibverbs::AccessFlags;
use sideway::ibverbs::address::{AddressHandleAttribute, Gid, GidEntry, GidType};
use sideway::ibverbs::completion::{
    BasicCompletionQueue, CompletionChannel, GenericCompletionQueue,
};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, Mtu};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    BasicQueuePair, QueuePair, QueuePairAttribute, QueuePairState, QueuePairType,
};

use super::DeviceOptions;

/// Why the `rdma` transport could not start on this machine: the errors
/// [`Node::rdma`](crate::Node::rdma) reports as
/// [`Error::Rdma`](crate::Error::Rdma), before any peer is contacted.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RdmaError {
    /// No RDMA device at all: libibverbs is not installed, or no device
    /// (not even Soft-RoCE's `rxe`) is configured.
    #[error("no RDMA device: {0}")]
    NoDevice(String),
    /// The configured device is not among the machine's devices.
    #[error("no RDMA device named {wanted:?} (found: {found:?})")]
    DeviceNotFound {
        /// The device asked for.
        wanted: String,
        /// The devices there are.
        found: Vec<String>,
    },
    /// The port or GID index does not exist or is not usable.
    #[error("device {device} port {port} GID index {gid_index}: {reason}")]
    BadPort {
        /// The device.
        device: String,
        /// The port.
        port: u8,
        /// The GID index.
        gid_index: u8,
        /// What is wrong.
        reason: String,
    },
    /// A verbs call failed (resources, permissions, the device's state).
    #[error("{call}: {reason}")]
    Verbs {
        /// The call.
        call: &'static str,
        /// The error it returned.
        reason: String,
    },
}

/// A failed verbs call, as an [`RdmaError::Verbs`].
pub(super) fn verbs_err(call: &'static str, e: impl std::fmt::Display) -> RdmaError {
    // Walk the source chain: sideway's errors say little at the top.
    RdmaError::Verbs {
        call,
        reason: e.to_string(),
    }
}

/// What one side of a queue pair tells the other to connect to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct QpAddress {
    pub(super) qpn: u32,
    pub(super) psn: u32,
    pub(super) lid: u16,
    pub(super) gid: [u8; 16],
}

impl QpAddress {
    pub(super) const LEN: usize = 26;

    pub(super) fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        out[..4].copy_from_slice(&self.qpn.to_be_bytes());
        out[4..8].copy_from_slice(&self.psn.to_be_bytes());
        out[8..10].copy_from_slice(&self.lid.to_be_bytes());
        out[10..].copy_from_slice(&self.gid);
        out
    }

    pub(super) fn decode(b: &[u8; Self::LEN]) -> Self {
        QpAddress {
            qpn: u32::from_be_bytes(b[..4].try_into().expect("4 bytes")),
            psn: u32::from_be_bytes(b[4..8].try_into().expect("4 bytes")),
            lid: u16::from_be_bytes(b[8..10].try_into().expect("2 bytes")),
            gid: b[10..].try_into().expect("16 bytes"),
        }
    }
}

/// The device a node runs on, opened: context, protection domain, the
/// node's one CQ and its completion channel. Fields drop in order: the CQ
/// before the channel, everything before the context (sideway's handles
/// hold `Arc`s to what they need, so this order is also enforced).
pub(crate) struct Device {
    pub(super) cq: Arc<BasicCompletionQueue>,
    pub(super) channel: Arc<CompletionChannel>,
    pub(super) pd: Arc<ProtectionDomain>,
    pub(super) _ctx: Arc<DeviceContext>,
    pub(super) name: String,
    pub(super) port: u8,
    pub(super) gid_index: u8,
    pub(super) lid: u16,
    pub(super) gid: Gid,
    pub(super) mtu: Mtu,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("name", &self.name)
            .field("port", &self.port)
            .finish()
    }
}

/// The GID index to use on `port` when none is configured: the first RoCE
/// v2 GID holding an IPv4 address (what a RoCE network routes), else the
/// first RoCE v2 GID, else 0 (InfiniBand, whose GID 0 is the port's).
fn choose_gid(ctx: &DeviceContext, port: u8) -> u8 {
    let Ok(table) = ctx.query_gid_table() else {
        return 0;
    };
    let on_port = || {
        table
            .iter()
            .filter(|e| e.port_num() == u32::from(port) && e.gid_type() == GidType::RoceV2)
    };
    let ipv4 = |e: &&GidEntry| e.gid().raw[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
    on_port()
        .find(ipv4)
        .or_else(|| on_port().next())
        .and_then(|e| u8::try_from(e.gid_index()).ok())
        .unwrap_or(0)
}

/// Names of the machine's RDMA devices, or why there are none.
pub(crate) fn device_names() -> Result<Vec<String>, RdmaError> {
    let list = DeviceList::new().map_err(|e| RdmaError::NoDevice(error_chain(&e)))?;
    let names: Vec<String> = list.iter().map(|d| d.name()).collect();
    if names.is_empty() {
        return Err(RdmaError::NoDevice("the device list is empty".into()));
    }
    Ok(names)
}

impl Device {
    /// Open the configured device with a CQ of `cqe` entries.
    pub(super) fn open(options: &DeviceOptions, cqe: u32) -> Result<Self, RdmaError> {
        let list = DeviceList::new().map_err(|e| RdmaError::NoDevice(error_chain(&e)))?;
        let found: Vec<String> = list.iter().map(|d| d.name()).collect();
        let device = match &options.device {
            Some(wanted) => list.iter().find(|d| &d.name() == wanted).ok_or_else(|| {
                RdmaError::DeviceNotFound {
                    wanted: wanted.clone(),
                    found: found.clone(),
                }
            })?,
            None => list
                .iter()
                .next()
                .ok_or_else(|| RdmaError::NoDevice("the device list is empty".into()))?,
        };
        let name = device.name();
        let ctx = device.open().map_err(|e| verbs_err("ibv_open_device", e))?;
        let port = options.port;
        let gid_index = match options.gid_index {
            Some(index) => index,
            None => choose_gid(&ctx, port),
        };
        let bad_port = |reason: String| RdmaError::BadPort {
            device: name.clone(),
            port,
            gid_index,
            reason,
        };
        let port_attr = ctx
            .query_port(port)
            .map_err(|e| bad_port(format!("ibv_query_port: {e}")))?;
        let gid = ctx
            .query_gid(port, u32::from(gid_index))
            .map_err(|e| bad_port(format!("ibv_query_gid: {e}")))?;
        if gid.is_zero() && port_attr.lid() == 0 {
            return Err(bad_port("neither a GID nor a LID to be reached at".into()));
        }
        let pd = ctx.alloc_pd().map_err(|e| verbs_err("ibv_alloc_pd", e))?;
        let channel =
            CompletionChannel::new(&ctx).map_err(|e| verbs_err("ibv_create_comp_channel", e))?;
        channel
            .set_nonblocking(true)
            .map_err(|e| verbs_err("O_NONBLOCK on the completion channel", e))?;
        let cq = ctx
            .create_cq_builder()
            .setup_cqe(cqe)
            .setup_comp_channel(&channel, 0)
            .build()
            .map_err(|e| verbs_err("ibv_create_cq", e))?;
        Ok(Device {
            mtu: port_attr.active_mtu(),
            lid: port_attr.lid(),
            cq,
            channel,
            pd,
            _ctx: ctx,
            name,
            port,
            gid_index,
            gid,
        })
    }

    /// A new RC queue pair on the node's CQ, in the INIT state.
    pub(super) fn create_qp(&self, send_wr: u32, recv_wr: u32) -> Result<Qp, RdmaError> {
        let cq = GenericCompletionQueue::from(Arc::clone(&self.cq));
        let mut qp = self
            .pd
            .create_qp_builder()
            .setup_qp_type(QueuePairType::ReliableConnection)
            .setup_max_send_wr(send_wr)
            .setup_max_recv_wr(recv_wr)
            .setup_max_send_sge(1)
            .setup_max_recv_sge(1)
            .setup_send_cq(cq.clone())
            .setup_recv_cq(cq)
            .build()
            .map_err(|e| verbs_err("ibv_create_qp", e))?;
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::Init)
            .setup_pkey_index(0)
            .setup_port(self.port)
            .setup_access_flags(AccessFlags::LocalWrite | AccessFlags::RemoteWrite);
        qp.modify(&attr)
            .map_err(|e| verbs_err("ibv_modify_qp(INIT)", e))?;
        Ok(Qp(qp))
    }

    /// Where a peer reaches `qp`.
    pub(super) fn address(&self, qp: &Qp, psn: u32) -> QpAddress {
        QpAddress {
            qpn: qp.0.qp_number(),
            psn,
            lid: self.lid,
            gid: self.gid.raw,
        }
    }

    /// Move `qp` (INIT, receives posted) to RTR and RTS, connected to
    /// `remote`; `psn` is our first packet sequence number.
    pub(super) fn connect(
        &self,
        qp: &mut Qp,
        psn: u32,
        remote: &QpAddress,
    ) -> Result<(), RdmaError> {
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(self.mtu)
            .setup_dest_qp_num(remote.qpn)
            .setup_rq_psn(remote.psn)
            .setup_max_dest_read_atomic(0)
            // 0.01 ms: a receiver momentarily out of posted receives makes
            // the sender retry soon (a zero timer means 655 ms).
            .setup_min_rnr_timer(1);
        let mut ah = AddressHandleAttribute::new();
        ah.setup_dest_lid(remote.lid)
            .setup_port(self.port)
            .setup_service_level(0);
        let gid = Gid { raw: remote.gid };
        if !gid.is_zero() {
            ah.setup_grh(&gid, 0, self.gid_index, 64, 0);
        }
        attr.setup_address_vector(&ah);
        qp.0.modify(&attr)
            .map_err(|e| verbs_err("ibv_modify_qp(RTR)", error_chain(&e)))?;
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(psn)
            // 4.096 µs · 2^14 ≈ 67 ms per try, 7 tries: a peer whose QP is
            // gone is noticed within about half a second of a send to it.
            .setup_timeout(14)
            .setup_retry_cnt(7)
            // 7: retry forever on receiver-not-ready (a slow re-post).
            .setup_rnr_retry(7)
            .setup_max_read_atomic(0);
        qp.0.modify(&attr)
            .map_err(|e| verbs_err("ibv_modify_qp(RTS)", error_chain(&e)))
    }

    /// Register `len` bytes at `ptr` with `access`.
    ///
    /// # Safety
    /// The memory must stay allocated while the registration lives (and
    /// while any operation posted with it is outstanding).
    pub(super) unsafe fn register(
        &self,
        ptr: *const u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<Mr, RdmaError> {
        // SAFETY: the caller's contract.
        let mr = unsafe { self.pd.reg_mr(ptr as usize, len.max(1), access) }
            .map_err(|e| verbs_err("ibv_reg_mr", error_chain(&e)))?;
        Ok(Mr {
            mr,
            pd: Arc::as_ptr(&self.pd) as usize,
        })
    }

    /// Whether `mr` was registered with this device's protection domain.
    pub(super) fn owns(&self, mr: &Mr) -> bool {
        mr.pd == Arc::as_ptr(&self.pd) as usize
    }
}

/// `e` and its sources, on one line.
pub(super) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// A queue pair to one peer.
#[derive(Debug)]
pub(crate) struct Qp(pub(super) BasicQueuePair);

impl Qp {
    /// Move the QP to the error state: outstanding requests are flushed
    /// (with error completions), and nothing more is sent or received.
    pub(super) fn move_to_error(&mut self) -> Result<(), RdmaError> {
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::Error);
        self.0
            .modify(&attr)
            .map_err(|e| verbs_err("ibv_modify_qp(ERR)", error_chain(&e)))
    }
}

/// A memory registration, and the protection domain it belongs to.
#[derive(Debug)]
pub(crate) struct Mr {
    pub(super) mr: Arc<MemoryRegion>,
    pd: usize,
}

impl Mr {
    pub(super) fn lkey(&self) -> u32 {
        self.mr.lkey()
    }

    pub(super) fn rkey(&self) -> u32 {
        self.mr.rkey()
    }
}
