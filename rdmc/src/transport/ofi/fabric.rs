//! Thin owned wrappers over the libfabric objects the transport uses: the
//! chosen `fi_info`, the fabric and domain, memory regions. Every `unsafe`
//! call into the shim of this transport is in this file or in
//! `driver.rs`/`setup.rs`, each with its reason.

use std::ffi::{CStr, CString, c_char, c_void};
use std::fmt;
use std::ptr;
use std::sync::Arc;

use super::ffi;

/// A failed libfabric call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{call}: {message} ({code})")]
pub(crate) struct OfiError {
    pub(crate) call: &'static str,
    pub(crate) code: i32,
    pub(crate) message: String,
}

/// The message libfabric gives for an error code.
pub(crate) fn strerror(code: i32) -> String {
    // SAFETY: fi_strerror accepts any code and returns a pointer to a static
    // NUL-terminated string.
    let p = unsafe { ffi::rdmc_strerror(code) };
    if p.is_null() {
        return format!("error {code}");
    }
    // SAFETY: non-null, NUL-terminated and static (see above).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// `Ok` for a zero or positive return, else the error of `call`.
pub(crate) fn check(call: &'static str, ret: i64) -> Result<(), OfiError> {
    if ret >= 0 {
        Ok(())
    } else {
        let code = (-ret) as i32;
        Err(OfiError {
            call,
            code,
            message: strerror(code),
        })
    }
}

fn c_chars(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The modes the transport obeys — what `fi_getinfo` returned (or, in a
/// test, stricter).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Modes {
    /// `FI_MR_LOCAL`: every local buffer needs a registration's descriptor.
    pub(crate) mr_local: bool,
    /// `FI_MR_VIRT_ADDR`: remote addresses are virtual addresses (else
    /// offsets into the registered region).
    pub(crate) virt_addr: bool,
    /// `FI_MR_PROV_KEY`: the provider chooses the keys.
    pub(crate) prov_key: bool,
    /// `FI_RX_CQ_DATA`: a write with remote CQ data consumes a posted receive.
    pub(crate) rx_cq_data: bool,
}

impl Modes {
    /// The modes to obey for what `fi_getinfo` returned (`mr_mode` and
    /// `mode` as the shim maps them), or why this transport cannot.
    pub(crate) fn obey(mr_mode: u32, mode: u32, cq_data_size: u64) -> Result<Self, String> {
        if mr_mode & ffi::MR_OTHER != 0 {
            return Err(
                "it needs memory-registration modes this transport does not \
                        implement (only LOCAL, VIRT_ADDR, ALLOCATED, PROV_KEY)"
                    .into(),
            );
        }
        if mode & ffi::MODE_OTHER != 0 {
            return Err(
                "it needs operation modes this transport does not implement \
                        (only FI_CONTEXT, FI_CONTEXT2, FI_RX_CQ_DATA)"
                    .into(),
            );
        }
        if cq_data_size < 4 {
            return Err(format!(
                "it carries {cq_data_size} bytes of remote CQ data; 4 are needed"
            ));
        }
        // FI_MR_ALLOCATED is always met (only allocated memory is
        // registered), and so are FI_CONTEXT and FI_CONTEXT2 (every
        // operation has room for one).
        Ok(Modes {
            mr_local: mr_mode & ffi::MR_LOCAL != 0,
            virt_addr: mr_mode & ffi::MR_VIRT_ADDR != 0,
            prov_key: mr_mode & ffi::MR_PROV_KEY != 0,
            rx_cq_data: mode & ffi::MODE_RX_CQ_DATA != 0,
        })
    }

    /// The address a peer writes to for `offset` into a registered buffer
    /// starting at `base`: the virtual address under `FI_MR_VIRT_ADDR`,
    /// else the offset into the region.
    pub(crate) fn remote_addr(&self, base: *const u8, offset: usize) -> u64 {
        if self.virt_addr {
            base as u64 + offset as u64
        } else {
            offset as u64
        }
    }
}

/// What `fi_getinfo` chose.
#[derive(Clone, Debug)]
pub(crate) struct Summary {
    pub(crate) provider: String,
    pub(crate) fabric: String,
    pub(crate) domain: String,
    pub(crate) modes: Modes,
    pub(crate) cq_data_size: u64,
    pub(crate) tx_size: u64,
    pub(crate) rx_size: u64,
    pub(crate) thread_safe: bool,
    pub(crate) raw_mr_mode: u64,
    pub(crate) raw_mode: u64,
}

/// An `fi_info` list owned by us (its first entry is the one used).
pub(crate) struct Info {
    ptr: *mut ffi::FiInfo,
    pub(crate) summary: Summary,
}

// SAFETY: the fi_info is plain heap data owned by this value alone; libfabric
// keeps no reference to it, so it may move between threads.
unsafe impl Send for Info {}

impl fmt::Debug for Info {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.summary.fmt(f)
    }
}

impl Info {
    /// `fi_getinfo` for MSG endpoints of `provider` bound to `node`,
    /// requesting verbs-like modes; refuses modes this transport cannot
    /// obey (for example `FI_MSG_PREFIX` or `FI_MR_ENDPOINT`).
    pub(crate) fn get(provider: &str, node: &str) -> Result<Self, OfiError> {
        let provider = CString::new(provider).map_err(|_| invalid("provider name"))?;
        let node = CString::new(node).map_err(|_| invalid("node address"))?;
        let mut ptr = ptr::null_mut();
        // SAFETY: all-zero is a valid value of this plain C struct (integers
        // and char arrays).
        let mut raw: ffi::InfoSummary = unsafe { std::mem::zeroed() };
        // SAFETY: both strings are NUL-terminated and outlive the call; the
        // out-pointers point to live locals.
        let ret =
            unsafe { ffi::rdmc_getinfo(provider.as_ptr(), node.as_ptr(), &mut ptr, &mut raw) };
        check("fi_getinfo", ret.into())?;
        let mut info = Info {
            ptr,
            summary: Summary {
                provider: c_chars(&raw.provider),
                fabric: c_chars(&raw.fabric),
                domain: c_chars(&raw.domain),
                modes: Modes::default(),
                cq_data_size: raw.cq_data_size,
                tx_size: raw.tx_size,
                rx_size: raw.rx_size,
                thread_safe: raw.thread_safe != 0,
                raw_mr_mode: raw.raw_mr_mode,
                raw_mode: raw.raw_mode,
            },
        };
        let modes = Modes::obey(raw.mr_mode, raw.mode, raw.cq_data_size).map_err(|why| {
            unsupported(format!(
                "provider {} (mr_mode {:#x}, mode {:#x}): {why}",
                info.summary.provider, raw.raw_mr_mode, raw.raw_mode
            ))
        })?;
        info.summary.modes = modes;
        Ok(info)
    }

    /// Act as if the provider asked for every verbs-like mode (`FI_MR_LOCAL`,
    /// `FI_MR_VIRT_ADDR`, `FI_MR_PROV_KEY`, `FI_RX_CQ_DATA`), and open the
    /// domain with those MR modes, so the strict code paths run on a lenient
    /// provider. Tests only.
    pub(crate) fn force_strict(&mut self) {
        // SAFETY: `ptr` is the fi_info this value owns; the call only sets bits.
        unsafe { ffi::rdmc_info_force_strict_mr(self.ptr) };
        self.summary.modes = Modes {
            mr_local: true,
            virt_addr: true,
            prov_key: true,
            rx_cq_data: true,
        };
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::FiInfo {
        self.ptr
    }
}

impl Drop for Info {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from fi_getinfo and is freed only here.
        unsafe { ffi::rdmc_freeinfo(self.ptr) };
    }
}

fn invalid(what: &str) -> OfiError {
    OfiError {
        call: "configuration",
        code: 22,
        message: format!("the {what} contains a NUL byte"),
    }
}

fn unsupported(message: String) -> OfiError {
    OfiError {
        call: "fi_getinfo",
        code: 95,
        message,
    }
}

/// A fabric and its domain; closed when the last user (the transport's
/// driver or a memory region) is gone.
pub(crate) struct Domain {
    fabric: *mut c_void,
    domain: *mut c_void,
}

// SAFETY: the domain is opened FI_THREAD_SAFE where the provider offers it
// (tcp does); its handles are plain pointers that libfabric lets any thread use.
unsafe impl Send for Domain {}
// SAFETY: as for Send.
unsafe impl Sync for Domain {}

impl fmt::Debug for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Domain")
    }
}

