//! `rdmc member` over tcp on loopback, under faults that need a process of
//! their own: a receiver that cannot get the memory for a message (an
//! address-space limit set in the child), and a member stopped for a little
//! less, or a little more, than the failure timeout.

mod child;
#[allow(dead_code)]
mod cluster_ports;
#[path = "../../rdmc/tests/common/scratch.rs"]
mod scratch;

#[macro_use]
#[allow(dead_code, unused_macros)]
mod member_suite;

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::Child;
use std::time::Duration;

use member_suite::{SLOW_CHAIN, Scratch, Transport, wait};

const TCP: Transport = Transport::tcp("tcp_faults");

/// A receiver limited to 768 MiB of address space is sent a 1 GiB file
/// (within the default 16 GiB message limit): it cannot allocate the
/// message, and says so — exit 1, not an abort — and the group fails for
/// everyone, naming it.
#[test]
fn a_receiver_out_of_memory_fails_the_group_naming_itself() {
    let scratch = Scratch::new(&TCP, "oom", 3, "a key for the out-of-memory test");
    let big = scratch.path("big");
    // Sparse: nothing is written, reading it gives zeros.
    std::fs::File::create(&big)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    let extra = ["--block-size", "1MiB", "--algorithm", "sequential"];
    let mut children: Vec<Child> = Vec::new();
    for rank in 0..3 {
        let files = if rank == 0 { vec![big.clone()] } else { vec![] };
        let mut command = scratch.command(rank, "key", &extra, &files);
        if rank == 1 {
            let limit = libc::rlimit {
                rlim_cur: 768 << 20,
                rlim_max: 768 << 20,
            };
            // SAFETY: setrlimit is async-signal-safe, and the closure
            // touches nothing but its own copy of `limit`.
            unsafe {
                command.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_AS, &limit) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        children.push(command.spawn().expect("rdmc runs"));
    }
    let (status, err) = wait(&mut children[1], Duration::from_secs(60));
    assert_eq!(
        status.signal(),
        None,
        "rank 1 was killed by a signal: {err}"
    );
    assert_eq!(status.code(), Some(1), "rank 1: {err}");
    assert!(
        err.contains("node 1") && err.contains("out of memory"),
        "rank 1 should say it ran out of memory: {err}"
    );
    assert_eq!(err.lines().count(), 1, "rank 1: one line: {err}");
    for rank in [0, 2] {
        let (status, err) = wait(&mut children[rank], Duration::from_secs(60));
        assert!(!status.success(), "rank {rank} should fail");
        assert!(
            err.contains("node 1"),
            "rank {rank} should name rank 1: {err}"
        );
    }
}

/// Stop rank 2 of a 4-member chain for `stopped` while a 64 MiB file is
/// under way, with a failure timeout of 2 s; each member's exit status and
/// error.
fn stop_a_member_for(test: &str, stopped: Duration) -> Vec<(bool, String)> {
    let scratch = Scratch::new(&TCP, test, 4, "a key for the stopped-member tests");
    let files = scratch.small_and_big(64 << 20);
    let extra = [&SLOW_CHAIN[..], &["--failure-timeout", "2"]].concat();
    let mut children: Vec<Child> = (0..4)
        .map(|r| {
            let files = if r == 0 { &files[..] } else { &[] };
            let mut c = scratch.command(r, "key", &extra, files);
            if r == 2 {
                c.env("RUST_LOG", "rdmc=debug");
            }
            c.spawn().unwrap()
        })
        .collect();
    let first = scratch.path("out3/0.bin");
    while !first.exists() {
        std::thread::sleep(Duration::from_millis(5));
    }
    let pid = children[2].id() as libc::pid_t;
    // SAFETY: signalling our own child process, which is still running.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    std::thread::sleep(stopped);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    children
        .iter_mut()
        .map(|c| {
            let (status, err) = wait(c, Duration::from_secs(120));
            (status.success(), err)
        })
        .collect()
}

/// The failure timeout means what it says: stopped for 0.85 of it, a
/// member is not declared failed — the transfer carries on when it
/// resumes and every member succeeds.
#[test]
fn a_member_stopped_for_less_than_the_failure_timeout_is_not_declared_failed() {
    let outcomes = stop_a_member_for("stop_short", Duration::from_millis(1700));
    for (rank, (ok, err)) in outcomes.iter().enumerate() {
        assert!(ok, "rank {rank} failed: {err}");
    }
}

/// Stopped for 1.15 of the failure timeout, it is declared failed while
/// stopped (else the transfer would carry on when it resumes): every
/// survivor fails naming it, and the member itself, resumed, learns that
/// it was declared failed and names itself — not a member that left
/// because of it.
#[test]
fn a_member_stopped_for_more_than_the_failure_timeout_is_declared_failed_and_told() {
    let outcomes = stop_a_member_for("stop_long", Duration::from_millis(2300));
    for (rank, (ok, err)) in outcomes.iter().enumerate() {
        assert!(!ok, "rank {rank} should fail");
        assert!(
            err.contains("node 2 failed"),
            "rank {rank} should name rank 2: {err}"
        );
    }
}

/// `SIGTERM` (what `kill`, systemd and docker send) mid-transfer: the
/// member leaves, removes its part file, and exits 1 with one line naming
/// the signal; the others fail naming it.
#[test]
fn a_member_terminated_mid_transfer_says_so_and_leaves_no_part_file() {
    signalled_mid_transfer(libc::SIGTERM, "terminated (SIGTERM)");
}

/// `SIGHUP` (the ssh session or terminal that started it went away): as
/// `SIGTERM`.
#[test]
fn a_member_hung_up_mid_transfer_says_so_and_leaves_no_part_file() {
    signalled_mid_transfer(libc::SIGHUP, "hung up (SIGHUP)");
}

fn signalled_mid_transfer(signal: libc::c_int, said: &str) {
    let name = format!("signal{signal}");
    let scratch = Scratch::new(&TCP, &name, 3, "a key for the signal tests");
    let files = scratch.small_and_big(256 << 20);
    let extra = [&SLOW_CHAIN[..], &["--failure-timeout", "30"]].concat();
    let mut children: Vec<Child> = (0..3)
        .map(|r| {
            let files = if r == 0 { &files[..] } else { &[] };
            let mut command = scratch.command(r, "key", &extra, files);
            // The members take the signal's default disposition, whatever
            // this test inherited (under `nohup` SIGHUP is ignored, and a
            // member then rightly keeps going).
            // SAFETY: signal() is async-signal-safe; the closure captures
            // nothing.
            unsafe {
                command.pre_exec(move || {
                    libc::signal(signal, libc::SIG_DFL);
                    Ok(())
                });
            }
            command.spawn().unwrap()
        })
        .collect();
    let out = scratch.path("out2");
    let parts = || {
        std::fs::read_dir(&out).map_or(0, |d| {
            d.filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".part"))
            })
            .count()
        })
    };
    let start = std::time::Instant::now();
    while parts() == 0 {
        assert!(start.elapsed() < Duration::from_secs(60), "no part file");
        std::thread::sleep(Duration::from_millis(5));
    }
    let pid = children[2].id() as libc::pid_t;
    // SAFETY: signalling our own child process, which is still running.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    let (status, err) = wait(&mut children[2], Duration::from_secs(20));
    assert_eq!(status.signal(), None, "rank 2 died of the signal: {err}");
    assert_eq!(status.code(), Some(1), "rank 2: {err}");
    assert!(err.contains(said), "rank 2: {err}");
    assert_eq!(err.lines().count(), 1, "rank 2: one line: {err}");
    assert_eq!(parts(), 0, "rank 2 left a part file");
    assert!(!out.join("1.bin").exists(), "rank 2 finished the big file");
    for rank in [0, 1] {
        let (status, err) = wait(&mut children[rank], Duration::from_secs(60));
        assert!(!status.success(), "rank {rank} should fail");
        assert!(
            err.contains("node 2"),
            "rank {rank} should name rank 2: {err}"
        );
    }
}
