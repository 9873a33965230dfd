//! `rdmc push` and `rdmc receive` across real processes on loopback TCP: a
//! tree of many small files and a larger file reach every receiver byte for
//! byte, each file's BLAKE3 reported; an input that cannot be read, or a
//! missing key, is refused before anyone is contacted; an existing output
//! is never overwritten. (Receivers that fail: `cli_push_faults.rs`.)

mod child;
#[allow(dead_code)]
mod cluster_ports;
mod push_common;
#[path = "../../rdmc/tests/common/scratch.rs"]
mod scratch;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use push_common::*;

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
        // Every file reported once, with the BLAKE3 of its contents.
        let mut received: Vec<(String, String)> = events(&out)
            .iter()
            .filter(|e| e["event"] == "received")
            .map(|e| {
                let path = e["path"].as_str().unwrap().to_owned();
                (path, e["blake3"].as_str().unwrap().to_owned())
            })
            .collect();
        received.sort();
        let want: Vec<(String, String)> = expected
            .iter()
            .map(|(path, data)| (path.clone(), blake3_hex(data)))
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

/// Rank 0 alone: it must refuse up front, exit 1 and say why on one line.
/// No receiver is listening and its connect timeout is at least 60 s, so a
/// refusal within the 30 s wait is one made before connecting, however
/// loaded the machine.
fn refused(mut command: Command, expected: &str) -> String {
    if !command.get_args().any(|a| a == "--connect-timeout") {
        command.args(["--connect-timeout", "600"]);
    }
    let child = command.spawn().unwrap();
    let (status, _, err) = finish(child, Duration::from_secs(30));
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
            refused(command, expected);
        }
    }
}

