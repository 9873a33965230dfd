//! The storage scenarios of `common::storage_suite` on every transport:
//! receive targets, per-message delivery, the bound on messages in flight,
//! the slow-reader timeout.

#[macro_use]
mod common;

storage_suite!(mem, common::MemFixture);
storage_suite!(tcp, common::TcpFixture);
storage_suite!(tcp_on_demand, common::TcpOnDemandFixture);
#[cfg(feature = "ofi")]
storage_suite!(ofi, common::OfiFixture);
#[cfg(feature = "rdma")]
storage_suite!(rdma, common::RdmaFixture);

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
