//! rdmc: reliable multicast of large objects, after RDMC (Behrens, Jha, Birman, Tremel).

#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]

pub mod proto;
pub mod schedule;
