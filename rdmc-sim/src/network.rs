//! The network model: hosts with a full-duplex NIC each, per-link latency,
//! slow hosts and slow links, per-block jitter, and an optional second
//! level of racks behind top-of-rack switches joined by uplinks.

use std::time::Duration;

use crate::SimError;

/// Bits per second of every host's link in the project's emulated lab
/// (`rdmc-bench`'s default `--rate`): 250 Mbit/s each direction.
pub const LAB_RATE_BPS: f64 = 250e6;

/// One-way latency of a link in the emulated lab: a veth pair and a Linux
/// bridge between two network namespaces, with no delay added (the lab's
/// kernel has no `netem`); tens of microseconds.
pub const LAB_LATENCY: Duration = Duration::from_micros(50);

/// A host whose NIC is slower than the others, in both directions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlowHost {
    /// The host (a member's rank: member `r` runs on host `r`).
    pub host: usize,
    /// Its NIC runs at the network's rate divided by this (≥ 1 slows it).
    pub factor: f64,
}

/// A link between two hosts that is slower than either host's NIC, in both
/// directions (the "slow link" of the RDMC paper's robustness analysis).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlowLink {
    /// One end.
    pub a: usize,
    /// The other end.
    pub b: usize,
    /// A transfer between them runs at most at the network's rate divided
    /// by this.
    pub factor: f64,
}

/// How members are placed in racks.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Placement {
    /// Consecutive ranks share a rack: with `R` racks of `n` hosts, host
    /// `h` is in rack `h / ⌈n / R⌉`.
    #[default]
    Blocked,
    /// Ranks dealt out round-robin, as a placement service may hand them
    /// out: host `h` is in rack `h mod R`.
    Interleaved,
}

/// A two-level topology: racks of hosts behind top-of-rack switches, each
/// switch joined to the core by an uplink (full duplex) of its own rate.
/// Traffic inside a rack crosses only the two hosts' NICs; traffic between
/// racks also crosses the sender's rack's uplink and the receiver's rack's
/// downlink.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Racks {
    /// Number of racks (≥ 1).
    pub count: usize,
    /// Each rack's uplink rate, bits per second, each direction.
    pub uplink_bps: f64,
    /// Which rack each host is in.
    pub placement: Placement,
}

impl Racks {
    /// The rack of each of `hosts` hosts, in rank order.
    pub fn rack_of(&self, hosts: usize) -> Vec<usize> {
        let per_rack = hosts.div_ceil(self.count.max(1)).max(1);
        (0..hosts)
            .map(|h| match self.placement {
                Placement::Blocked => h / per_rack,
                Placement::Interleaved => h % self.count.max(1),
            })
            .collect()
    }
}

/// The modelled network.
///
/// Bandwidth is shared as a fluid: every block in flight is a flow across
/// the sender's NIC (out), the receiver's NIC (in) and, between racks, the
/// two racks' uplinks; concurrent flows get the max-min fair share of every
/// port they cross (what TCP's congestion control approximates), recomputed
/// whenever a flow starts or ends. A block arrives `latency` after its last
/// byte left the sender, and the sender's send completes when its last byte
/// left (or, with a `send_buffer`, once it fits the buffer). Control messages (ready-for-block, close) take `latency` and no
/// bandwidth.
#[derive(Clone, Debug, PartialEq)]
pub struct Network {
    /// Every host's NIC rate, bits per second, each direction.
    pub rate_bps: f64,
    /// One-way latency of every link.
    pub latency: Duration,
    /// Hosts slower than `rate_bps`.
    pub slow_hosts: Vec<SlowHost>,
    /// Host pairs whose link is slower than their NICs.
    pub slow_links: Vec<SlowLink>,
    /// The rack level, if any (without it every host hangs off one
    /// non-blocking switch).
    pub racks: Option<Racks>,
    /// Before each block send, the sender waits a delay drawn uniformly
    /// from `0..jitter` (scheduling noise: a member that runs late).
    pub jitter: Duration,
    /// Seed of the jitter's random numbers: the same seed gives the same run.
    pub seed: u64,
    /// Bytes a connection buffers at its sender: a block send completes
    /// once the connection's unsent bytes (this block's included) are at
    /// most this. 0, the default, is RDMA's semantics (a send completes
    /// when its last byte left); a TCP socket's send buffer lets a sender
    /// go on to its next send while earlier bytes still wait, each
    /// connection's blocks leaving in order.
    pub send_buffer: u64,
}

impl Default for Network {
    /// The emulated lab: [`LAB_RATE_BPS`], [`LAB_LATENCY`], one switch, no
    /// slow host, no jitter.
    fn default() -> Self {
        Network {
            rate_bps: LAB_RATE_BPS,
            latency: LAB_LATENCY,
            slow_hosts: Vec::new(),
            slow_links: Vec::new(),
            racks: None,
            jitter: Duration::ZERO,
            seed: 0,
            send_buffer: 0,
        }
    }
}

