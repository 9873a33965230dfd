//! What [`plan`](super::plan) finds before touching the network, and what
//! [`join`](super::join) finds with it.

use std::net::SocketAddr;

use clap::ValueEnum;

#[cfg(feature = "etcd")]
use super::etcd;
use super::exchange::Exchange;
use super::watch::Watch;

/// `--members-from`: where the members come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Source {
    /// The `--members` file: one `host:port` per line, in rank order.
    File,
    /// Slurm's `srun`: rank and hosts from SLURM_PROCID, SLURM_NTASKS,
    /// SLURM_LOCALID, SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE.
    Slurm,
    /// An MPI launcher (`mpirun`): rank and size from OMPI_COMM_WORLD_*
    /// (or PMIX_RANK); addresses exchanged through rank 0 (--bootstrap).
    Mpi,
    /// A Kubernetes StatefulSet: the pod's ordinal is its rank, its peers
    /// the headless service's names.
    K8s,
    /// An etcd cluster (the `etcd` feature): each member registers its
    /// address under a lease and waits for --size members.
    Etcd,
}

impl Source {
    /// The name the command line gives it.
    pub fn name(self) -> &'static str {
        match self {
            Source::File => "file",
            Source::Slurm => "slurm",
            Source::Mpi => "mpi",
            Source::K8s => "k8s",
            Source::Etcd => "etcd",
        }
    }
}

/// The rank a process asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// This rank (`--rank`, `--me`, or 0 for `rdmc push`).
    Rank(u32),
    /// The root, rank 0 (a member given files to send).
    Root,
    /// Any receiver's rank: from a launcher, or the lowest free one from 1
    /// claimed in etcd.
    Receiver,
}

/// What is known before touching the network.
#[derive(Debug)]
pub struct Plan {
    /// The source.
    pub source: Source,
    /// How many members the cluster has.
    pub size: usize,
    /// This member's rank; `None` while it is to be claimed (etcd).
    pub rank: Option<u32>,
    /// What to name in errors about the list: the file, or the source.
    pub origin: String,
    /// What [`join`](super::join) does.
    pub how: How,
}

/// What [`join`](super::join) has to do.
#[derive(Debug)]
pub enum How {
    /// Nothing: the addresses are known.
    Ready(Vec<SocketAddr>),
    /// Resolve these `host:port` names (retrying until they resolve).
    Names(Vec<String>),
    /// The bootstrap exchange at rank 0.
    Exchange(Exchange),
    /// Register in etcd and wait for every member.
    #[cfg(feature = "etcd")]
    Etcd(etcd::Spec),
}

/// What [`join`](super::join) found.
pub struct Joined {
    /// Every member's address, in rank order.
    pub members: Vec<SocketAddr>,
    /// This member's rank.
    pub rank: u32,
    /// The source's watch, if it keeps one.
    pub watch: Option<Watch>,
}
