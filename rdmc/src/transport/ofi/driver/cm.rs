//! libfabric's connection manager, as both the start-up and the driver
//! (letting a restarted peer back in) use it: the connection data a
//! connection request carries, the events of the event queue, and opening,
//! connecting and accepting a peer's endpoints.

use std::ptr;
use std::sync::Arc;

use super::{CTRL_RECVS, ControlPool, DATA_RECVS, Fid, ep_token, post_ctrl_recv, post_data_recv};
use crate::ids::NodeId;
use crate::transport::ofi::fabric::{Domain, OfiError, check};
use crate::transport::ofi::ffi;

/// Connection data magic and version.
const CONN_MAGIC: [u8; 4] = *b"RDMC";
const CONN_VERSION: u8 = 1;
const CONN_LEN: usize = 28;

/// A node's data (`false`) or control (`true`) endpoint to a peer.
pub(crate) type EndpointKey = (NodeId, bool);

/// What a connection request carries: whether it is for the control
/// endpoint, who asks, and the token the asked node issued it.
pub(crate) fn conn_data(kind_ctrl: bool, from: NodeId, token: &[u8; 16]) -> [u8; CONN_LEN] {
    let mut out = [0u8; CONN_LEN];
    out[..4].copy_from_slice(&CONN_MAGIC);
    out[4] = CONN_VERSION;
    out[5] = u8::from(kind_ctrl);
    out[8..12].copy_from_slice(&from.0.to_le_bytes());
    out[12..28].copy_from_slice(token);
    out
}

/// (is-control, from, token) of valid connection data.
pub(crate) fn parse_conn_data(data: &[u8]) -> Option<(bool, NodeId, [u8; 16])> {
    if data.len() < CONN_LEN || data[..4] != CONN_MAGIC || data[4] != CONN_VERSION {
        return None;
    }
    let ctrl = match data[5] {
        0 => false,
        1 => true,
        _ => return None,
    };
    let from = NodeId(u32::from_le_bytes(data[8..12].try_into().ok()?));
    Some((ctrl, from, data[12..28].try_into().ok()?))
}

/// A connection request's `fi_info`, freed on drop.
pub(crate) struct ConnReqInfo(pub(crate) *mut ffi::FiInfo);

// SAFETY: plain heap data owned by this value alone.
unsafe impl Send for ConnReqInfo {}

impl Drop for ConnReqInfo {
    fn drop(&mut self) {
        // SAFETY: the connreq's info, ours to free, freed only here.
        unsafe { ffi::rdmc_freeinfo(self.0) };
    }
}

/// An endpoint the event is about: the peer, whether it is the control
/// endpoint, and the generation of the peer's endpoints.
pub(crate) type EndpointOf = (NodeId, bool, u32);

/// A connection-manager event.
pub(crate) enum Event {
    ConnReq { info: ConnReqInfo, data: Vec<u8> },
    Connected(EndpointOf),
    Down(Option<EndpointOf>, i32),
}

/// The next CM event, if there is one.
pub(crate) fn read_event(eq: &Fid) -> Result<Option<Event>, OfiError> {
    loop {
        // SAFETY: all-zero is a valid value of this plain C struct.
        let mut ev: ffi::Eqe = unsafe { std::mem::zeroed() };
        let mut data = [0u8; 64];
        // SAFETY: the EQ is open; `ev` and `data` are live locals of the
        // sizes given.
        let got = unsafe { ffi::rdmc_eq_read(eq.0, &mut ev, data.as_mut_ptr().cast(), data.len()) };
        if got == -(ffi::FI_EAGAIN as isize) {
            return Ok(None);
        }
        check("fi_eq_read", got as i64)?;
        return Ok(Some(match ev.event {
            ffi::EV_CONNREQ => Event::ConnReq {
                info: ConnReqInfo(ev.info),
                data: data[..(ev.data_len as usize).min(data.len())].to_vec(),
            },
            ffi::EV_CONNECTED => match super::token_peer(ev.fid_context) {
                Some(key) => Event::Connected(key),
                None => continue,
            },
            ffi::EV_SHUTDOWN | ffi::EV_ERROR => {
                Event::Down(super::token_peer(ev.fid_context), ev.err)
            }
            _ => continue,
        }));
    }
}

