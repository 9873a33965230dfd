//! `rdmc member` across real processes on loopback, on every transport:
//! the scenarios of `member_suite`, one line per transport. The `ofi` line
//! runs libfabric's `tcp` provider on loopback unless `RDMC_OFI_PROVIDER`
//! and `RDMC_OFI_FABRIC_ADDR` say otherwise (`verbs` on Soft-RoCE in
//! `ci/softroce-vm.sh`).

mod child;
#[allow(dead_code)]
mod cluster_ports;
#[path = "../../rdmc/tests/common/scratch.rs"]
mod scratch;

#[macro_use]
mod member_suite;

member_suite!(tcp, &["--transport", "tcp"]);
#[cfg(feature = "ofi")]
member_suite!(ofi, &["--transport", "ofi"], ofi_env);

/// Three tcp members, each given `options`, deliver a file byte-exact
/// (test `test`'s scratch directory).
fn three_members_deliver_a_file(test: &str, options: &[&str], seed: u8) {
    use std::time::Duration;

    use member_suite::{Scratch, Transport, time_scale, wait, write_file};

    const TCP: Transport = Transport::tcp("tcp");
    let scratch = Scratch::new(&TCP, test, 3, "a cluster key of more than sixteen bytes\n");
    let file = scratch.path("f");
    let content = write_file(&file, 300_001, seed);
    let mut children: Vec<_> = (0..3)
        .map(|r| {
            let files = if r == 0 {
                std::slice::from_ref(&file)
            } else {
                &[]
            };
            scratch.spawn_member(r, options, files)
        })
        .collect();
    for (rank, child) in children.iter_mut().enumerate() {
        let (status, err) = wait(child, Duration::from_secs(60 * time_scale()));
        assert!(status.success(), "{test}: rank {rank} failed: {err}");
    }
    for rank in 1..3 {
        let got = std::fs::read(scratch.path(&format!("out{rank}/0.bin"))).unwrap();
        assert!(got == content, "{test}: rank {rank}: the file differs");
    }
}

/// `--wire-security` (tcp): members that agree on `none` deliver a file
/// byte-exact; a member that protects its frames and one that does not
/// cannot talk, and each fails naming the mismatch, the other and both
/// modes.
mod wire_security {
    use std::time::Duration;

    use super::member_suite::{Scratch, Transport, time_scale, wait, write_file};

    const TCP: Transport = Transport::tcp("tcp");

    #[test]
    fn members_without_protection_deliver_and_a_mismatch_is_named() {
        super::three_members_deliver_a_file("wire_none", &["--wire-security", "none"], 7);

        let mixed = Scratch::new(
            &TCP,
            "wire_mixed",
            2,
            "a cluster key of more than sixteen bytes\n",
        );
        let file = mixed.path("f");
        write_file(&file, 1000, 3);
        let connect = (6 * time_scale()).to_string();
        let mut zero = mixed.spawn_member(
            0,
            &["--wire-security", "none", "--connect-timeout", &connect],
            std::slice::from_ref(&file),
        );
        let mut one = mixed.spawn_member(1, &["--connect-timeout", &connect], &[]);
        // Each fails in one line that names the mismatch, the other and
        // both modes, its own first.
        for (rank, child, other, modes) in [
            (
                0,
                &mut zero,
                "node 1",
                "this node uses none, node 1 uses authenticated",
            ),
            (
                1,
                &mut one,
                "node 0",
                "this node uses authenticated, node 0 uses none",
            ),
        ] {
            let (status, err) = wait(child, Duration::from_secs(30 * time_scale()));
            assert!(!status.success(), "rank {rank} should fail");
            // Connected on demand (the default), the group fails naming
            // the other, the link's mismatch its reason.
            let (mine, theirs) = modes
                .strip_prefix("this node uses ")
                .and_then(|m| m.split_once(&format!(", {other} uses ")))
                .expect("both modes");
            let on_demand = format!(
                "{other} failed (unreachable: wire security mismatch: this node uses {mine}, the peer {theirs})"
            );
            assert!(
                err.contains(&on_demand)
                    || (err.contains(&format!("wire security mismatch with {other}"))
                        && err.contains(modes)),
                "rank {rank} should name the mismatch with {other}: {err}"
            );
            assert_eq!(err.lines().count(), 1, "rank {rank}: one line: {err}");
        }
    }
}

/// `--tcp-congestion-control` (tcp): members on `reno` deliver a file
/// byte-exact; a name the kernel lacks stops the member at once, in one
/// line naming it and what the kernel has.
mod congestion_control {
    use std::time::Duration;

    use super::member_suite::{Scratch, Transport, time_scale, wait};

    const TCP: Transport = Transport::tcp("tcp");

    #[test]
    fn members_on_reno_deliver_and_an_unknown_name_is_refused() {
        super::three_members_deliver_a_file("cc_reno", &["--tcp-congestion-control", "reno"], 9);

        let lone = Scratch::new(
            &TCP,
            "cc_unknown",
            2,
            "a cluster key of more than sixteen bytes\n",
        );
        // Rank 1 never starts: the refusal must come before any connecting.
        let mut zero = lone.spawn_member(
            0,
            &[
                "--tcp-congestion-control",
                "no_such_cc",
                "--connect-timeout",
                "3600",
            ],
            &[],
        );
        let (status, err) = wait(&mut zero, Duration::from_secs(20 * time_scale()));
        assert!(!status.success(), "rank 0 should fail");
        assert!(
            err.contains("no_such_cc") && err.contains("this kernel has"),
            "rank 0 should name the refused congestion control: {err}"
        );
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
}

/// `--open-membership` (tcp): members that all give it deliver a file
/// byte-exact; a member with it and one without refuse each other, each
/// failing in one line.
mod open_membership {
    use std::time::Duration;

    use super::member_suite::{Scratch, Transport, time_scale, wait};

    const TCP: Transport = Transport::tcp("tcp");

    #[test]
    fn members_with_open_membership_deliver_and_a_mixed_pair_refuse_each_other() {
        super::three_members_deliver_a_file("open", &["--open-membership"], 11);

        let mixed = Scratch::new(
            &TCP,
            "open_mixed",
            2,
            "a cluster key of more than sixteen bytes\n",
        );
        let connect = (3 * time_scale()).to_string();
        let file = mixed.path("f");
        super::member_suite::write_file(&file, 1000, 5);
        let mut zero = mixed.spawn_member(
            0,
            &["--open-membership", "--connect-timeout", &connect],
            std::slice::from_ref(&file),
        );
        let mut one = mixed.spawn_member(1, &["--connect-timeout", &connect], &[]);
        for (rank, child) in [(0, &mut zero), (1, &mut one)] {
            let (status, err) = wait(child, Duration::from_secs(60 * time_scale()));
            assert!(!status.success(), "rank {rank} should fail");
            // Why: another member list, or open membership on one side.
            assert!(err.contains("member list"), "rank {rank} says why: {err}");
            assert_eq!(err.lines().count(), 1, "rank {rank}: one line: {err}");
        }
    }
}
