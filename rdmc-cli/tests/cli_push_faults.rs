//! `rdmc push` when receivers fail, across real processes on loopback TCP:
//! receivers killed or terminated at any moment of a push are left out,
//! the push exits 3 naming them and the others get every file; run again,
//! the push fills the ones that lack files and sends the others nothing.

mod child;
#[allow(dead_code)]
mod cluster_ports;
mod push_common;
#[path = "../../rdmc/tests/common/scratch.rs"]
mod scratch;

use std::io::{BufRead, BufReader};
use std::process::{Child, ExitStatus};
use std::time::Duration;

use push_common::*;

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

/// `SIGTERM` to the pushing host mid-push: it says so in one line and
/// exits 1; every receiver fails naming it and keeps nothing (no file, no
/// staging directory).
#[test]
fn the_pushing_host_terminated_mid_push_says_so_and_receivers_keep_nothing() {
    let scratch = Scratch::new("push-terminated", 4);
    let (mut receivers, push) = start_push(&scratch, 3, 20, 0);
    let (first, stdout) = after_files(&mut receivers, 1, 1);
    receivers[0] = Some(first);
    // SAFETY: signalling our own child process, which is still running.
    assert_eq!(
        unsafe { libc::kill(push.id() as libc::pid_t, libc::SIGTERM) },
        0
    );
    let (status, _, err) = finish(push, Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "push: {err}");
    assert!(err.contains("terminated (SIGTERM)"), "push: {err}");
    assert_eq!(err.lines().count(), 1, "push: one line: {err}");
    let mut stdouts = [Some(stdout), None, None];
    for rank in 1..=3 {
        let mut receiver = receivers[rank - 1].take().unwrap();
        if let Some(stdout) = stdouts[rank - 1].take() {
            receiver.stdout = Some(stdout.into_inner());
        }
        let (status, _, err) = finish(receiver, Duration::from_secs(60));
        assert!(!status.success(), "receiver {rank} succeeded: {err}");
        assert!(
            err.contains("node 0") || err.contains("rank 0"),
            "receiver {rank} names the pushing host: {err}"
        );
        let left = std::fs::read_dir(scratch.path(&format!("out{rank}")))
            .unwrap()
            .count();
        assert_eq!(left, 0, "receiver {rank} kept entries: {err}");
    }
}

/// `files` files of 1.5 MiB (two messages each, contents from `seed`)
/// under `src/files`, `receivers` receivers started, then the push: the
/// receivers (rank r at r - 1) and the push.
fn start_push(
    scratch: &Scratch,
    receivers: usize,
    files: u64,
    seed: u64,
) -> (Vec<Option<Child>>, Child) {
    let root = scratch.path("src/files");
    std::fs::create_dir_all(&root).unwrap();
    for i in 0..files {
        std::fs::write(root.join(format!("f{i:02}")), contents(3 << 19, seed + i)).unwrap();
    }
    let receivers = (1..=receivers).map(|r| Some(scratch.receiver(r))).collect();
    (receivers, scratch.push(&[root]))
}

/// Take receiver `rank` out of `receivers` once it has reported `files`
/// files received: the receiver, its stdout (still being read).
fn after_files(
    receivers: &mut [Option<Child>],
    rank: usize,
    files: usize,
) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut child = receivers[rank - 1].take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    for _ in 0..files {
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert!(line.contains("\"received\""), "{line}");
    }
    (child, stdout)
}

/// Receivers 1 and 3 end with success and every entry of the source (its
/// contents, modes and times): their stdouts.
fn survivors_complete(
    scratch: &Scratch,
    receivers: &mut [Option<Child>],
    what: &str,
) -> Vec<String> {
    let sent = entries(&scratch.path("src"));
    [1, 3]
        .into_iter()
        .map(|rank| {
            let receiver = receivers[rank - 1].take().unwrap();
            let (status, out, err) = finish(receiver, Duration::from_secs(120));
            assert!(status.success(), "{what}receiver {rank}: {err}");
            assert!(
                entries(&scratch.path(&format!("out{rank}"))) == sent,
                "{what}receiver {rank} differs"
            );
            out
        })
        .collect()
}