/// What every endpoint of the node is opened with.
pub(crate) struct Shared<'a> {
    pub(crate) domain: &'a Arc<Domain>,
    pub(crate) eq: &'a Fid,
    pub(crate) cq: &'a Fid,
    pub(crate) pool: &'a ControlPool,
    /// Post zero-length receives on data endpoints (`FI_RX_CQ_DATA`).
    pub(crate) data_recvs: bool,
}

impl Shared<'_> {
    /// Open an endpoint of generation `generation` to `peer`, bound to the
    /// node's queues, with its receives posted: one that will connect to
    /// the passive endpoint at `dest`, or (`None`) one opened from a
    /// connection request's `info`.
    pub(crate) fn open_ep(
        &self,
        info: *mut ffi::FiInfo,
        dest: Option<&[u8]>,
        (peer, ctrl): EndpointKey,
        generation: u32,
    ) -> Result<Fid, OfiError> {
        let mut ep = ptr::null_mut();
        let (dest, dest_len) = dest.map_or((ptr::null(), 0), |d| (d.as_ptr().cast(), d.len()));
        // SAFETY: domain, EQ and CQ are open; `info` is a live fi_info;
        // `dest` is null or `dest_len` live bytes, copied by the call; the
        // context is an integer token, never dereferenced.
        let ret = unsafe {
            ffi::rdmc_ep_open(
                self.domain.domain(),
                info,
                dest,
                dest_len,
                self.eq.0,
                self.cq.0,
                ep_token(peer, ctrl, generation),
                &mut ep,
            )
        };
        check("fi_endpoint", ret.into())?;
        let ep = Fid(ep);
        if ctrl {
            for i in 0..CTRL_RECVS {
                post_ctrl_recv(&ep, self.pool, (peer, generation), i)?;
            }
        } else if self.data_recvs {
            for _ in 0..DATA_RECVS {
                post_data_recv(&ep, (peer, generation))?;
            }
        }
        Ok(ep)
    }

    /// Open an endpoint (generation `generation`) to lower-ranked `peer`
    /// and connect it to the peer's passive endpoint at `addr`, presenting
    /// the peer's `token` as node `me`.
    pub(crate) fn dial(
        &self,
        info: *mut ffi::FiInfo,
        (peer, ctrl): EndpointKey,
        (me, generation): (NodeId, u32),
        (addr, token): (&[u8], &[u8; 16]),
    ) -> Result<Fid, OfiError> {
        let ep = self.open_ep(info, Some(addr), (peer, ctrl), generation)?;
        let data = conn_data(ctrl, me, token);
        // SAFETY: the endpoint is open; `addr` is the peer's fabric address
        // as its fi_getname gave it; `data` outlives the call.
        let ret = unsafe {
            ffi::rdmc_connect(ep.0, addr.as_ptr().cast(), data.as_ptr().cast(), data.len())
        };
        check("fi_connect", ret.into())?;
        Ok(ep)
    }

    /// Open an endpoint (generation `generation`) from a valid connection
    /// request of `from` and accept it.
    pub(crate) fn accept(
        &self,
        req: ConnReqInfo,
        key: EndpointKey,
        generation: u32,
    ) -> Result<Fid, OfiError> {
        let opened = self.open_ep(req.0, None, key, generation);
        drop(req);
        let ep = opened?;
        // SAFETY: the endpoint was opened from this connreq.
        let ret = unsafe { ffi::rdmc_accept(ep.0) };
        check("fi_accept", ret.into())?;
        Ok(ep)
    }
}

/// Reject a connection request on the passive endpoint `pep`.
pub(crate) fn reject(pep: &Fid, req: &ConnReqInfo) {
    // SAFETY: the passive endpoint is open; the info is the connreq's,
    // freed after (by `req`'s drop).
    unsafe { ffi::rdmc_reject(pep.0, req.0) };
}
