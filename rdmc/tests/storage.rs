//! The storage scenarios of `common::storage_suite` on every transport:
//! receive targets, per-message delivery, the bound on messages in flight,
//! the slow-reader timeout.

#[macro_use]
mod common;

storage_suite!(mem, common::MemFixture);
storage_suite!(tcp, common::TcpFixture);
#[cfg(feature = "ofi")]
storage_suite!(ofi, common::OfiFixture);
#[cfg(feature = "rdma")]
storage_suite!(rdma, common::RdmaFixture);