/// Four members, rank 2 sent `signal` once it has received its first
/// file: the push goes on without it and exits 3 ("partial") naming it,
/// and the other receivers end with every file, checked, naming it too.
/// Rank 2's exit status, its stderr, and how many entries its output
/// directory holds.
fn stop_a_receiver_mid_push(test: &str, signal: libc::c_int) -> (ExitStatus, String, usize) {
    let scratch = Scratch::new(test, 4);
    let (mut receivers, push) = start_push(&scratch, 3, 20, 0);
    let (mut victim, stdout) = after_files(&mut receivers, 2, 1);
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
    let outs = survivors_complete(&scratch, &mut receivers, "");
    for (rank, out) in [1, 3].into_iter().zip(outs) {
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
/// run again sends only what the two lack (their killed runs' checked
/// pieces are kept); run once more, it sends nothing. Each exits 0.
#[test]
fn two_receivers_killed_at_once_mid_push_leave_the_others_complete_and_a_rerun_fills_them() {
    let scratch = Scratch::new("two_killed", 5);
    let (mut receivers, push) = start_push(&scratch, 4, 24, 100);
    // Ranks 2 and 4, once each has its third file.
    let (mut first, _stdout) = after_files(&mut receivers, 2, 3);
    let (mut second, _stdout) = after_files(&mut receivers, 4, 3);
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
    survivors_complete(&scratch, &mut receivers, "");
    let sent = entries(&scratch.path("src"));
    let total: u64 = 24 * (3 << 19);
    // The same push again, every receiver running: ranks 1 and 3 hold
    // everything and are sent nothing; ranks 2 and 4 take over what their
    // killed runs kept (three files at least, checked) and are sent the
    // rest only: the root sends exactly what the one that kept less lacks.
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
        let root_done = events(&out)
            .into_iter()
            .find(|e| e["event"] == "done")
            .expect("done");
        let mut missing = 0;
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
                // Files kept from the killed run count as received.
                assert_eq!(received, 24, "receiver {rank}: {out}");
                let kept = said
                    .iter()
                    .find(|e| e["event"] == "resumed")
                    .map_or(0, |e| e["bytes_held"].as_u64().unwrap());
                assert!(kept >= 3 * (3 << 19), "receiver {rank} kept {kept}: {out}");
                missing = missing.max(total - kept);
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
        assert_eq!(root_done["sent_bytes"], missing, "{out}");
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
        let (mut receivers, push) = start_push(&scratch, 3, 16, 200);
        let (mut victim, _stdout) = after_files(&mut receivers, 2, 1);
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
        survivors_complete(&scratch, &mut receivers, &format!("round {round}: "));
        let sent = entries(&scratch.path("src"));
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

/// A receiver stopped (`SIGSTOP`) mid-push, alive but silent: after the
/// failure timeout it is taken for failed and left out, the others get
/// every file and the push exits 3 naming it. Resumed, it learns that it
/// was left out: it exits non-zero and keeps no entry of the push.
#[test]
fn a_stalled_receiver_is_left_out_and_learns_it_when_it_resumes() {
    let scratch = Scratch::new("stalled", 4);
    let (mut receivers, push) = start_push(&scratch, 3, 20, 300);
    let (mut victim, stdout) = after_files(&mut receivers, 2, 1);
    let pid = victim.id() as libc::pid_t;
    // SAFETY: signalling our own child process, which is still running.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let (status, out, err) = finish(push, Duration::from_secs(120));
    assert_eq!(status.code(), Some(3), "push: {err}\n{out}");
    let named = format!("{} (rank 2)", scratch.addr(2));
    assert!(err.contains(&named), "{err}");
    survivors_complete(&scratch, &mut receivers, "");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    victim.stdout = Some(stdout.into_inner());
    let (status, _, err) = finish(victim, Duration::from_secs(60));
    eprintln!("the stalled receiver said: {err}");
    assert!(
        !status.success(),
        "the stalled receiver must not succeed: {err}"
    );
    assert_eq!(
        std::fs::read_dir(scratch.path("out2")).unwrap().count(),
        0,
        "the stalled receiver kept part of the push: {err}"
    );
}
