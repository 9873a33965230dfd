//! `rdmc member` with per-node identities (`rdmc keygen --authority`,
//! `--node`, `--identity`), across real processes on loopback: members
//! that each hold their own identity multicast byte-identical files; a
//! member given another node's identity refuses to start, naming the
//! mismatch; a member without an identity does not join members with one.

mod child;
#[allow(dead_code)]
mod cluster_ports;
#[path = "../../rdmc/tests/common/scratch.rs"]
mod scratch;

#[allow(dead_code, unused_macros)]
mod member_suite;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use member_suite::{Scratch, Transport, wait, write_file};

const TCP: Transport = Transport::tcp("tcp_identity");

/// Run `rdmc keygen` with `args`; it must succeed.
fn keygen(args: &[&Path]) {
    let out = Command::new(env!("CARGO_BIN_EXE_rdmc"))
        .arg("keygen")
        .args(args)
        .output()
        .expect("rdmc runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An authority, and an identity for each of nodes `0..n` (`id0`, ...).
fn identities(scratch: &Scratch, n: usize) {
    let authority = scratch.path("authority");
    keygen(&[Path::new("--authority"), &authority]);
    for node in 0..n {
        let out = scratch.path(&format!("id{node}"));
        let node = node.to_string();
        keygen(&[
            Path::new("--authority"),
            &authority,
            Path::new("--node"),
            Path::new(&node),
            Path::new("--out"),
            &out,
        ]);
    }
}

/// Rank `rank` proving itself with identity `id{identity}`.
fn member(
    scratch: &Scratch,
    rank: usize,
    identity: usize,
    extra: &[&str],
    files: &[PathBuf],
) -> Child {
    let id = scratch.path(&format!("id{identity}"));
    let mut extra = extra.to_vec();
    extra.extend(["--identity", id.to_str().unwrap()]);
    scratch
        .command(rank, "key", &extra, files)
        .env("RUST_LOG", "warn")
        .spawn()
        .expect("rdmc runs")
}

#[test]
fn members_with_their_own_identities_multicast_and_another_nodes_is_refused() {
    let scratch = Scratch::new(
        &TCP,
        "impostor",
        4,
        "a key for the identity test, long enough",
    );
    identities(&scratch, 4);
    let file = scratch.path("file");
    let content = write_file(&file, 3_000_017, 7);
    let files = [file];
    let out = |rank: usize| scratch.path(&format!("out{rank}"));
    let extra = ["--linger", "2", "--block-size", "64KiB"];
    let mut real: Vec<Child> = (0..4)
        .map(|r| member(&scratch, r, r, &extra, if r == 0 { &files } else { &[] }))
        .collect();
    scratch.wait_for_output(1, 0, Duration::from_secs(60));
    // Node 3 is up: a second process given node 2's identity for rank 3
    // refuses to start, naming the mismatch (the members refuse such a
    // process too, whether node 3 is up or down: the library's tests).
    let mut impostor = member(&scratch, 3, 2, &["--connect-timeout", "2"], &[]);
    let (status, err) = wait(&mut impostor, Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "the impostor must not start: {err}");
    assert!(
        err.contains("the certificate is for node-2.rdmc.internal, not node 3"),
        "{err}"
    );
    for (rank, child) in real.iter_mut().enumerate() {
        let (status, err) = wait(child, Duration::from_secs(60));
        assert!(status.success(), "rank {rank}: {err}");
    }
    for rank in 1..4 {
        let got = std::fs::read(out(rank).join("0.bin")).unwrap();
        assert!(got == content, "rank {rank}'s copy differs");
    }
    // A member without an identity cannot join members with one.
    let plain = scratch
        .command(1, "key", &["--connect-timeout", "3"], &[])
        .spawn()
        .unwrap();
    let mut members = [
        member(&scratch, 0, 0, &["--connect-timeout", "3"], &files),
        plain,
    ];
    for (rank, child) in members.iter_mut().enumerate() {
        let (status, err) = wait(child, Duration::from_secs(60));
        assert!(
            !status.success(),
            "rank {rank} formed a mixed cluster: {err}"
        );
    }
}

#[test]
fn a_member_given_another_nodes_identity_is_refused_before_it_starts() {
    let scratch = Scratch::new(
        &TCP,
        "wrong_id",
        2,
        "a key for the identity test, long enough",
    );
    identities(&scratch, 2);
    let mut child = member(&scratch, 1, 0, &["--connect-timeout", "120"], &[]);
    let (status, err) = wait(&mut child, Duration::from_secs(30));
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("the certificate is for node-0.rdmc.internal, not node 1"),
        "{err}"
    );
    let missing = scratch.path("nowhere");
    let mut child = scratch
        .command(1, "key", &["--identity", missing.to_str().unwrap()], &[])
        .spawn()
        .unwrap();
    let (status, err) = wait(&mut child, Duration::from_secs(30));
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("--identity") && err.contains("nowhere"),
        "{err}"
    );
}