impl Domain {
    pub(crate) fn open(info: &Info) -> Result<Arc<Self>, OfiError> {
        let (mut fabric, mut domain) = (ptr::null_mut(), ptr::null_mut());
        // SAFETY: `info` is a live fi_info from fi_getinfo; the out-pointers
        // point to live locals.
        let ret = unsafe { ffi::rdmc_fabric_domain(info.as_ptr(), &mut fabric, &mut domain) };
        check("fi_fabric/fi_domain", ret.into())?;
        Ok(Arc::new(Domain { fabric, domain }))
    }

    pub(crate) fn fabric(&self) -> *mut c_void {
        self.fabric
    }

    pub(crate) fn domain(&self) -> *mut c_void {
        self.domain
    }
}

impl Drop for Domain {
    fn drop(&mut self) {
        // SAFETY: both were opened in `open` and are closed only here, after
        // every object opened from them (endpoints, queues and memory
        // regions hold an `Arc` of this domain or are closed first).
        unsafe {
            ffi::rdmc_close(self.domain);
            ffi::rdmc_close(self.fabric);
        }
    }
}

/// A registered memory region; deregistered on drop.
pub(crate) struct Mr {
    mr: *mut c_void,
    desc: *mut c_void,
    key: u64,
    domain: Arc<Domain>,
}

