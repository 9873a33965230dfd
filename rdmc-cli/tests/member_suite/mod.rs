//! `rdmc member` across real processes on loopback, every scenario written
//! once for any transport: files delivered byte-exact; a member killed
//! mid-transfer, or one that hangs, makes every survivor fail once, naming
//! it, with a non-zero exit. [`member_suite!`] expands them for one
//! transport.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Every scenario as a `#[test]` in a module `$name`, running the members
/// with the arguments `$args` (which pick the transport):
///
/// ```ignore
/// member_suite!(tcp, &["--transport", "tcp"]);
/// ```
macro_rules! member_suite {
    ($name:ident, $args:expr) => {
        mod $name {
            use super::member_suite::{self, Transport};

            const TRANSPORT: Transport = Transport {
                name: stringify!($name),
                args: $args,
            };

            #[test]
            fn six_processes_deliver_three_odd_files() {
                member_suite::six_processes_deliver_three_odd_files(&TRANSPORT);
            }

            #[test]
            fn a_member_killed_mid_transfer_makes_every_survivor_fail_naming_it() {
                member_suite::a_member_killed_mid_transfer_makes_every_survivor_fail_naming_it(
                    &TRANSPORT,
                );
            }

            #[test]
            fn a_member_that_hangs_is_detected_within_the_failure_timeout() {
                member_suite::a_member_that_hangs_is_detected_within_the_failure_timeout(
                    &TRANSPORT,
                );
            }
        }
    };
}

/// The transport the members run on.
pub struct Transport {
    /// Its name, for the scratch directories.
    pub name: &'static str,
    /// The `rdmc member` arguments that pick it.
    pub args: &'static [&'static str],
}

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

/// One test's scratch directory, with a members file for `n` members and a
/// key file holding `key`.
struct Scratch {
    dir: PathBuf,
    members: PathBuf,
    transport: &'static Transport,
}

impl Scratch {
    fn new(transport: &'static Transport, test: &str, n: usize, key: &str) -> Self {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("cli_member_{}_{test}", transport.name));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("key"), key).unwrap();
        let members = dir.join("members");
        let text: String = free_ports(n)
            .iter()
            .map(|p| format!("127.0.0.1:{p}\n"))
            .collect();
        std::fs::write(&members, text).unwrap();
        Scratch {
            dir,
            members,
            transport,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn spawn_member(&self, rank: usize, extra: &[&str], files: &[PathBuf]) -> Child {
        Command::new(env!("CARGO_BIN_EXE_rdmc"))
            .arg("member")
            .arg("--members")
            .arg(&self.members)
            .args(["--rank", &rank.to_string(), "--out"])
            .arg(self.dir.join(format!("out{rank}")))
            .args(["--key-file"])
            .arg(self.dir.join("key"))
            .args(self.transport.args)
            .args(extra)
            .args(files)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("rdmc runs")
    }

    /// Ranks `0..n`; rank 0 sends `files`.
    fn spawn_all(&self, n: usize, extra: &[&str], files: &[PathBuf]) -> Vec<Child> {
        (0..n)
            .map(|r| self.spawn_member(r, extra, if r == 0 { files } else { &[] }))
            .collect()
    }

    /// Wait until rank `rank` has written its first file.
    fn wait_for_first_file(&self, rank: usize) {
        let first = self.dir.join(format!("out{rank}/0.bin"));
        let start = Instant::now();
        while !first.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "rank {rank} never got the first file"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
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

pub fn six_processes_deliver_three_odd_files(transport: &'static Transport) {
    let scratch = Scratch::new(
        transport,
        "six",
        6,
        "a cluster key of more than sixteen bytes\n",
    );
    let sizes = [1usize, 1_000_003, 65_537];
    let files: Vec<PathBuf> = (0..sizes.len())
        .map(|i| scratch.path(&format!("f{i}")))
        .collect();
    let contents: Vec<Vec<u8>> = sizes
        .iter()
        .zip(&files)
        .enumerate()
        .map(|(i, (&len, path))| write_file(path, len, i as u8))
        .collect();
    let extra = ["--block-size", "64KiB", "--algorithm", "binomial-pipeline"];
    let mut children = scratch.spawn_all(6, &extra, &files);
    for (rank, child) in children.iter_mut().enumerate() {
        let (status, err) = wait(child, Duration::from_secs(60));
        assert!(status.success(), "rank {rank} failed: {err}");
    }
    for rank in 1..6 {
        for (i, expected) in contents.iter().enumerate() {
            let got = std::fs::read(scratch.path(&format!("out{rank}/{i}.bin"))).unwrap();
            assert!(&got == expected, "rank {rank} file {i} differs");
        }
    }
}

pub fn a_member_killed_mid_transfer_makes_every_survivor_fail_naming_it(
    transport: &'static Transport,
) {
    let scratch = Scratch::new(
        transport,
        "kill",
        6,
        "another cluster key, also long enough",
    );
    let small = scratch.path("small");
    let big = scratch.path("big");
    write_file(&small, 1000, 1);
    write_file(&big, 256 << 20, 2);
    // Small blocks and a chain make the big file take a while. The default
    // failure timeout (3 s) is not what finds the kill: the member's
    // connections break.
    let extra = ["--block-size", "16KiB", "--algorithm", "chain"];
    let mut children = scratch.spawn_all(6, &extra, &[small, big]);
    // Once rank 2 has the small file, the big one is under way: kill rank 2.
    scratch.wait_for_first_file(2);
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
                !scratch.path(&format!("out{rank}/1.bin")).exists(),
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

pub fn a_member_that_hangs_is_detected_within_the_failure_timeout(transport: &'static Transport) {
    let scratch = Scratch::new(transport, "hang", 4, "yet another cluster key, long enough");
    let small = scratch.path("small");
    let big = scratch.path("big");
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
    let mut children = scratch.spawn_all(4, &extra, &[small, big]);
    scratch.wait_for_first_file(2);
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
