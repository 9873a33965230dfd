//! A test's child processes: waiting for one with a time limit.

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// Wait for `child` to exit; kill it and fail the test if it is still
/// running after `limit`.
pub fn wait_within(child: &mut Child, limit: Duration) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > limit {
            child.kill().unwrap();
            let _ = child.wait();
            panic!("process {} did not exit within {limit:?}", child.id());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
