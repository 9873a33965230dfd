//! `rdmc member` across real processes on loopback, on every transport:
//! the scenarios of `member_suite`, one line per transport.

#[macro_use]
mod member_suite;

member_suite!(tcp, &["--transport", "tcp"]);
#[cfg(feature = "ofi")]
member_suite!(ofi, &["--transport", "ofi", "--ofi-provider", "tcp"]);
