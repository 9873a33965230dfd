//! Strangers cannot exhaust a member's file descriptors: 1,500 silent
//! connections (more than it may hold) against a member whose process may
//! hold 1,024, and the transfer among the members still completes. (A
//! member that held every connection until its handshake timed out fails
//! here with "Too many open files".)

mod child;
#[allow(dead_code)]
mod cluster_ports;
#[path = "../../rdmc/tests/common/scratch.rs"]
mod scratch;

#[allow(dead_code, unused_macros)]
mod member_suite;

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use member_suite::{Scratch, Transport, wait, write_file};

const TCP: Transport = Transport::tcp("tcp");

/// The silent connections kept open against the member.
const SILENT: usize = 1500;

/// Raise this process's soft descriptor limit to `want` (within the hard
/// limit): it holds the silent connections.
fn raise_fd_limit(want: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid out-pointer.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
        0
    );
    if limit.rlim_cur < want {
        limit.rlim_cur = want.min(limit.rlim_max);
        // SAFETY: a valid rlimit, the soft limit within the hard one.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
    }
}

#[test]
fn silent_connections_beyond_the_fd_limit_do_not_stop_a_member_with_1024_descriptors() {
    raise_fd_limit(SILENT as u64 + 1024);
    let scratch = Scratch::new(&TCP, "admission", 3, "a key for the admission test");
    let members = std::fs::read_to_string(scratch.members()).unwrap();
    let target: SocketAddr = members.lines().nth(1).unwrap().parse().unwrap();
    let files: Vec<PathBuf> = (0..3).map(|i| scratch.path(&format!("f{i}"))).collect();
    let contents: Vec<Vec<u8>> = files
        .iter()
        .zip([3 << 20, 100_003, 8 << 20])
        .enumerate()
        .map(|(i, (path, len))| write_file(path, len, i as u8))
        .collect();
    let extra = ["--block-size", "64KiB", "--connect-timeout", "60"];

    // Rank 1, limited to 1,024 descriptors, comes up first...
    let inner = scratch.command(1, "key", &extra, &[]);
    let mut one = Command::new("sh")
        .args(["-c", r#"ulimit -n 1024 && exec "$0" "$@""#])
        .arg(inner.get_program())
        .args(inner.get_args())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let first = loop {
        match TcpStream::connect(target) {
            Ok(s) => break s,
            Err(_) if start.elapsed() < Duration::from_secs(30) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => panic!("rank 1 never listened: {e}"),
        }
    };
    // ...and gets 1,500 connections that say nothing, kept at 1,500 (those
    // it closes are opened again) until the transfer is over.
    let done = Arc::new(AtomicBool::new(false));
    let (flooding, flood_started) = std::sync::mpsc::channel();
    let attacker = std::thread::spawn({
        let done = Arc::clone(&done);
        move || {
            let mut open = vec![first];
            let mut opened = 1usize;
            let mut rounds = 0;
            while !done.load(Ordering::Relaxed) && rounds < 10_000 {
                rounds += 1;
                // Drop the ones the member closed.
                open.retain(|s| {
                    s.set_nonblocking(true).unwrap();
                    // Nothing to read yet: still open.
                    matches!(s.peek(&mut [0]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
                });
                while open.len() < SILENT && !done.load(Ordering::Relaxed) {
                    match TcpStream::connect_timeout(&target, Duration::from_millis(200)) {
                        Ok(s) => {
                            open.push(s);
                            opened += 1;
                            if opened == SILENT {
                                let _ = flooding.send(());
                            }
                        }
                        Err(_) => break,
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            opened
        }
    });
    // The others start once 1,500 have been opened: the member would be
    // past its limit if it held them all.
    flood_started
        .recv_timeout(Duration::from_secs(60))
        .expect("1,500 connections opened");
    let mut zero = scratch.spawn_member(0, &extra, &files);
    let mut two = scratch.spawn_member(2, &extra, &[]);
    let outcomes: Vec<_> = [&mut zero, &mut one, &mut two]
        .into_iter()
        .map(|child| wait(child, Duration::from_secs(120)))
        .collect();
    for (rank, (status, err)) in outcomes.iter().enumerate() {
        assert!(
            status.success(),
            "rank {rank} failed: {err} (all: {outcomes:?})"
        );
    }
    done.store(true, Ordering::Relaxed);
    let opened = attacker.join().unwrap();
    assert!(
        opened >= SILENT,
        "only {opened} silent connections were opened"
    );
    for rank in [1, 2] {
        for (i, expected) in contents.iter().enumerate() {
            let got = std::fs::read(scratch.path(&format!("out{rank}/{i}.bin"))).unwrap();
            assert!(&got == expected, "rank {rank} file {i} differs");
        }
    }
}