// SAFETY: an MR handle may be used and closed from any thread of a
// thread-safe domain; the descriptor is an opaque token.
unsafe impl Send for Mr {}
// SAFETY: as for Send; no method mutates.
unsafe impl Sync for Mr {}

impl fmt::Debug for Mr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mr").field("key", &self.key).finish()
    }
}

/// What a registration allows.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Access {
    /// Only read, as the source of sends and writes.
    Source,
    /// Local sends, receives and writes from it.
    Local,
    /// That, and remote writes into it.
    LocalAndRemoteWrite,
}

impl Mr {
    /// Register `len` bytes at `ptr` (which stay allocated until this is
    /// dropped — the caller's promise). `key` is used unless the provider
    /// chooses keys.
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay allocated until the returned value is dropped.
    pub(crate) unsafe fn register(
        domain: &Arc<Domain>,
        ptr: *mut u8,
        len: usize,
        access: Access,
        key: u64,
    ) -> Result<Self, OfiError> {
        // SAFETY: the shim's access helpers only return constants.
        let access = unsafe {
            match access {
                Access::Source => ffi::rdmc_access_source(),
                Access::Local => ffi::rdmc_access_local(),
                Access::LocalAndRemoteWrite => {
                    ffi::rdmc_access_local() | ffi::rdmc_access_remote_write()
                }
            }
        };
        let (mut mr, mut desc, mut got) = (ptr::null_mut(), ptr::null_mut(), 0u64);
        // SAFETY: the domain is open; the memory stays allocated while
        // registered (the caller's contract); out-pointers are live locals.
        let ret = unsafe {
            ffi::rdmc_mr_reg(
                domain.domain(),
                ptr.cast(),
                len,
                access,
                key,
                &mut mr,
                &mut desc,
                &mut got,
            )
        };
        check("fi_mr_reg", ret.into())?;
        Ok(Mr {
            mr,
            desc,
            key: got,
            domain: Arc::clone(domain),
        })
    }

    pub(crate) fn desc(&self) -> *mut c_void {
        self.desc
    }

    pub(crate) fn key(&self) -> u64 {
        self.key
    }

    /// Whether this region belongs to `domain`.
    pub(crate) fn in_domain(&self, domain: &Arc<Domain>) -> bool {
        Arc::ptr_eq(&self.domain, domain)
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: opened in `register`, closed only here; the domain is kept
        // open by the `Arc` this value holds.
        unsafe { ffi::rdmc_close(self.mr) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What libfabric's `verbs` provider returned under Soft-RoCE (see the
    /// feasibility notes): every MR mode, FI_RX_CQ_DATA, 4-byte immediates.
    #[test]
    fn verbs_modes_are_obeyed() {
        let mr = ffi::MR_LOCAL | ffi::MR_VIRT_ADDR | ffi::MR_ALLOCATED | ffi::MR_PROV_KEY;
        let modes = Modes::obey(mr, ffi::MODE_RX_CQ_DATA, 4).unwrap();
        assert_eq!(
            modes,
            Modes {
                mr_local: true,
                virt_addr: true,
                prov_key: true,
                rx_cq_data: true,
            }
        );
        let base = 0x7f00_0000_1000 as *const u8;
        assert_eq!(modes.remote_addr(base, 4096), 0x7f00_0000_2000);
    }

    /// What `tcp` returns: nothing asked of the application.
    #[test]
    fn lenient_modes_use_offsets() {
        let modes = Modes::obey(0, ffi::MODE_CONTEXT, 8).unwrap();
        assert_eq!(modes, Modes::default());
        assert_eq!(modes.remote_addr(0x1000 as *const u8, 4096), 4096);
    }

    #[test]
    fn modes_this_transport_cannot_obey_are_refused() {
        assert!(
            Modes::obey(ffi::MR_OTHER, 0, 8)
                .unwrap_err()
                .contains("memory-registration")
        );
        assert!(
            Modes::obey(0, ffi::MODE_OTHER, 8)
                .unwrap_err()
                .contains("operation modes")
        );
        assert!(Modes::obey(0, 0, 0).unwrap_err().contains("remote CQ data"));
    }
}
