//! routerlab-policy-kit: the building blocks every routing policy ends up needing, written
//! once so that policies differ only in their rule.
//!
//! Each piece was lifted out of a built-in plugin when a second policy needed it: the
//! available-endpoint set and the prefix trie out of `lcp`, the consistent-hash ring out of
//! `simhash`, the per-endpoint threshold loop out of the detectors. It depends only on
//! `routerlab-core` and holds no `unsafe`, so a third-party plugin can depend on it without
//! taking in anything of the host.

pub mod block_masks;
pub mod duration;
pub mod endpoint_set;
pub mod ids;
pub mod load;
pub mod lru;
pub mod pick;
pub mod pod_index;
pub mod rate;
pub mod ring;
pub mod scaling;
pub mod threshold;
pub mod trie;

pub use block_masks::BlockMasks;
pub use duration::seconds_ns;
pub use endpoint_set::EndpointSet;
pub use ids::DenseIds;
pub use load::{Score, inflight, prefix_key, range_of, within_bound};
pub use lru::LruMap;
pub use pick::{pick_min, pick_uniform};
pub use pod_index::PodPrefixIndex;
pub use rate::RateWindow;
pub use ring::HashRing;
pub use scaling::{Behavior, Hpa, HpaPools};
pub use threshold::flag_where;
pub use trie::PrefixTrie;
