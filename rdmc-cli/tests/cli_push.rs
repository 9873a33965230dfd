//! `rdmc push` and `rdmc receive` across real processes on loopback TCP: a
//! tree of many small files and a larger file reach every receiver byte for
//! byte, each file's SHA-256 reported; receivers killed mid-push are left
//! out, the push exits 3 naming them, and the others get every file; an
//! input that cannot be read, or a missing key, is refused before anyone is
//! contacted; an existing output is never overwritten.

mod child;
#[allow(dead_code)]
mod cluster_ports;
#[path = "../../rdmc/tests/common/scratch.rs"]
mod scratch;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};

use child::wait_within;
use cluster_ports::ClusterPorts;
use scratch::ScratchDir;

/// One test's scratch directory: a members file for `n` members (rank 0
/// pushes) and a key file, with the members' ports held (see
/// [`ClusterPorts`]).
struct Scratch {
    dir: ScratchDir,
    /// Every member's `--max-message-size`.
    max_message: &'static str,
    _ports: ClusterPorts,
}

impl Scratch {
    fn new(test: &str, n: usize) -> Self {
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

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The address of rank `rank`, as the members file lists it.
    fn addr(&self, rank: usize) -> String {
        let text = std::fs::read_to_string(self.path("members")).unwrap();
        text.lines().nth(rank).unwrap().to_owned()
    }

    /// `rdmc COMMAND --members ... --key-file ...` with `extra` arguments.
    fn command(&self, command: &str, extra: &[&str]) -> Command {
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
    fn receiver(&self, rank: usize) -> Child {
        let out = self.path(&format!("out{rank}"));
        let rank = rank.to_string();
        self.command("receive", &["--json", "--me", &rank, "--out"])
            .arg(out)
            .spawn()
            .unwrap()
    }

    fn push(&self, paths: &[PathBuf]) -> Child {
        self.command("push", &["--json"])
            .args(paths)
            .spawn()
            .unwrap()
    }
}

/// Threads reading a child's stdout and stderr to the end.
type Output = std::thread::JoinHandle<String>;

fn read_output(child: &mut Child) -> (Output, Output) {
    fn reader(mut pipe: impl Read + Send + 'static) -> Output {
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
fn finish(mut child: Child, limit: Duration) -> (ExitStatus, String, String) {
    let (out, err) = read_output(&mut child);
    let status = wait_within(&mut child, limit);
    (status, out.join().unwrap(), err.join().unwrap())
}

/// As [`finish`], with the child's peak resident memory in KiB (its
/// `ru_maxrss`, from `wait4`).
fn finish_measured(mut child: Child, limit: Duration) -> (ExitStatus, String, String, i64) {
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

fn events(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Deterministic contents.
fn contents(len: usize, seed: u64) -> Vec<u8> {
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
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
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
enum Entry {
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
fn entries(dir: &Path) -> Vec<(String, Entry)> {
    use std::os::unix::fs::MetadataExt;
    fn walk(root: &Path, dir: &Path, found: &mut Vec<(String, Entry)>) {
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
fn make_inputs(scratch: &Scratch, small: usize, large_len: usize) -> Vec<PathBuf> {
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
fn warned(log: &str) -> bool {
    log.lines()
        .any(|l| l.contains(" WARN ") || l.contains(" ERROR "))
}

#[test]
fn a_tree_of_small_files_and_a_large_file_reach_three_receivers_checked() {
    let scratch = Scratch::new("three_receivers", 4);
    let inputs = make_inputs(&scratch, 300, 5_000_000);
    let receivers: Vec<Child> = (1..4).map(|r| scratch.receiver(r)).collect();
    let (status, out, err) = finish(scratch.push(&inputs), Duration::from_secs(300));
    assert!(status.success(), "push failed: {err}\n{out}");
    // Nothing at warn or above from a successful push (every member
    // leaves saying so: none reports another down).
    assert!(!warned(&err), "a successful push warned: {err}");
    let pushed = events(&out);
    let done = pushed.iter().find(|e| e["event"] == "done").expect("done");
    assert_eq!(done["files"], 301);
    let expected = tree(&scratch.path("src"));
    assert_eq!(expected.len(), 301);
    // Every file with its mode and time, every directory (the empty one
    // too) with its own, the link as a link.
    let sent = entries(&scratch.path("src"));
    for (i, receiver) in receivers.into_iter().enumerate() {
        let (status, out, err) = finish(receiver, Duration::from_secs(120));
        assert!(status.success(), "receiver {} failed: {err}", i + 1);
        assert!(!warned(&err), "receiver {} warned: {err}", i + 1);
        assert!(
            entries(&scratch.path(&format!("out{}", i + 1))) == sent,
            "receiver {} differs",
            i + 1
        );
        // Every file reported once, with the SHA-256 of its contents.
        let mut received: Vec<(String, String)> = events(&out)
            .iter()
            .filter(|e| e["event"] == "received")
            .map(|e| {
                let path = e["path"].as_str().unwrap().to_owned();
                (path, e["sha256"].as_str().unwrap().to_owned())
            })
            .collect();
        received.sort();
        let want: Vec<(String, String)> = expected
            .iter()
            .map(|(path, data)| (path.clone(), sha256_hex(data)))
            .collect();
        assert_eq!(received, want);
        // Nothing but the pushed entries (the staging directory is gone).
        let mut names: Vec<_> = std::fs::read_dir(scratch.path(&format!("out{}", i + 1)))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["large.bin", "tree"]);
    }
}

#[test]
fn a_receiver_killed_mid_push_is_left_out_and_the_others_get_everything() {
    stop_a_receiver_mid_push("killed", libc::SIGKILL);
}

/// `SIGTERM` (what `kill`, systemd and docker send) to a receiver: as a
/// kill for the others, and the receiver itself says why and leaves no
/// staging directory behind.
#[test]
fn a_receiver_terminated_mid_push_says_so_and_keeps_nothing() {
    let (status, err, left) = stop_a_receiver_mid_push("terminated", libc::SIGTERM);
    assert_eq!(status.code(), Some(1), "receiver 2: {err}");
    assert!(err.contains("terminated (SIGTERM)"), "receiver 2: {err}");
    assert_eq!(left, 0, "receiver 2 kept files of the push");
}

/// Four members, rank 2 sent `signal` once it has received its first
/// file: the push goes on without it and exits 3 ("partial") naming it,
/// and the other receivers end with every file, checked, naming it too.
/// Rank 2's exit status, its stderr, and how many entries its output
/// directory holds.
fn stop_a_receiver_mid_push(test: &str, signal: libc::c_int) -> (ExitStatus, String, usize) {
    let scratch = Scratch::new(test, 4);
    // Twenty 1.5 MiB files, each cut into two messages.
    let root = scratch.path("src/files");
    std::fs::create_dir_all(&root).unwrap();
    for i in 0..20 {
        std::fs::write(root.join(format!("f{i:02}")), contents(3 << 19, i)).unwrap();
    }
    let mut receivers: Vec<Child> = (1..4).map(|r| scratch.receiver(r)).collect();
    let push = scratch.push(&[root]);
    let mut victim = receivers.remove(1);
    let mut stdout = BufReader::new(victim.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert!(first.contains("\"received\""), "{first}");
    // SAFETY: signalling our own child process, which is still running.
    assert_eq!(unsafe { libc::kill(victim.id() as libc::pid_t, signal) }, 0);
    victim.stdout = Some(stdout.into_inner());
    let (victim_status, _, victim_err) = finish(victim, Duration::from_secs(60));
    let (status, out, err) = finish(push, Duration::from_secs(120));
    assert_eq!(status.code(), Some(3), "push: {err}\n{out}");
    let named = format!("{} (rank 2)", scratch.addr(2));
    assert!(
        err.contains(&format!("failed hosts (without the push): {named}")),
        "{err}"
    );
    let pushed = events(&out);
    let done = pushed.iter().find(|e| e["event"] == "done").expect("done");
    assert_eq!(done["failed_hosts"], serde_json::json!([named]));
    assert!(
        pushed
            .iter()
            .any(|e| e["event"] == "member_failed" && e["failed_rank"] == 2),
        "{out}"
    );
    let left = |rank: usize| {
        std::fs::read_dir(scratch.path(&format!("out{rank}")))
            .unwrap()
            .count()
    };
    let sent = entries(&scratch.path("src"));
    for (rank, receiver) in [(1, receivers.remove(0)), (3, receivers.remove(0))] {
        let (status, out, err) = finish(receiver, Duration::from_secs(120));
        assert!(status.success(), "receiver {rank}: {err}");
        // Every file, checked, with its mode and time.
        assert!(
            entries(&scratch.path(&format!("out{rank}"))) == sent,
            "receiver {rank} differs"
        );
        let reported = events(&out);
        assert_eq!(
            reported.iter().filter(|e| e["event"] == "received").count(),
            20,
            "receiver {rank}: every file reported once: {out}"
        );
        assert!(
            reported
                .iter()
                .any(|e| e["event"] == "member_failed" && e["host"] == named.as_str()),
            "receiver {rank} names rank 2: {out}"
        );
    }
    (victim_status, victim_err, left(2))
}

/// Five members, two receivers killed at once mid-push (without a word):
/// the other two end with every file, the push names both. The same push
/// run again sends the files only to the two that lack them; run once more,
/// it sends nothing. Each exits 0.
#[test]
fn two_receivers_killed_at_once_mid_push_leave_the_others_complete_and_a_rerun_fills_them() {
    let scratch = Scratch::new("two_killed", 5);
    let root = scratch.path("src/files");
    std::fs::create_dir_all(&root).unwrap();
    for i in 0..24 {
        std::fs::write(root.join(format!("f{i:02}")), contents(3 << 19, 100 + i)).unwrap();
    }
    let mut receivers: Vec<Option<Child>> = (1..5).map(|r| Some(scratch.receiver(r))).collect();
    let push = scratch.push(&[root]);
    // Ranks 2 and 4, once rank 2 has its third file.
    let mut first = receivers[1].take().unwrap();
    let mut stdout = BufReader::new(first.stdout.take().unwrap());
    for _ in 0..3 {
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert!(line.contains("\"received\""), "{line}");
    }
    let mut second = receivers[3].take().unwrap();
    for victim in [&mut first, &mut second] {
        victim.kill().unwrap();
    }
    for mut victim in [first, second] {
        victim.wait().unwrap();
    }
    let (status, out, err) = finish(push, Duration::from_secs(180));
    assert_eq!(status.code(), Some(3), "push: {err}\n{out}");
    let done = events(&out)
        .into_iter()
        .find(|e| e["event"] == "done")
        .expect("done");
    let mut failed: Vec<String> = done["failed_hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap().to_owned())
        .collect();
    failed.sort();
    let mut named = [
        format!("{} (rank 2)", scratch.addr(2)),
        format!("{} (rank 4)", scratch.addr(4)),
    ];
    named.sort();
    assert_eq!(failed, named);
    let sent = entries(&scratch.path("src"));
    for rank in [1, 3] {
        let receiver = receivers[rank - 1].take().unwrap();
        let (status, _, err) = finish(receiver, Duration::from_secs(120));
        assert!(status.success(), "receiver {rank}: {err}");
        assert!(
            entries(&scratch.path(&format!("out{rank}"))) == sent,
            "receiver {rank} differs"
        );
    }
    // The same push again, every receiver running: ranks 1 and 3 hold
    // everything and are sent nothing; ranks 2 and 4 get every file.
    let rerun = |expect_held: &[usize]| {
        let receivers: Vec<Child> = (1..5).map(|r| scratch.receiver(r)).collect();
        let (status, out, err) = finish(
            scratch.push(&[scratch.path("src/files")]),
            Duration::from_secs(180),
        );
        assert!(status.success(), "push again: {err}\n{out}");
        assert!(!warned(&err), "push again warned: {err}");
        let held: Vec<String> = events(&out)
            .into_iter()
            .filter(|e| e["event"] == "already_held")
            .flat_map(|e| e["hosts"].as_array().unwrap().clone())
            .map(|h| h.as_str().unwrap().to_owned())
            .collect();
        let want: Vec<String> = expect_held
            .iter()
            .map(|&r| format!("{} (rank {r})", scratch.addr(r)))
            .collect();
        assert_eq!(held, want, "{out}");
        for (rank, receiver) in (1..5).zip(receivers) {
            let (status, out, err) = finish(receiver, Duration::from_secs(120));
            assert!(status.success(), "again, receiver {rank}: {err}");
            assert!(!warned(&err), "again, receiver {rank} warned: {err}");
            let said = events(&out);
            let done = said.iter().find(|e| e["event"] == "done").expect("done");
            let received = said.iter().filter(|e| e["event"] == "received").count();
            if expect_held.contains(&rank) {
                assert_eq!(done["already_held"], true, "receiver {rank}: {out}");
                assert_eq!(received, 0, "receiver {rank} was sent files: {out}");
            } else {
                assert_eq!(received, 24, "receiver {rank}: {out}");
            }
            assert!(
                entries(&scratch.path(&format!("out{rank}")))
                    .into_iter()
                    .filter(|(name, _)| !name.starts_with(".rdmc-receive"))
                    .collect::<Vec<_>>()
                    == sent,
                "again, receiver {rank} differs"
            );
        }
    };
    rerun(&[1, 3]);
    // And once more: a finished push is a no-op.
    rerun(&[1, 2, 3, 4]);
}

/// A receiver killed at moments spread over a push (its first file, the
/// middle, the commit and close, after the end): whatever the moment, the
/// push exits 0 (it was too late to matter) or 3 naming it, never
/// anything else; the other receivers always end with every file; the
/// victim holds the whole tree or none of it (its staging directory aside).
#[test]
fn a_receiver_killed_at_any_moment_leaves_the_others_complete() {
    for (round, delay_ms) in [0u64, 400, 1_200, 1_600, 2_000, 2_500, 6_000]
        .into_iter()
        .enumerate()
    {
        let scratch = Scratch::new(&format!("kill_any_moment_{round}"), 4);
        let root = scratch.path("src/files");
        std::fs::create_dir_all(&root).unwrap();
        for i in 0..16 {
            std::fs::write(root.join(format!("f{i:02}")), contents(3 << 19, 200 + i)).unwrap();
        }
        let mut receivers: Vec<Option<Child>> = (1..4).map(|r| Some(scratch.receiver(r))).collect();
        let push = scratch.push(&[root]);
        let mut victim = receivers[1].take().unwrap();
        let mut stdout = BufReader::new(victim.stdout.take().unwrap());
        let mut first = String::new();
        stdout.read_line(&mut first).unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        // The victim may have finished and exited already: then the kill
        // fails, as it should.
        let _ = victim.kill();
        victim.wait().unwrap();
        let (status, out, err) = finish(push, Duration::from_secs(120));
        let named = format!("{} (rank 2)", scratch.addr(2));
        eprintln!("round {round}: killed {delay_ms} ms in; push: {status}");
        match status.code() {
            Some(0) => {}
            Some(3) => assert!(err.contains(&named), "round {round}: {err}"),
            other => panic!("round {round}: push exited {other:?}: {err}\n{out}"),
        }
        let sent = entries(&scratch.path("src"));
        for rank in [1, 3] {
            let receiver = receivers[rank - 1].take().unwrap();
            let (status, _, err) = finish(receiver, Duration::from_secs(120));
            assert!(status.success(), "round {round}, receiver {rank}: {err}");
            assert!(
                entries(&scratch.path(&format!("out{rank}"))) == sent,
                "round {round}: receiver {rank} differs"
            );
        }
        // The victim: everything (it committed before the kill) or no
        // entry of the push.
        let held: Vec<_> = entries(&scratch.path("out2"))
            .into_iter()
            .filter(|(name, _)| !name.starts_with(".rdmc-receive"))
            .collect();
        assert!(
            held.is_empty() || held == sent,
            "round {round}: the victim holds part of the push"
        );
    }
}

/// Rank 0 alone: it must refuse within seconds (no receiver is listening,
/// so it could only wait for the connect timeout otherwise), exit 1 and say
/// why on one line.
fn refused(mut command: Command, expected: &str) -> String {
    let child = command.spawn().unwrap();
    let start = Instant::now();
    let (status, _, err) = finish(child, Duration::from_secs(30));
    assert!(start.elapsed() < Duration::from_secs(20));
    assert_eq!(status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains(expected), "expected {expected:?} in {err:?}");
    err
}

#[test]
fn inputs_that_cannot_be_read_are_refused_before_anyone_is_contacted() {
    let scratch = Scratch::new("bad_inputs", 2);
    let tree = scratch.path("src/tree");
    std::fs::create_dir_all(&tree).unwrap();
    std::fs::write(tree.join("fine"), b"fine").unwrap();
    std::os::unix::fs::symlink("nowhere", tree.join("dangling")).unwrap();
    let mut push = scratch.command("push", &[]);
    push.arg(&tree);
    refused(push, "dangling: No such file or directory");
    std::fs::remove_file(tree.join("dangling")).unwrap();
    let fifo = std::ffi::CString::new(tree.join("fifo").to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let mut push = scratch.command("push", &[]);
    push.arg(&tree);
    refused(push, "fifo: is a FIFO");
    std::fs::remove_file(tree.join("fifo")).unwrap();
    let mut push = scratch.command("push", &[]);
    push.arg(scratch.path("src/missing"));
    refused(push, "missing: No such file or directory");
    // Unreadable by permission (root reads anything, so only as a user).
    // SAFETY: no arguments.
    if unsafe { libc::geteuid() } != 0 {
        use std::os::unix::fs::PermissionsExt;
        let secret = tree.join("secret");
        std::fs::write(&secret, b"secret").unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o000)).unwrap();
        let mut push = scratch.command("push", &[]);
        push.arg(&tree);
        refused(push, "secret: Permission denied");
    }
}

#[test]
fn without_a_key_file_every_command_refuses_and_says_how_to_make_one() {
    let scratch = Scratch::new("no_key", 2);
    let members = scratch.path("members");
    for args in every_command(&scratch) {
        let mut command = Command::new(env!("CARGO_BIN_EXE_rdmc"));
        command
            .args(&args)
            .arg("--members")
            .arg(&members)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        refused(command, "no --key-file");
        let output = Command::new(env!("CARGO_BIN_EXE_rdmc"))
            .args(&args)
            .arg("--members")
            .arg(&members)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&output.stderr);
        assert!(err.contains("rdmc keygen"), "{args:?}: {err}");
    }
}

/// `push`, `receive` and `member`'s arguments (a file to send, an output
/// directory) in `scratch`, before `--members` and `--key-file`.
fn every_command(scratch: &Scratch) -> [Vec<std::ffi::OsString>; 3] {
    std::fs::write(scratch.path("file"), b"data").unwrap();
    let (file, out) = (scratch.path("file"), scratch.path("out"));
    [
        vec!["push".into(), file.clone().into()],
        vec![
            "receive".into(),
            "--me".into(),
            "1".into(),
            "--out".into(),
            out.into(),
        ],
        vec!["member".into(), "--rank".into(), "0".into(), file.into()],
    ]
}

/// A key file that is no key — a device that never ends, a FIFO nobody
/// writes, a 1 GiB file — is refused at once by every command, in one
/// line, unread.
#[test]
fn key_files_that_cannot_be_keys_are_refused_at_once_by_every_command() {
    let scratch = Scratch::new("bad_keys", 2);
    let fifo = scratch.path("fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let large = scratch.path("large");
    std::fs::File::create(&large)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    let keys = [
        (PathBuf::from("/dev/zero"), "is not a regular file"),
        (PathBuf::from("/dev/urandom"), "is not a regular file"),
        (fifo, "is not a regular file"),
        (large, "a key file has at most 4096"),
    ];
    for (key, expected) in &keys {
        for args in every_command(&scratch) {
            let mut command = Command::new(env!("CARGO_BIN_EXE_rdmc"));
            command
                .args(&args)
                .arg("--members")
                .arg(scratch.path("members"))
                .arg("--key-file")
                .arg(key)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let started = Instant::now();
            refused(command, expected);
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{args:?} with {}: not at once",
                key.display()
            );
        }
    }
}

#[test]
fn a_receiver_never_overwrites_and_the_push_names_it() {
    let scratch = Scratch::new("no_overwrite", 3);
    let file = scratch.path("src/notes.txt");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, b"new notes").unwrap();
    std::fs::create_dir_all(scratch.path("out2")).unwrap();
    std::fs::write(scratch.path("out2/notes.txt"), b"old notes").unwrap();
    let receivers: Vec<Child> = (1..3).map(|r| scratch.receiver(r)).collect();
    let (status, out, err) = finish(scratch.push(&[file]), Duration::from_secs(120));
    // Receiver 2 refuses; the push goes on without it.
    assert_eq!(status.code(), Some(3), "{err}\n{out}");
    assert!(
        err.contains(&format!("{} (rank 2)", scratch.addr(2))),
        "{err}"
    );
    let mut receivers = receivers.into_iter();
    let (status1, _, err1) = finish(receivers.next().unwrap(), Duration::from_secs(60));
    let (status2, _, err2) = finish(receivers.next().unwrap(), Duration::from_secs(60));
    assert!(!status2.success());
    assert!(err2.contains("notes.txt exists"), "{err2}");
    assert_eq!(
        std::fs::read(scratch.path("out2/notes.txt")).unwrap(),
        b"old notes"
    );
    assert!(status1.success(), "{err1}");
    assert_eq!(
        std::fs::read(scratch.path("out1/notes.txt")).unwrap(),
        b"new notes"
    );
}

#[test]
fn a_receivers_memory_is_bounded_by_the_message_size_not_the_file_size() {
    const FILE: usize = 128 << 20;
    const CHUNK: usize = 1 << 20;
    let mut scratch = Scratch::new("bounded_memory", 3);
    scratch.max_message = "4MiB";
    // The receivers first, while this process is small: a child's peak
    // (`ru_maxrss`) counts what it shared with this process before `exec`.
    let receivers: Vec<Child> = (1..3).map(|r| scratch.receiver(r)).collect();
    let large = scratch.path("src/large.bin");
    std::fs::create_dir_all(large.parent().unwrap()).unwrap();
    let chunk = |i: usize| contents(CHUNK, 1000 + i as u64);
    {
        use std::io::Write;
        let mut file = std::io::BufWriter::new(std::fs::File::create(&large).unwrap());
        for i in 0..FILE / CHUNK {
            file.write_all(&chunk(i)).unwrap();
        }
    }
    let (status, out, err) = finish(scratch.push(&[large]), Duration::from_secs(600));
    assert!(status.success(), "push failed: {err}\n{out}");
    for (r, receiver) in (1..3).zip(receivers) {
        let (status, _, err, maxrss_kib) = finish_measured(receiver, Duration::from_secs(120));
        assert!(status.success(), "receiver {r} failed: {err}");
        let mut got = std::fs::File::open(scratch.path(&format!("out{r}/large.bin"))).unwrap();
        let mut buf = vec![0; CHUNK];
        for i in 0..FILE / CHUNK {
            got.read_exact(&mut buf).unwrap();
            assert!(buf == chunk(i), "receiver {r}: MiB {i} of the file differs");
        }
        assert_eq!(
            got.read(&mut buf).unwrap(),
            0,
            "receiver {r}: the file is longer"
        );
        // About 9 messages of 4 MiB, and the process itself: far below the
        // 128 MiB file (the receive window, the writer's queue and the
        // buffer pool's budget are what bound it).
        eprintln!("receiver {r}: peak resident {} MiB", maxrss_kib / 1024);
        assert!(
            maxrss_kib < 96 * 1024,
            "receiver {r} peaked at {} MiB resident for a {} MiB file in 4 MiB messages",
            maxrss_kib / 1024,
            FILE >> 20
        );
    }
}

/// `--dry-run` checks and hashes the inputs and says what would be sent,
/// contacting nobody (no receiver runs).
#[test]
fn a_dry_run_says_what_would_be_sent_and_contacts_nobody() {
    let scratch = Scratch::new("dry_run", 3);
    let inputs = make_inputs(&scratch, 20, 3_000_000);
    let mut json = scratch.command("push", &["--json", "--dry-run"]);
    let (status, out, err) = finish(json.args(&inputs).spawn().unwrap(), Duration::from_secs(60));
    assert!(status.success(), "dry run failed: {err}");
    let said = events(&out);
    assert_eq!(said.len(), 1, "{out}");
    let dry = &said[0];
    assert_eq!(dry["event"], "dry_run");
    assert_eq!(
        (dry["files"].as_u64(), dry["links"].as_u64()),
        (Some(21), Some(1))
    );
    assert_eq!(dry["receivers"], 2);
    // The tree, its 7 directories d*, their e* directories, and `empty`.
    assert_eq!(dry["directories"], 1 + 7 + 20 + 1);
    // The manifest, then 3 MB in messages of at most 1 MiB, and the small
    // files batched.
    assert!(dry["messages"].as_u64().unwrap() >= 4, "{dry}");
    let mut text = scratch.command("push", &["--dry-run"]);
    let (status, out, _) = finish(text.args(&inputs).spawn().unwrap(), Duration::from_secs(60));
    assert!(status.success());
    assert!(
        out.starts_with("rdmc push: dry run: would push 21 files")
            && out.contains("nothing was sent"),
        "{out}"
    );
}

/// `--rate` holds the push to its rate (a lower bound on its time, which
/// a loaded machine only lengthens), here over encrypted frames
/// (`--wire-security encrypted` on every member), every byte arriving.
#[test]
fn a_rate_limited_encrypted_push_takes_its_time_and_arrives_whole() {
    let scratch = Scratch::new("rate", 3);
    let file = scratch.path("src/six.bin");
    std::fs::create_dir_all(scratch.path("src")).unwrap();
    std::fs::write(&file, contents(6 << 20, 7)).unwrap();
    let receivers: Vec<Child> = (1..3)
        .map(|r| {
            let rank = r.to_string();
            let extra = [
                "--json",
                "--me",
                &rank,
                "--wire-security",
                "encrypted",
                "--out",
            ];
            scratch
                .command("receive", &extra)
                .arg(scratch.path(&format!("out{r}")))
                .spawn()
                .unwrap()
        })
        .collect();
    let start = Instant::now();
    let extra = ["--json", "--rate", "2MiB", "--wire-security", "encrypted"];
    let push = scratch.command("push", &extra).arg(&file).spawn().unwrap();
    let (status, out, err) = finish(push, Duration::from_secs(120));
    let took = start.elapsed();
    assert!(status.success(), "push failed: {err}\n{out}");
    // Six 1 MiB messages at 2 MiB/s: the last may leave 2.5 s after the
    // first.
    assert!(took >= Duration::from_millis(2500), "took {took:?}");
    for (i, receiver) in receivers.into_iter().enumerate() {
        let (status, _, err) = finish(receiver, Duration::from_secs(60));
        assert!(status.success(), "receiver {} failed: {err}", i + 1);
        let got = std::fs::read(scratch.path(&format!("out{}/six.bin", i + 1))).unwrap();
        assert!(
            got == contents(6 << 20, 7),
            "receiver {} got other bytes",
            i + 1
        );
    }
}