impl Network {
    /// The lab's network ([`Network::default`]).
    pub fn lab() -> Self {
        Network::default()
    }

    /// A network of `rate_bps` bits per second per NIC and `latency`, and
    /// nothing else.
    pub fn uniform(rate_bps: f64, latency: Duration) -> Self {
        Network {
            rate_bps,
            latency,
            ..Network::default()
        }
    }

    /// The ideal time of one unicast of `size` bytes between two full-rate
    /// hosts: `size / rate + latency`, in seconds. No multicast can deliver
    /// to every receiver faster (each receiver's NIC takes every byte).
    pub fn unicast_seconds(&self, size: u64) -> f64 {
        size as f64 * 8.0 / self.rate_bps + self.latency.as_secs_f64()
    }

    /// Check the model for `hosts` hosts and lay out its ports.
    pub(crate) fn topology(&self, hosts: usize) -> Result<Topology, SimError> {
        let rate = |bps: f64, what: &'static str| {
            if bps.is_finite() && bps > 0.0 {
                Ok(bps / 8.0)
            } else {
                Err(SimError::BadRate { what, bps })
            }
        };
        let host_bytes = rate(self.rate_bps, "host link")?;
        let factor = |factor: f64| {
            if factor.is_finite() && factor > 0.0 {
                Ok(factor)
            } else {
                Err(SimError::BadFactor { factor })
            }
        };
        let host = |host: usize| {
            if host < hosts {
                Ok(host)
            } else {
                Err(SimError::NoSuchHost { host, hosts })
            }
        };
        let mut nic = vec![host_bytes; hosts];
        for slow in &self.slow_hosts {
            nic[host(slow.host)?] = host_bytes / factor(slow.factor)?;
        }
        let mut slow_links = Vec::with_capacity(self.slow_links.len());
        for link in &self.slow_links {
            let (a, b) = (host(link.a)?, host(link.b)?);
            if a == b {
                return Err(SimError::LinkToItself { host: a });
            }
            slow_links.push((a.min(b), a.max(b), host_bytes / factor(link.factor)?));
        }
        let (rack_of, uplink) = match self.racks {
            None => (vec![0; hosts], None),
            Some(racks) => {
                if racks.count == 0 {
                    return Err(SimError::NoRacks);
                }
                (
                    racks.rack_of(hosts),
                    Some((racks.count, rate(racks.uplink_bps, "uplink")?)),
                )
            }
        };
        let mut caps = Vec::with_capacity(2 * hosts + 2 * uplink.map_or(0, |u| u.0));
        for &bytes in &nic {
            caps.push(bytes); // egress
            caps.push(bytes); // ingress
        }
        if let Some((count, bytes)) = uplink {
            caps.extend(std::iter::repeat_n(bytes, 2 * count));
        }
        Ok(Topology {
            hosts,
            caps,
            rack_of,
            slow_links,
            latency: self.latency.as_secs_f64(),
        })
    }
}

/// The ports of a checked [`Network`] for a number of hosts: resource
/// `2h` is host `h`'s NIC out, `2h + 1` its NIC in, `2H + 2r` rack `r`'s
/// uplink (towards the core) and `2H + 2r + 1` its downlink.
#[derive(Debug)]
pub(crate) struct Topology {
    hosts: usize,
    /// Capacity of every port, bytes per second.
    pub(crate) caps: Vec<f64>,
    rack_of: Vec<usize>,
    /// (lower host, higher host, bytes per second).
    slow_links: Vec<(usize, usize, f64)>,
    /// Seconds.
    pub(crate) latency: f64,
}

/// The ports a transfer crosses, in order.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Path {
    pub(crate) ports: [u32; 4],
    pub(crate) len: u8,
    /// A limit of this transfer's own (a slow link), bytes per second.
    pub(crate) cap: f64,
}

impl Path {
    pub(crate) fn ports(&self) -> &[u32] {
        &self.ports[..usize::from(self.len)]
    }
}

impl Topology {
    /// The path of a transfer from host `from` to host `to`.
    pub(crate) fn path(&self, from: usize, to: usize) -> Path {
        let port = |i: usize| u32::try_from(i).expect("fewer than 2^32 ports");
        let (ra, rb) = (self.rack_of[from], self.rack_of[to]);
        let (ports, len) = if ra == rb {
            ([port(2 * from), port(2 * to + 1), 0, 0], 2)
        } else {
            let racks = 2 * self.hosts;
            (
                [
                    port(2 * from),
                    port(racks + 2 * ra),
                    port(racks + 2 * rb + 1),
                    port(2 * to + 1),
                ],
                4,
            )
        };
        let (lo, hi) = (from.min(to), from.max(to));
        let cap = self
            .slow_links
            .iter()
            .filter(|l| l.0 == lo && l.1 == hi)
            .map(|l| l.2)
            .fold(f64::INFINITY, f64::min);
        Path { ports, len, cap }
    }
}
