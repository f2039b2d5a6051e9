//! A consistent-hash ring: each endpoint owns `virtual_nodes` points hashed from its name,
//! so the mapping from positions to endpoints survives endpoints joining and leaving (only
//! the positions of the one that changed move).

use routerlab_core::hash::hash64;
use routerlab_core::{EndpointId, Endpoints};

/// Points on a 64-bit ring, each owned by an endpoint.
#[derive(Debug, Clone)]
pub struct HashRing {
    virtual_nodes: u64,
    /// (position, endpoint), sorted by position.
    points: Vec<(u64, EndpointId)>,
}

impl HashRing {
    /// An empty ring giving each endpoint `virtual_nodes` points.
    pub fn new(virtual_nodes: u64) -> HashRing {
        HashRing {
            virtual_nodes,
            points: Vec::new(),
        }
    }

    /// Places every endpoint of the list: point `v` of an endpoint is the hash of
    /// `"{name}#{v}"`.
    pub fn add(&mut self, endpoints: &Endpoints<'_>) {
        for endpoint in endpoints.iter() {
            for vnode in 0..self.virtual_nodes {
                let key = format!("{}#{vnode}", endpoint.name());
                self.points.push((hash64(key.as_bytes(), 0), endpoint.id()));
            }
        }
        self.points.sort_unstable();
    }

    /// Removes every point of `ids`.
    pub fn remove(&mut self, ids: &[EndpointId]) {
        self.points.retain(|(_, id)| !ids.contains(id));
    }

    /// The first endpoint clockwise from `position` (inclusive) for which `accept` holds.
    pub fn first_from(
        &self,
        position: u64,
        mut accept: impl FnMut(EndpointId) -> bool,
    ) -> Option<EndpointId> {
        let start = self.points.partition_point(|(p, _)| *p < position);
        let (after, before) = (&self.points[start..], &self.points[..start]);
        after
            .iter()
            .chain(before)
            .map(|(_, id)| *id)
            .find(|id| accept(*id))
    }
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::EndpointsBuilder;

    use super::*;

    #[test]
    fn a_position_keeps_its_endpoint_unless_that_one_leaves() {
        let endpoints = EndpointsBuilder::new(4);
        let mut ring = HashRing::new(50);
        ring.add(&endpoints.view());
        let owners: Vec<EndpointId> = (0..64u64)
            .map(|p| {
                ring.first_from(p.wrapping_mul(0x9E37_79B9_7F4A_7C15), |_| true)
                    .unwrap()
            })
            .collect();
        ring.remove(&[EndpointId(2)]);
        for (p, before) in owners.iter().enumerate() {
            let after = ring
                .first_from((p as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15), |_| true)
                .unwrap();
            if *before != EndpointId(2) {
                assert_eq!(after, *before, "position {p} moved");
            } else {
                assert_ne!(after, EndpointId(2));
            }
        }
        assert_eq!(
            ring.first_from(0, |id| id == EndpointId(3)),
            Some(EndpointId(3))
        );
        assert_eq!(ring.first_from(0, |_| false), None);
    }
}
