//! Loopback ports for one test's cluster of member processes, one test at a
//! time. The ports were free when they were chosen and are released before
//! the members bind them; a member of a test running beside this one could
//! otherwise take one of them first (a sender then reaches the wrong
//! process, which hangs up: "Broken pipe"). So while a test holds its
//! [`ClusterPorts`], no other test of the same binary gets any.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

/// Held by each test's [`ClusterPorts`].
static ONE_CLUSTER_AT_A_TIME: Mutex<()> = Mutex::new(());

/// `n` loopback addresses, free when chosen, this test's until dropped.
pub struct ClusterPorts {
    addrs: Vec<std::net::SocketAddr>,
    _serial: MutexGuard<'static, ()>,
}

impl ClusterPorts {
    /// Wait for the tests before this one to drop theirs, then choose `n`.
    pub fn new(n: usize) -> Self {
        let serial = Self::serial();
        let host = std::net::Ipv4Addr::LOCALHOST.into();
        ClusterPorts {
            addrs: free_ports(host, n)
                .into_iter()
                .map(|port| std::net::SocketAddr::new(host, port))
                .collect(),
            _serial: serial,
        }
    }

    /// Like [`new`](Self::new), `n` consecutive ports: a host's members
    /// listen at a base port plus their local rank.
    pub fn consecutive(n: u16) -> Self {
        let serial = Self::serial();
        let seed = std::process::id() as u16;
        let base = (0..2000u16)
            .map(|attempt| 20000 + (seed.wrapping_mul(7).wrapping_add(attempt * 37)) % 40000)
            .find(|&base| {
                (0..n).all(|i| std::net::TcpListener::bind(("127.0.0.1", base + i)).is_ok())
            })
            .unwrap_or_else(|| panic!("no {n} consecutive free ports"));
        ClusterPorts {
            addrs: (0..n)
                .map(|i| std::net::SocketAddr::from(([127, 0, 0, 1], base + i)))
                .collect(),
            _serial: serial,
        }
    }

    /// The first port.
    pub fn base(&self) -> u16 {
        self.addrs[0].port()
    }

    fn serial() -> MutexGuard<'static, ()> {
        // A test that failed while holding it poisoned it; the others go on.
        ONE_CLUSTER_AT_A_TIME
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Write them to `path` as a members file, one address per line.
    pub fn write_members_file(&self, path: &Path) {
        let text: String = self.addrs.iter().map(|a| format!("{a}\n")).collect();
        std::fs::write(path, text).unwrap();
    }
}

/// `n` ports free at `host` when chosen (bound, read, released).
pub fn free_ports(host: std::net::IpAddr, n: usize) -> Vec<u16> {
    let listeners: Vec<_> = (0..n)
        .map(|_| std::net::TcpListener::bind((host, 0)).unwrap())
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}
