//! `rdmc member --transport ofi` across real processes on loopback (the
//! `cli_member` tests over libfabric's `tcp` provider): files delivered
//! byte-exact, and a member killed mid-transfer makes every survivor fail
//! once, naming it, with a non-zero exit.

#![cfg(feature = "ofi")]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Free loopback ports (bound, read, released).
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<_> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

fn tempdir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cli_member_ofi_{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn members_file(dir: &Path, n: usize) -> PathBuf {
    let path = dir.join("members");
    let text: String = free_ports(n)
        .iter()
        .map(|p| format!("127.0.0.1:{p}\n"))
        .collect();
    std::fs::write(&path, text).unwrap();
    path
}

fn spawn_member(
    dir: &Path,
    members: &Path,
    rank: usize,
    extra: &[&str],
    files: &[PathBuf],
) -> Child {
    Command::new(env!("CARGO_BIN_EXE_rdmc"))
        .arg("member")
        .arg("--members")
        .arg(members)
        .args(["--rank", &rank.to_string(), "--out"])
        .arg(dir.join(format!("out{rank}")))
        .args(["--key-file"])
        .arg(dir.join("key"))
        .args(["--transport", "ofi", "--ofi-provider", "tcp"])
        .args(extra)
        .args(files)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rdmc runs")
}

/// Wait for a child, killing it after `limit`.
fn wait(child: &mut Child, limit: Duration) -> (ExitStatus, String) {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (status, err);
        }
        if start.elapsed() > limit {
            child.kill().unwrap();
            let _ = child.wait();
            panic!("member did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn write_file(path: &Path, len: usize, seed: u8) -> Vec<u8> {
    let data: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed ^ (i >> 9) as u8)
        .collect();
    std::fs::write(path, &data).unwrap();
    data
}

#[test]
fn six_processes_deliver_three_odd_files_over_ofi() {
    let dir = tempdir("six");
    std::fs::write(
        dir.join("key"),
        "a cluster key of more than sixteen bytes\n",
    )
    .unwrap();
    let members = members_file(&dir, 6);
    let sizes = [1usize, 1_000_003, 65_537];
    let files: Vec<PathBuf> = sizes
        .iter()
        .enumerate()
        .map(|(i, _)| dir.join(format!("f{i}")))
        .collect();
    let contents: Vec<Vec<u8>> = sizes
        .iter()
        .zip(&files)
        .enumerate()
        .map(|(i, (&len, path))| write_file(path, len, i as u8))
        .collect();
    let extra = ["--block-size", "64KiB", "--algorithm", "binomial-pipeline"];
    let mut children: Vec<Child> = (1..6)
        .map(|r| spawn_member(&dir, &members, r, &extra, &[]))
        .collect();
    children.insert(0, spawn_member(&dir, &members, 0, &extra, &files));
    for (rank, child) in children.iter_mut().enumerate() {
        let (status, err) = wait(child, Duration::from_secs(60));
        assert!(status.success(), "rank {rank} failed: {err}");
    }
    for rank in 1..6 {
        for (i, expected) in contents.iter().enumerate() {
            let got = std::fs::read(dir.join(format!("out{rank}/{i}.bin"))).unwrap();
            assert!(&got == expected, "rank {rank} file {i} differs");
        }
    }
}

#[test]
fn a_member_killed_mid_transfer_over_ofi_makes_every_survivor_fail_naming_it() {
    let dir = tempdir("kill");
    std::fs::write(dir.join("key"), "another cluster key, also long enough").unwrap();
    let members = members_file(&dir, 6);
    let small = dir.join("small");
    let big = dir.join("big");
    write_file(&small, 1000, 1);
    write_file(&big, 256 << 20, 2);
    // Small blocks and a chain make the big file take a while.
    let extra = ["--block-size", "16KiB", "--algorithm", "chain"];
    let mut children: Vec<Child> = (1..6)
        .map(|r| spawn_member(&dir, &members, r, &extra, &[]))
        .collect();
    children.insert(
        0,
        spawn_member(&dir, &members, 0, &extra, &[small.clone(), big.clone()]),
    );
    // Once rank 2 has the small file, the big one is under way: kill rank 2.
    let first = dir.join("out2/0.bin");
    let start = Instant::now();
    while !first.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "rank 2 never got the first file"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    children[2].kill().unwrap();
    let killed = Instant::now();
    let _ = children[2].wait();
    for rank in [0, 1, 3, 4, 5] {
        let (status, err) = wait(&mut children[rank], Duration::from_secs(20));
        assert!(!status.success(), "rank {rank} should fail");
        assert!(
            err.contains("node 2"),
            "rank {rank} should name rank 2: {err}"
        );
        assert!(
            err.lines().count() <= 2,
            "rank {rank}: a short error: {err}"
        );
        if rank > 0 {
            assert!(
                !dir.join(format!("out{rank}/1.bin")).exists(),
                "rank {rank} must not have a complete-looking copy of the interrupted file"
            );
        }
    }
    assert!(
        killed.elapsed() < Duration::from_secs(5),
        "survivors took {:?}",
        killed.elapsed()
    );
}

#[test]
fn a_member_that_hangs_over_ofi_is_detected_within_the_failure_timeout() {
    let dir = tempdir("hang");
    std::fs::write(dir.join("key"), "yet another cluster key, long enough").unwrap();
    let members = members_file(&dir, 4);
    let small = dir.join("small");
    let big = dir.join("big");
    write_file(&small, 1000, 1);
    write_file(&big, 128 << 20, 2);
    let extra = [
        "--block-size",
        "16KiB",
        "--algorithm",
        "chain",
        "--failure-timeout",
        "1",
    ];
    let mut children: Vec<Child> = (1..4)
        .map(|r| spawn_member(&dir, &members, r, &extra, &[]))
        .collect();
    children.insert(
        0,
        spawn_member(&dir, &members, 0, &extra, &[small.clone(), big.clone()]),
    );
    let first = dir.join("out2/0.bin");
    let start = Instant::now();
    while !first.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "rank 2 never got the first file"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Freeze rank 2: its connections stay open, it just says nothing more.
    let pid = children[2].id() as libc::pid_t;
    // SAFETY: signalling our own child process, which is still running.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let frozen = Instant::now();
    for rank in [0, 1, 3] {
        let (status, err) = wait(&mut children[rank], Duration::from_secs(20));
        assert!(!status.success(), "rank {rank} should fail");
        assert!(
            err.contains("node 2"),
            "rank {rank} should name rank 2: {err}"
        );
    }
    let took = frozen.elapsed();
    children[2].kill().unwrap();
    let _ = children[2].wait();
    assert!(
        took < Duration::from_secs(4),
        "survivors took {took:?} with a 1 s failure timeout"
    );
}
