//! The route a relayed signal carries: the payload of a relayed-signal
//! frame, little-endian.
//!
//! | bytes | field |
//! |---|---|
//! | 0 | `at`: the index in the path of the node this hop delivers to |
//! | 1 | `count`: the path's length, origin and destination included |
//! | 2..4 | reserved, 0 |
//! | 4.. | the path: `count` node ids, 4 bytes each, from the origin to the destination |
//!
//! A path has 2 to [`MAX_HOPS`] distinct nodes; `at` is 1 or more (the
//! origin sends the frame to the node at index 1).

use super::FrameError;
use crate::ids::NodeId;

/// The longest path: up and down a binomial tree of 2³² members.
pub(crate) const MAX_HOPS: usize = 66;

/// Bytes before the path.
const PREFIX: usize = 4;

/// A relayed signal's route, and how far along it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Route {
    /// The nodes from the origin to the destination.
    pub(crate) path: Vec<NodeId>,
    /// The index in `path` of the node the frame goes to next.
    pub(crate) at: usize,
}

impl Route {
    /// A route along `path`, at its first hop; `None` if the path is
    /// shorter than 2 or longer than [`MAX_HOPS`].
    pub(crate) fn new(path: Vec<NodeId>) -> Option<Self> {
        (2..=MAX_HOPS)
            .contains(&path.len())
            .then_some(Route { path, at: 1 })
    }

    /// The node the signal started at.
    pub(crate) fn origin(&self) -> NodeId {
        self.path[0]
    }

    /// Whether the node at `at` is the destination.
    pub(crate) fn arrived(&self) -> bool {
        self.at + 1 == self.path.len()
    }

    /// The node this hop delivers to.
    pub(crate) fn here(&self) -> NodeId {
        self.path[self.at]
    }

    /// The node before this hop: the link's peer it arrives from.
    pub(crate) fn previous(&self) -> NodeId {
        self.path[self.at - 1]
    }

    /// The route one hop further on (not past the destination).
    pub(crate) fn next_hop(&self) -> Self {
        debug_assert!(!self.arrived());
        Route {
            path: self.path.clone(),
            at: self.at + 1,
        }
    }

    /// The encoded payload's length.
    pub(crate) fn encoded_len(&self) -> usize {
        PREFIX + 4 * self.path.len()
    }

    /// The payload bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.extend_from_slice(&[self.at as u8, self.path.len() as u8, 0, 0]);
        for node in &self.path {
            out.extend_from_slice(&node.0.to_le_bytes());
        }
        out
    }

    /// Decode and check a payload.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, FrameError> {
        check_len(u32::try_from(bytes.len()).map_err(|_| FrameError::BadRoute)?)?;
        let (at, count) = (usize::from(bytes[0]), usize::from(bytes[1]));
        if bytes[2] != 0 || bytes[3] != 0 {
            return Err(FrameError::Reserved);
        }
        if PREFIX + 4 * count != bytes.len() || at == 0 || at >= count {
            return Err(FrameError::BadRoute);
        }
        let path: Vec<NodeId> = bytes[PREFIX..]
            .chunks_exact(4)
            .map(|c| NodeId(u32::from_le_bytes(c.try_into().expect("4 bytes"))))
            .collect();
        let mut sorted = path.clone();
        sorted.sort_unstable();
        if sorted.windows(2).any(|w| w[0] == w[1]) {
            return Err(FrameError::BadRoute);
        }
        Ok(Route { path, at })
    }
}

/// Whether a relayed signal's payload of `len` bytes can hold a route.
pub(crate) fn check_len(len: u32) -> Result<(), FrameError> {
    let len = len as usize;
    let fits =
        (PREFIX + 8..=PREFIX + 4 * MAX_HOPS).contains(&len) && (len - PREFIX).is_multiple_of(4);
    if fits {
        Ok(())
    } else {
        Err(FrameError::BadRoute)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn nodes(ids: &[u32]) -> Vec<NodeId> {
        ids.iter().copied().map(NodeId).collect()
    }

    #[test]
    fn a_route_round_trips_at_every_hop() {
        let mut route = Route::new(nodes(&[5, 4, 0, 2, 7])).unwrap();
        loop {
            let bytes = route.encode();
            assert_eq!(bytes.len(), route.encoded_len());
            assert_eq!(Route::decode(&bytes), Ok(route.clone()));
            if route.arrived() {
                break;
            }
            route = route.next_hop();
        }
        assert_eq!((route.origin(), route.here()), (NodeId(5), NodeId(7)));
        assert_eq!(route.previous(), NodeId(2));
    }

    #[test]
    fn malformed_routes_are_refused() {
        assert_eq!(Route::new(nodes(&[1])), None);
        assert_eq!(Route::new(vec![NodeId(0); MAX_HOPS + 1]), None);
        let good = Route::new(nodes(&[1, 2, 3])).unwrap().encode();
        // At the origin (0), or past the end.
        for at in [0u8, 3, 200] {
            let mut bad = good.clone();
            bad[0] = at;
            assert_eq!(Route::decode(&bad), Err(FrameError::BadRoute), "at {at}");
        }
        // A count the length does not hold.
        let mut bad = good.clone();
        bad[1] = 4;
        assert_eq!(Route::decode(&bad), Err(FrameError::BadRoute));
        // Reserved bytes.
        let mut bad = good.clone();
        bad[3] = 1;
        assert_eq!(Route::decode(&bad), Err(FrameError::Reserved));
        // A loop.
        let looped = Route::new(nodes(&[1, 2, 1])).unwrap().encode();
        assert_eq!(Route::decode(&looped), Err(FrameError::BadRoute));
        // The longest route fits.
        let longest: Vec<NodeId> = (0..MAX_HOPS as u32).map(NodeId).collect();
        let encoded = Route::new(longest).unwrap().encode();
        assert_eq!(encoded.len(), PREFIX + 4 * MAX_HOPS);
        assert_eq!(check_len(encoded.len() as u32), Ok(()));
        assert!(Route::decode(&encoded).is_ok());
        // Lengths that hold no route.
        for len in [0, 4, 8, 13, PREFIX + 4 * MAX_HOPS + 4] {
            assert_eq!(check_len(len as u32), Err(FrameError::BadRoute), "{len}");
        }
        assert_eq!(
            Route::decode(&good[..good.len() - 4]),
            Err(FrameError::BadRoute)
        );
    }

    proptest! {
        /// Any bytes decode to a route or an error, never a panic; what
        /// decodes encodes back to the same bytes.
        #[test]
        fn any_payload_decodes_or_is_refused(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(route) = Route::decode(&bytes) {
                prop_assert_eq!(route.encode(), bytes);
                prop_assert!(route.at >= 1 && route.at < route.path.len());
            }
        }
    }
}
