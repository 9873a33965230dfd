//! `tcp`: the default transport, RDMC over TCP (seed 001 Sec. 5.3's future work).

pub(crate) mod frame;
pub(crate) mod link;
