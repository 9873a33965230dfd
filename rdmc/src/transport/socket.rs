//! TCP sockets: the stream and listener types the `tcp` transport and the
//! mesh run over, and the socket options a link sets (the receive
//! low-water mark, the unsent limit, the congestion control).
//!
//! The types are tokio's. A build with `--cfg rdmc_sim` swaps in the
//! simulated network of the `turmoil` crate, so that whole nodes (actor,
//! mesh, links, liveness, timers) run in one thread in virtual time under
//! the whole-node simulator; no socket option applies there.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

#[cfg(not(rdmc_sim))]
pub(crate) use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
#[cfg(not(rdmc_sim))]
pub(crate) use tokio::net::{TcpListener, TcpStream};
#[cfg(rdmc_sim)]
pub(crate) use turmoil::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
#[cfg(rdmc_sim)]
pub(crate) use turmoil::net::{TcpListener, TcpStream};

/// A listener on `addr`, the node's address in its cluster. (A simulated
/// host listens on all its addresses: turmoil binds no other.)
pub(crate) async fn bind(addr: std::net::SocketAddr) -> io::Result<TcpListener> {
    #[cfg(rdmc_sim)]
    let addr = std::net::SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), addr.port());
    TcpListener::bind(addr).await
}

/// A listener the application bound itself, for the runtime to accept on.
pub(crate) fn listener_from_std(listener: std::net::TcpListener) -> io::Result<TcpListener> {
    #[cfg(not(rdmc_sim))]
    {
        listener.set_nonblocking(true)?;
        TcpListener::from_std(listener)
    }
    #[cfg(rdmc_sim)]
    {
        drop(listener);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "a listener bound by the application cannot join a simulated network",
        ))
    }
}

/// The operating system's socket under a stream, where there is one (a
/// simulated stream has none, and its options are left alone).
pub(crate) trait SocketFd {
    /// The socket's file descriptor, open as long as `self` is.
    fn socket_fd(&self) -> Option<RawFd>;
}

impl SocketFd for tokio::net::TcpStream {
    fn socket_fd(&self) -> Option<RawFd> {
        Some(self.as_raw_fd())
    }
}

impl SocketFd for tokio::net::TcpSocket {
    fn socket_fd(&self) -> Option<RawFd> {
        Some(self.as_raw_fd())
    }
}

#[cfg(rdmc_sim)]
impl SocketFd for turmoil::net::TcpStream {
    fn socket_fd(&self) -> Option<RawFd> {
        None
    }
}

/// Largest receive low-water mark set: well below the smallest receive
/// buffer Linux grows a socket to for it.
const MAX_LOWAT: usize = 128 * 1024;

/// A socket's receive low-water mark (`SO_RCVLOWAT`), raised to the bytes
/// the reader still needs so that it is woken once per chunk rather than
/// once per arriving packet — which on a slow link, packet by packet, costs
/// more CPU than the copy itself. Never above what the reader needs, so it
/// can never wait for bytes that are not coming; Linux also wakes the reader
/// regardless when the receive window or buffer runs short.
#[derive(Debug)]
pub(crate) struct RecvLowat {
    fd: Option<RawFd>,
    current: usize,
}

impl RecvLowat {
    /// For a stream that is not a socket: does nothing.
    #[cfg(test)]
    pub(crate) fn none() -> Self {
        RecvLowat {
            fd: None,
            current: 1,
        }
    }

    /// For `socket`, which must outlive the reader using this.
    pub(crate) fn of(socket: &impl SocketFd) -> Self {
        RecvLowat {
            fd: socket.socket_fd(),
            current: 1,
        }
    }

    /// Wake the reader once `bytes` (capped) are there.
    #[allow(unsafe_code)]
    pub(super) fn set(&mut self, bytes: usize) {
        let bytes = bytes.clamp(1, MAX_LOWAT);
        let Some(fd) = self.fd else { return };
        if bytes == self.current {
            return;
        }
        let value = bytes as libc::c_int;
        // SAFETY: `fd` is the socket of the stream whose read half the
        // caller owns, so it is open; `value` is a live c_int whose size is
        // passed along. A failure only leaves the old mark in place.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&raw const value).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            self.current = bytes;
        } else {
            // Not a socket after all, or not supported: stop trying.
            self.fd = None;
        }
    }
}

/// Let `socket` hold at most about `bytes` unsent (`TCP_NOTSENT_LOWAT`):
/// writes wait until the unsent bytes fall below it, so a send completes
/// once all but about that much of it has left. Not a socket, or not
/// supported: nothing changes (sends complete once buffered, as before).
#[allow(unsafe_code)]
pub(crate) fn limit_unsent(socket: &impl SocketFd, bytes: u32) {
    let Some(fd) = socket.socket_fd() else { return };
    let value = bytes.min(i32::MAX as u32) as libc::c_int;
    // SAFETY: the caller holds `socket`, so its fd is open; `value` is a
    // live c_int whose size is passed along.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        tracing::debug!(
            error = %std::io::Error::last_os_error(),
            "TCP_NOTSENT_LOWAT not set"
        );
    }
}

/// Make `socket` use TCP congestion control `name` (`TCP_CONGESTION`).
/// The error says why the kernel refused it, with the controls it has.
#[allow(unsafe_code)]
pub(crate) fn set_congestion_control(socket: &impl SocketFd, name: &str) -> Result<(), String> {
    // The kernel's names are at most TCP_CA_NAME_MAX (16) bytes with the NUL.
    if name.is_empty() || name.len() >= 16 || name.contains('\0') {
        return Err("not a congestion control name (1 to 15 bytes)".into());
    }
    let Some(fd) = socket.socket_fd() else {
        return Ok(());
    };
    // SAFETY: the caller holds `socket`, so its fd is open; `name` is a
    // live buffer of the length passed along (the kernel copies it and
    // needs no NUL).
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let error = std::io::Error::last_os_error();
    let available = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .map(|list| list.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into());
    Err(format!("{error} (this kernel has: {available})"))
}

/// The TCP congestion control `socket` uses (`TCP_CONGESTION`).
#[cfg(test)]
#[allow(unsafe_code)]
pub(crate) fn congestion_control(socket: &impl AsRawFd) -> std::io::Result<String> {
    let mut name = [0u8; 16];
    let mut len = name.len() as libc::socklen_t;
    // SAFETY: the caller holds `socket`, so its fd is open; `name` and
    // `len` are live and `len` is `name`'s size.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_mut_ptr().cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let name = &name[..(len as usize).min(name.len())];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..end]).into_owned())
}
