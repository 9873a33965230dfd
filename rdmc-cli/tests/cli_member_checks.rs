//! `rdmc member` refuses what is wrong with its command line, members file,
//! inputs or output directory up front: one line naming the cause and a
//! non-zero exit, before it contacts any other member (so each case runs
//! one member alone, and it must not wait for the others).

mod child;
#[allow(dead_code)]
mod cluster_ports;
#[path = "../../rdmc/tests/common/scratch.rs"]
mod scratch;

#[allow(dead_code, unused_macros)]
mod member_suite;

use std::path::PathBuf;
use std::time::Duration;

use member_suite::{Scratch, Transport, wait, write_file};

const TCP: Transport = Transport::tcp("tcp");

/// Run rank `rank` alone with `extra` arguments and `files`; it must exit
/// with status 1 at once (within the bound, far below the connect timeout
/// it would otherwise wait), printing one line that contains `expected`.
fn refused(scratch: &Scratch, rank: usize, extra: &[&str], files: &[PathBuf], expected: &str) {
    let mut args = extra.to_vec();
    if !extra.contains(&"--connect-timeout") {
        args.extend(["--connect-timeout", "120"]);
    }
    let mut child = scratch.command(rank, "key", &args, files).spawn().unwrap();
    let (status, err) = wait(&mut child, Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "{extra:?} {files:?}: {err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.starts_with(&format!("rdmc member {rank}: ")) && err.contains(expected),
        "{extra:?} {files:?}: expected {expected:?} in {err:?}"
    );
}

#[test]
fn bad_inputs_are_refused_before_the_group_forms() {
    let scratch = Scratch::new(&TCP, "checks_inputs", 3, "a key for the input checks");
    let good = scratch.path("good");
    write_file(&good, 1000, 1);
    let missing = scratch.path("missing");
    refused(
        &scratch,
        0,
        &[],
        &[good.clone(), missing],
        "missing: No such file or directory",
    );
    let fifo = scratch.path("fifo");
    let c_fifo = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_fifo.as_ptr(), 0o600) }, 0);
    refused(
        &scratch,
        0,
        &[],
        &[good.clone(), fifo],
        "fifo: is a FIFO; only regular files can be sent",
    );
    refused(
        &scratch,
        0,
        &[],
        &[PathBuf::from("/dev/zero")],
        "/dev/zero: is a character device",
    );
    std::fs::create_dir_all(scratch.path("adir")).unwrap();
    refused(
        &scratch,
        0,
        &[],
        &[scratch.path("adir")],
        "adir: is a directory",
    );
    refused(
        &scratch,
        0,
        &["--max-message-size", "999"],
        &[good],
        "good: 1000 B is more than the largest message, 999 B",
    );
    refused(
        &scratch,
        1,
        &[],
        &[scratch.path("f")],
        "only the root (rank 0) sends files",
    );
}

#[test]
fn bad_settings_are_refused_before_the_group_forms() {
    let scratch = Scratch::new(&TCP, "checks_settings", 2, "a key for the setting checks");
    refused(
        &scratch,
        1,
        &["--connect-timeout", "1e19"],
        &[],
        "--connect-timeout 10000000000000000000 is longer than the most accepted",
    );
    refused(
        &scratch,
        1,
        &["--failure-timeout", "0"],
        &[],
        "--failure-timeout must be more than 0 seconds",
    );
    refused(
        &scratch,
        1,
        &["--failure-timeout=-1"],
        &[],
        "--failure-timeout must be a positive number of seconds",
    );
    refused(
        &scratch,
        1,
        &["--failure-timeout", "NaN"],
        &[],
        "--failure-timeout must be a positive number of seconds",
    );
    refused(
        &scratch,
        1,
        &["--block-size", "1TiB"],
        &[],
        "--block-size must be at least 1 byte and at most 1 GiB",
    );
    refused(
        &scratch,
        1,
        &["--block-size", "0"],
        &[],
        "--block-size must be",
    );
    refused(&scratch, 5, &[], &[], "rank 5 is not in the cluster");
    refused(
        &scratch,
        1,
        &["--algorithm", "hybrid", "--racks", "0,1,1"],
        &[],
        "3 racks given for a group of 2 members",
    );
    refused(
        &scratch,
        1,
        &["--slow", "2"],
        &[],
        "slow member 2 is not in a group of 2",
    );
}

#[test]
fn bad_member_lists_are_refused_before_the_group_forms() {
    let scratch = Scratch::new(&TCP, "checks_members", 2, "a key for the member checks");
    let members = std::fs::read_to_string(scratch.members()).unwrap();
    let first = members.lines().next().unwrap().to_owned();
    std::fs::write(scratch.members(), format!("{first}\n{first}\n")).unwrap();
    refused(
        &scratch,
        1,
        &[],
        &[],
        &format!("nodes 0 and 1 have the same address {first}"),
    );
    std::fs::write(scratch.members(), format!("{first}\n127.0.0.1:0\n")).unwrap();
    refused(
        &scratch,
        1,
        &[],
        &[],
        "node 1's address 127.0.0.1:0 has port 0",
    );
    std::fs::write(scratch.members(), format!("{first}\nnot-an-address\n")).unwrap();
    refused(
        &scratch,
        1,
        &[],
        &[],
        "\"not-an-address\" is not a host:port",
    );
}

#[test]
fn a_bad_output_directory_is_refused_before_the_group_forms() {
    let scratch = Scratch::new(&TCP, "checks_out", 2, "a key for the output checks");
    // Rank 1 writes to `out1`: a file there is not a directory.
    std::fs::write(scratch.path("out1"), "a file").unwrap();
    refused(&scratch, 1, &[], &[], "output directory");
    std::fs::remove_file(scratch.path("out1")).unwrap();
    // An earlier run's outputs are never mixed with this run's.
    std::fs::create_dir_all(scratch.path("out1")).unwrap();
    std::fs::write(scratch.path("out1/3.bin"), "old").unwrap();
    refused(&scratch, 1, &[], &[], "holds 3.bin from an earlier run");
    std::fs::remove_file(scratch.path("out1/3.bin")).unwrap();
    std::fs::write(scratch.path("out1/0.bin.x1y2.part"), "old").unwrap();
    refused(
        &scratch,
        1,
        &[],
        &[],
        "holds 0.bin.x1y2.part from an earlier run",
    );
    // Other files are left alone and do not count.
    std::fs::remove_file(scratch.path("out1/0.bin.x1y2.part")).unwrap();
    std::fs::write(scratch.path("out1/notes.txt"), "mine").unwrap();
    std::fs::write(scratch.path("out1/1.binary"), "mine").unwrap();
    let mut child = scratch
        .command(1, "key", &["--connect-timeout", "0.3"], &[])
        .spawn()
        .unwrap();
    let (status, err) = wait(&mut child, Duration::from_secs(60));
    assert!(!status.success());
    // Connected on demand (the default) the group's creation times out;
    // connecting every member at start, the start does.
    assert!(
        err.contains("timed out waiting for node 0 to create it")
            || err.contains("no connection to node(s) 0 within 300ms"),
        "{err}"
    );
    assert!(scratch.path("out1/notes.txt").exists());
}