#[test]
fn a_receiver_never_overwrites_and_the_push_names_it_unless_forced() {
    let scratch = Scratch::new("no_overwrite", 3);
    let file = scratch.path("src/notes.txt");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, b"new notes").unwrap();
    std::fs::create_dir_all(scratch.path("out2")).unwrap();
    std::fs::write(scratch.path("out2/notes.txt"), b"old notes").unwrap();
    let receivers: Vec<Child> = (1..3).map(|r| scratch.receiver(r)).collect();
    let (status, out, err) = finish(
        scratch.push(std::slice::from_ref(&file)),
        Duration::from_secs(120),
    );
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
    // With --force, receiver 2 replaces its differing file and keeps what
    // the push does not name; receiver 1 holds it already.
    std::fs::write(scratch.path("out2/other.txt"), b"kept").unwrap();
    let receivers: Vec<Child> = (1..3).map(|r| scratch.receiver(r)).collect();
    let (status, out, err) = finish(
        scratch.push_with(&["--force"], &[file]),
        Duration::from_secs(120),
    );
    assert!(
        status.success(),
        "{err}
{out}"
    );
    for (rank, receiver) in (1..3).zip(receivers) {
        let (status, out, err) = finish(receiver, Duration::from_secs(60));
        assert!(status.success(), "receiver {rank}: {err}");
        let held = out.contains("\"already_held\":true");
        assert_eq!(held, rank == 1, "receiver {rank}: {out}");
        assert_eq!(
            std::fs::read(scratch.path(&format!("out{rank}/notes.txt"))).unwrap(),
            b"new notes"
        );
    }
    assert_eq!(
        std::fs::read(scratch.path("out2/other.txt")).unwrap(),
        b"kept"
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

/// A push run again after receivers' trees changed sends only the files
/// some receiver lacks (per-file sync): receiver 1 lost a file, receiver
/// 2 holds one changed, the source gained one. Without `--force`,
/// receiver 2 refuses, naming its changed file, and keeps its tree as it
/// was; the others get what they lack and nothing else. With `--force`,
/// receiver 2 gets its two files, the files it held untouched. Every tree
/// ends as the source's (modes and times too).
#[test]
fn a_push_run_again_sends_only_what_receivers_lack() {
    use std::os::unix::fs::MetadataExt;
    let mut scratch = Scratch::new("sync", 4);
    // Messages of at most 64 KiB: each file of 100 kB and more in messages
    // of its own; the small ones batched together.
    scratch.max_message = "64KiB";
    let root = scratch.path("src/tree");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    for i in 0..6 {
        let len = 100_000 + i * 1000;
        std::fs::write(root.join(format!("sub/a{i}")), contents(len, i as u64)).unwrap();
    }
    for i in 0..3 {
        std::fs::write(root.join(format!("s{i}")), contents(100, 50 + i)).unwrap();
    }
    let inputs = [root.clone()];
    let run = |force: bool| {
        let receivers: Vec<Child> = (1..4).map(|r| scratch.receiver(r)).collect();
        let extra: &[&str] = if force { &["--force"] } else { &[] };
        let pushed = finish(scratch.push_with(extra, &inputs), Duration::from_secs(120));
        let received: Vec<_> = receivers
            .into_iter()
            .map(|r| finish(r, Duration::from_secs(60)))
            .collect();
        (pushed, received)
    };
    let sent_bytes = |out: &str| {
        let pushed = events(out);
        let done = pushed.iter().find(|e| e["event"] == "done").expect("done");
        done["sent_bytes"].as_u64().unwrap()
    };
    let out = |rank: usize| scratch.path(&format!("out{rank}"));
    let size = |rel: &str| std::fs::metadata(root.join(rel)).unwrap().len();
    let ((status, stdout, err), _) = run(false);
    assert!(status.success(), "the first push: {err}\n{stdout}");
    let all: u64 = (0..6).map(|i| size(&format!("sub/a{i}"))).sum::<u64>() + 300;
    assert_eq!(sent_bytes(&stdout), all);
    // Receiver 1 loses a file, receiver 2's changes (same size), the
    // source gains one.
    std::fs::remove_file(out(1).join("tree/sub/a2")).unwrap();
    let changed = out(2).join("tree/sub/a4");
    let mut bytes = std::fs::read(&changed).unwrap();
    bytes[500] ^= 1;
    std::fs::write(&changed, &bytes).unwrap();
    std::fs::write(root.join("sub/new"), contents(120_000, 77)).unwrap();
    let kept = std::fs::metadata(out(2).join("tree/sub/a0")).unwrap().ino();
    let ((status, stdout, err), received) = run(false);
    // Receiver 2 refuses its changed file; the push goes on without it.
    assert_eq!(status.code(), Some(3), "{err}\n{stdout}");
    assert_eq!(sent_bytes(&stdout), size("sub/a2") + size("sub/new"));
    let sent = entries(&scratch.path("src"));
    for (rank, (status, _, err)) in (1..4).zip(&received) {
        if rank == 2 {
            assert!(!status.success());
            assert!(err.contains("tree/sub/a4 exists and differs"), "{err}");
        } else {
            assert!(status.success(), "receiver {rank}: {err}");
            assert!(entries(&out(rank)) == sent, "receiver {rank} differs");
        }
    }
    assert_eq!(std::fs::read(&changed).unwrap(), bytes, "left as it was");
    assert!(!out(2).join("tree/sub/new").exists());
    // With --force: receiver 2 gets its changed file and the new one, the
    // others nothing.
    let ((status, stdout, err), received) = run(true);
    assert!(status.success(), "{err}\n{stdout}");
    assert_eq!(sent_bytes(&stdout), size("sub/a4") + size("sub/new"));
    for (rank, (status, out_, err)) in (1..4).zip(&received) {
        assert!(status.success(), "receiver {rank}: {err}");
        let held = out_.contains("\"already_held\":true");
        assert_eq!(held, rank != 2, "receiver {rank}: {out_}");
        assert!(entries(&out(rank)) == sent, "receiver {rank} differs");
    }
    let untouched = std::fs::metadata(out(2).join("tree/sub/a0")).unwrap().ino();
    assert_eq!(untouched, kept, "a file held was rewritten");
    // And once more: nothing to send.
    let ((status, stdout, err), _) = run(false);
    assert!(status.success(), "{err}\n{stdout}");
    assert_eq!(sent_bytes(&stdout), 0);
}
