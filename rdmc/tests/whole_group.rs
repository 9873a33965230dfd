//! Whole clusters in one process, every scenario of `common::suite` (and
//! the storage scenarios of `common::storage_suite`: receive targets,
//! per-message delivery, the bound on messages in flight, the slow-reader
//! timeout) on every transport: `mem` in process, `tcp` on loopback, `ofi`
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

// The storage scenarios, one module per transport (named apart from the
// suite's: the Soft-RoCE VM tier runs this binary's `ofi::` and `rdma::`
// tests only).
storage_suite!(mem_storage, common::MemFixture);
storage_suite!(tcp_storage, common::TcpFixture);
storage_suite!(tcp_on_demand_storage, common::TcpOnDemandFixture);
#[cfg(feature = "ofi")]
storage_suite!(ofi_storage, common::OfiFixture);
#[cfg(feature = "rdma")]
storage_suite!(rdma_storage, common::RdmaFixture);

/// The scenarios' scratch directory goes when its test passes and stays,
/// named, when it fails (here: a thread that panics holding one).
#[test]
fn a_scratch_dir_is_removed_when_its_test_passes_and_kept_when_it_fails() {
    use std::path::PathBuf;

    use common::scratch::ScratchDir;

    let passed = {
        let dir = ScratchDir::new("scratch-passes");
        std::fs::write(dir.join("f"), b"passed").unwrap();
        dir.to_path_buf()
    };
    assert!(!passed.exists(), "{} was kept", passed.display());
    let failed = std::thread::spawn(|| {
        let dir = ScratchDir::new("scratch-fails");
        std::fs::write(dir.join("f"), b"failed").unwrap();
        std::panic::panic_any(dir.to_path_buf());
    })
    .join()
    .expect_err("the thread panics");
    let failed = *failed.downcast::<PathBuf>().unwrap();
    let kept = std::fs::read(failed.join("f"));
    let _ = std::fs::remove_dir_all(&failed);
    assert_eq!(kept.unwrap(), b"failed", "{} was removed", failed.display());
}
