//! Hand-written declarations of the C shim (`shim.c`), which wraps the
//! libfabric calls the transport uses. The structs mirror the shim's flat
//! structs field by field (`#[repr(C)]`); libfabric's own structs never
//! cross the boundary, so its version does not matter here.

use std::ffi::{c_char, c_int, c_void};

/// `FI_EAGAIN`: try again (queue full, or nothing to read).
pub(crate) const FI_EAGAIN: i32 = 11;
/// `FI_EAVAIL`: an error completion or event is waiting.
pub(crate) const FI_EAVAIL: i32 = 259;
/// `FI_ENODATA`: no provider matches.
pub(crate) const FI_ENODATA: i32 = 61;
/// `FI_ECANCELED`: the operation was flushed (endpoint closed).
pub(crate) const FI_ECANCELED: i32 = 125;

/// `FI_REMOTE_CQ_DATA` completion flag: `data` carries the peer's value.
pub(crate) const FI_REMOTE_CQ_DATA: u64 = 1 << 17;

/// Memory-registration mode bits, as the shim maps them.
pub(crate) const MR_LOCAL: u32 = 1 << 0;
pub(crate) const MR_VIRT_ADDR: u32 = 1 << 1;
/// Always met (only allocated memory is registered); named for the mapping.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) const MR_ALLOCATED: u32 = 1 << 2;
pub(crate) const MR_PROV_KEY: u32 = 1 << 3;
pub(crate) const MR_OTHER: u32 = 1 << 4;
/// Operation mode bits, as the shim maps them.
/// Always met (every operation carries an `fi_context`); named for the mapping.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) const MODE_CONTEXT: u32 = 1 << 0;
pub(crate) const MODE_RX_CQ_DATA: u32 = 1 << 1;
pub(crate) const MODE_OTHER: u32 = 1 << 2;

/// EQ event kinds (`rdmc_eqe::event`).
pub(crate) const EV_CONNREQ: u32 = 1;
pub(crate) const EV_CONNECTED: u32 = 2;
pub(crate) const EV_SHUTDOWN: u32 = 3;
pub(crate) const EV_ERROR: u32 = 4;

/// `struct fi_info` (opaque).
#[repr(C)]
pub(crate) struct FiInfo {
    _opaque: [u8; 0],
}

/// `struct rdmc_info`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct InfoSummary {
    pub(crate) mr_mode: u32,
    pub(crate) mode: u32,
    pub(crate) raw_mr_mode: u64,
    pub(crate) raw_mode: u64,
    pub(crate) cq_data_size: u64,
    pub(crate) tx_size: u64,
    pub(crate) rx_size: u64,
    pub(crate) max_msg_size: u64,
    pub(crate) mr_key_size: u64,
    pub(crate) thread_safe: i32,
    pub(crate) provider: [c_char; 64],
    pub(crate) fabric: [c_char; 128],
    pub(crate) domain: [c_char; 128],
}

/// `struct rdmc_cqe`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cqe {
    pub(crate) op_context: *mut c_void,
    pub(crate) flags: u64,
    pub(crate) len: u64,
    pub(crate) data: u64,
}

/// `struct rdmc_cqerr`.
#[repr(C)]
pub(crate) struct CqErr {
    pub(crate) op_context: *mut c_void,
    pub(crate) flags: u64,
    pub(crate) err: i32,
    pub(crate) prov_errno: i32,
    pub(crate) message: [c_char; 160],
}

/// `struct rdmc_eqe`.
#[repr(C)]
pub(crate) struct Eqe {
    pub(crate) event: u32,
    pub(crate) fid_context: *mut c_void,
    pub(crate) info: *mut FiInfo,
    pub(crate) data_len: u64,
    pub(crate) err: i32,
}

unsafe extern "C" {
    pub(crate) fn rdmc_getinfo(
        provider: *const c_char,
        node: *const c_char,
        out: *mut *mut FiInfo,
        summary: *mut InfoSummary,
    ) -> c_int;
    pub(crate) fn rdmc_info_force_strict_mr(info: *mut FiInfo);
    pub(crate) fn rdmc_freeinfo(info: *mut FiInfo);
    pub(crate) fn rdmc_strerror(err: c_int) -> *const c_char;
    pub(crate) fn rdmc_close(fid: *mut c_void) -> c_int;
    pub(crate) fn rdmc_fabric_domain(
        info: *mut FiInfo,
        fabric: *mut *mut c_void,
        domain: *mut *mut c_void,
    ) -> c_int;
    pub(crate) fn rdmc_eq_open(fabric: *mut c_void, eq: *mut *mut c_void, fd: *mut c_int) -> c_int;
    pub(crate) fn rdmc_cq_open(
        domain: *mut c_void,
        size: u64,
        cq: *mut *mut c_void,
        fd: *mut c_int,
    ) -> c_int;
    pub(crate) fn rdmc_pep_open(
        fabric: *mut c_void,
        info: *mut FiInfo,
        eq: *mut c_void,
        pep: *mut *mut c_void,
        name: *mut c_void,
        namelen: *mut usize,
    ) -> c_int;
    pub(crate) fn rdmc_ep_open(
        domain: *mut c_void,
        info: *mut FiInfo,
        dest: *const c_void,
        dest_len: usize,
        eq: *mut c_void,
        cq: *mut c_void,
        context: *mut c_void,
        ep: *mut *mut c_void,
    ) -> c_int;
    pub(crate) fn rdmc_connect(
        ep: *mut c_void,
        addr: *const c_void,
        param: *const c_void,
        len: usize,
    ) -> c_int;
    pub(crate) fn rdmc_accept(ep: *mut c_void) -> c_int;
    pub(crate) fn rdmc_reject(pep: *mut c_void, info: *mut FiInfo) -> c_int;
    pub(crate) fn rdmc_shutdown(ep: *mut c_void) -> c_int;
    pub(crate) fn rdmc_mr_reg(
        domain: *mut c_void,
        buf: *mut c_void,
        len: usize,
        access: u64,
        requested_key: u64,
        mr: *mut *mut c_void,
        desc: *mut *mut c_void,
        key: *mut u64,
    ) -> c_int;
    pub(crate) fn rdmc_access_local() -> u64;
    pub(crate) fn rdmc_access_remote_write() -> u64;
    pub(crate) fn rdmc_access_source() -> u64;
    pub(crate) fn rdmc_recv(
        ep: *mut c_void,
        buf: *mut c_void,
        len: usize,
        desc: *mut c_void,
        context: *mut c_void,
    ) -> isize;
    pub(crate) fn rdmc_send(
        ep: *mut c_void,
        buf: *const c_void,
        len: usize,
        desc: *mut c_void,
        context: *mut c_void,
    ) -> isize;
    pub(crate) fn rdmc_writedata(
        ep: *mut c_void,
        buf: *const c_void,
        len: usize,
        desc: *mut c_void,
        data: u64,
        addr: u64,
        key: u64,
        context: *mut c_void,
    ) -> isize;
    pub(crate) fn rdmc_cq_read(cq: *mut c_void, out: *mut Cqe, count: usize) -> isize;
    pub(crate) fn rdmc_cq_readerr(cq: *mut c_void, out: *mut CqErr) -> isize;
    pub(crate) fn rdmc_eq_read(
        eq: *mut c_void,
        out: *mut Eqe,
        data: *mut c_void,
        cap: usize,
    ) -> isize;
    pub(crate) fn rdmc_trywait(fabric: *mut c_void, cq: *mut c_void, eq: *mut c_void) -> c_int;
}
