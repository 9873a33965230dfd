//! Random and mutated inputs to the control message decoder of `ofi` and
//! `rdma`: nothing a peer puts on a control endpoint (or queue pair) may
//! panic the decoder, and whatever decodes is the one canonical encoding of
//! its value. Messages have a fixed size, so decoding allocates nothing by
//! what it is sent (only the text of an error). The small variant runs with
//! every `cargo test --features ofi` (or `rdma`); the `#[ignore]`d one is
//! part of the long campaign (see the frame decoder's fuzz tests for how to
//! run it).

use proptest::prelude::*;
use proptest::test_runner::TestCaseResult;

use super::{ControlMessage, Credit, MSG_LEN};
use crate::ids::GroupId;
use crate::transport::frame::fuzz_tests::{any_signal, fuzz, mutated, word};

/// Every kind of control message, with interesting fields.
fn any_message() -> impl Strategy<Value = ControlMessage> {
    prop_oneof![
        (word(), any_signal()).prop_map(|(g, signal)| ControlMessage::Signal {
            group: GroupId(g),
            signal,
        }),
        (word(), word(), word(), word(), word()).prop_map(|(g, slot, len, addr, key)| {
            ControlMessage::Credit(Credit {
                group: GroupId(g),
                slot: slot as u32,
                len,
                addr,
                key,
            })
        }),
        (word(), word(), word(), word()).prop_map(|(g, slot, len, immediate)| {
            ControlMessage::BlockHeader {
                group: GroupId(g),
                slot: slot as u32,
                len,
                immediate,
            }
        }),
        Just(ControlMessage::Heartbeat),
        word().prop_map(|g| ControlMessage::Revoke { group: GroupId(g) }),
        (word(), word()).prop_map(|(g, slot)| ControlMessage::Returned {
            group: GroupId(g),
            slot: slot as u32,
        }),
    ]
}

fn message_input() -> impl Strategy<Value = [u8; MSG_LEN]> {
    mutated(any_message().prop_map(|m| m.encode()))
}

fn check_message(bytes: [u8; MSG_LEN]) -> TestCaseResult {
    if let Ok(message) = ControlMessage::decode(&bytes) {
        prop_assert_eq!(message.encode(), bytes, "not the canonical encoding");
    }
    Ok(())
}

#[test]
fn control_messages_from_strangers_never_panic() {
    fuzz("ofi control message", 3_000, message_input(), check_message);
}

#[test]
#[ignore = "long: millions of cases (RELIABILITY.md)"]
fn control_messages_long_campaign() {
    fuzz(
        "ofi control message",
        3_000_000,
        message_input(),
        check_message,
    );
}
