//! Whole clusters in one process, every scenario of `common::suite` on
//! every transport: `mem` in process, `tcp` on loopback, `ofi`
//! (libfabric's `tcp` provider on loopback by default; see
//! `common::fixture::OfiFixture` for other providers) and `rdma` (RDMA
//! verbs, skipped without a device). A transport is one
//! line: its fixture and the capabilities it can be tested for.

#[macro_use]
mod common;

whole_group_suite!(mem, common::MemFixture);
whole_group_suite!(tcp, common::TcpFixture, listens, relayable, heartbeats);
whole_group_suite!(
    tcp_on_demand,
    common::TcpOnDemandFixture,
    listens,
    relayable,
    heartbeats
);
#[cfg(feature = "ofi")]
whole_group_suite!(ofi, common::OfiFixture, listens, heartbeats);
#[cfg(feature = "rdma")]
whole_group_suite!(rdma, common::RdmaFixture, heartbeats);
