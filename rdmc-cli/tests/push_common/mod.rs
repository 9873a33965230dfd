//! What the `rdmc push` tests share: a scratch directory with a members
//! file and a key, the commands, and readers of their output and trees.

#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::child::wait_within;
use crate::cluster_ports::ClusterPorts;
use crate::scratch::ScratchDir;

/// One test's scratch directory: a members file for `n` members (rank 0
/// pushes) and a key file, with the members' ports held (see
/// [`ClusterPorts`]).
pub struct Scratch {
    dir: ScratchDir,
    /// Every member's `--max-message-size`.
    pub max_message: &'static str,
    _ports: ClusterPorts,
}

impl Scratch {
    pub fn new(test: &str, n: usize) -> Self {
        let ports = ClusterPorts::new(n);
        let dir = ScratchDir::new(&format!("cli_push_{test}"));
        ports.write_members_file(&dir.join("members"));
        let keygen = Command::new(env!("CARGO_BIN_EXE_rdmc"))
            .arg("keygen")
            .arg(dir.join("key"))
            .output()
            .unwrap();
        assert!(keygen.status.success(), "{keygen:?}");
        Scratch {
            dir,
            max_message: "1MiB",
            _ports: ports,
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The address of rank `rank`, as the members file lists it.
    pub fn addr(&self, rank: usize) -> String {
        let text = std::fs::read_to_string(self.path("members")).unwrap();
        text.lines().nth(rank).unwrap().to_owned()
    }

    /// `rdmc COMMAND --members ... --key-file ...` with `extra` arguments.
    pub fn command(&self, command: &str, extra: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_rdmc"));
        c.arg(command)
            .arg("--members")
            .arg(self.path("members"))
            .arg("--key-file")
            .arg(self.path("key"))
            .args([
                "--max-message-size",
                self.max_message,
                "--connect-timeout",
                "60",
            ])
            .args(extra)
            // Warnings shown: a successful push has none.
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// Receiver `rank`, writing to `out{rank}`, reporting JSON lines.
    pub fn receiver(&self, rank: usize) -> Child {
        let out = self.path(&format!("out{rank}"));
        let rank = rank.to_string();
        self.command("receive", &["--json", "--me", &rank, "--out"])
            .arg(out)
            .spawn()
            .unwrap()
    }

    pub fn push(&self, paths: &[PathBuf]) -> Child {
        self.push_with(&[], paths)
    }

    /// `rdmc push --json` with `extra` arguments.
    pub fn push_with(&self, extra: &[&str], paths: &[PathBuf]) -> Child {
        self.command("push", &["--json"])
            .args(extra)
            .args(paths)
            .spawn()
            .unwrap()
    }
}

/// Threads reading a child's stdout and stderr to the end.
pub type Output = std::thread::JoinHandle<String>;

pub fn read_output(child: &mut Child) -> (Output, Output) {
    pub fn reader(mut pipe: impl Read + Send + 'static) -> Output {
        std::thread::spawn(move || {
            let mut s = String::new();
            pipe.read_to_string(&mut s).unwrap();
            s
        })
    }
    (
        reader(child.stdout.take().unwrap()),
        reader(child.stderr.take().unwrap()),
    )
}

/// Wait for a child (killing it after `limit`): its status, stdout, stderr.
pub fn finish(mut child: Child, limit: Duration) -> (ExitStatus, String, String) {
    let (out, err) = read_output(&mut child);
    let status = wait_within(&mut child, limit);
    (status, out.join().unwrap(), err.join().unwrap())
}

/// As [`finish`], with the child's peak resident memory in KiB (its
/// `ru_maxrss`, from `wait4`).
pub fn finish_measured(mut child: Child, limit: Duration) -> (ExitStatus, String, String, i64) {
    use std::os::unix::process::ExitStatusExt;
    let (out, err) = read_output(&mut child);
    let pid = child.id() as libc::pid_t;
    let start = Instant::now();
    let (status, maxrss) = loop {
        let mut status = 0;
        // SAFETY: plain out-parameters; `pid` is our own unreaped child.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let got = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        assert!(got >= 0, "wait4: {}", std::io::Error::last_os_error());
        if got == pid {
            break (ExitStatus::from_raw(status), usage.ru_maxrss);
        }
        if start.elapsed() > limit {
            child.kill().unwrap();
            let _ = child.wait();
            panic!("rdmc did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status, out.join().unwrap(), err.join().unwrap(), maxrss)
}

pub fn events(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

pub fn blake3_hex(data: &[u8]) -> String {
    blake3::hash(data).to_hex().to_string()
}

/// Deterministic contents.
pub fn contents(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Every file under `dir`: relative path and contents, sorted.
/// Every file under `dir` (not following links) with its contents.
pub fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    entries(dir)
        .into_iter()
        .filter_map(|(rel, entry)| match entry {
            Entry::File { data, .. } => Some((rel, data)),
            _ => None,
        })
        .collect()
}

/// What a push must reproduce of one entry of a tree.
#[derive(Debug, PartialEq, Eq)]
pub enum Entry {
    File {
        data: Vec<u8>,
        mode: u32,
        mtime: (i64, i64),
    },
    Dir {
        mode: u32,
        mtime: (i64, i64),
    },
    Link(PathBuf),
}

/// Every entry under `dir`, by relative path, in order.
pub fn entries(dir: &Path) -> Vec<(String, Entry)> {
    use std::os::unix::fs::MetadataExt;
    pub fn walk(root: &Path, dir: &Path, found: &mut Vec<(String, Entry)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().to_string_lossy().into();
            let meta = path.symlink_metadata().unwrap();
            let (mode, mtime) = (meta.mode() & 0o777, (meta.mtime(), meta.mtime_nsec()));
            if meta.file_type().is_symlink() {
                found.push((rel, Entry::Link(std::fs::read_link(&path).unwrap())));
            } else if meta.is_dir() {
                walk(root, &path, found);
                found.push((rel, Entry::Dir { mode, mtime }));
            } else {
                let data = std::fs::read(&path).unwrap();
                found.push((rel, Entry::File { data, mode, mtime }));
            }
        }
    }
    let mut found = Vec::new();
    walk(dir, dir, &mut found);
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// A directory `tree` of `small` small files (some empty, in nested
/// directories, one executable, one read-only), an empty directory and a
/// link to one of its files, and a file `large` of `large_len` bytes.
pub fn make_inputs(scratch: &Scratch, small: usize, large_len: usize) -> Vec<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let root = scratch.path("src/tree");
    for i in 0..small {
        let dir = root.join(format!("d{}/e{}", i % 7, i % 3));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("f{i}")), contents(i * 37 % 5000, i as u64)).unwrap();
    }
    let mode = |rel: &str, mode: u32| {
        let path = root.join(rel);
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    mode("d1/e1/f1", 0o755);
    mode("d2/e2/f2", 0o444);
    std::fs::create_dir_all(root.join("empty")).unwrap();
    mode("empty", 0o700);
    std::os::unix::fs::symlink("../e1/f1", root.join("d1/e0/link")).unwrap();
    let large = scratch.path("src/large.bin");
    std::fs::write(&large, contents(large_len, 99)).unwrap();
    vec![root, large]
}

/// Whether a log (at `RUST_LOG=warn`) has a line at warn or above.
pub fn warned(log: &str) -> bool {
    log.lines()
        .any(|l| l.contains(" WARN ") || l.contains(" ERROR "))
}
