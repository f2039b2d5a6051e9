//! One small mask per dense block id: which of up to 64 slots (endpoints, list positions)
//! hold that block.
//!
//! Indexed by block id, such a table has an entry for every block the host ever interned,
//! whether or not this owner saw it: a router replica's trie spans the ids of the whole
//! trace while holding only its share. So the entries are as narrow as the highest slot
//! seen so far needs: one byte for a fleet of up to 8 endpoints, widened (once, by copying)
//! when a higher slot arrives. Against a `u64` per block that is 8× less memory to fault in
//! and to walk for the common fleet sizes, which is what made several replicas' tries cost
//! more than one.

/// Which of up to 64 slots hold each block id.
#[derive(Debug, Clone)]
pub struct BlockMasks {
    words: Words,
}

#[derive(Debug, Clone)]
enum Words {
    W8(Vec<u8>),
    W16(Vec<u16>),
    W32(Vec<u32>),
    W64(Vec<u64>),
}

impl Default for BlockMasks {
    fn default() -> BlockMasks {
        BlockMasks {
            words: Words::W8(Vec::new()),
        }
    }
}

/// Runs `$body` with `$v` bound to the table's vector, whatever its width.
macro_rules! each_width {
    ($words:expr, $v:ident => $body:expr) => {
        match $words {
            Words::W8($v) => $body,
            Words::W16($v) => $body,
            Words::W32($v) => $body,
            Words::W64($v) => $body,
        }
    };
}

#[allow(
    clippy::useless_conversion,
    reason = "each_width! widens every width with u64::from, the 64-bit one included"
)]
impl BlockMasks {
    /// The slots holding block `id` (0: none, or an id never set).
    #[inline]
    pub fn get(&self, id: u32) -> u64 {
        each_width!(&self.words, v => v.get(id as usize).map_or(0, |w| u64::from(*w)))
    }

    /// Whether no block id has an entry yet.
    pub fn is_empty(&self) -> bool {
        each_width!(&self.words, v => v.is_empty())
    }

    /// Calls `step(id, mask)` for each id of `ids` in order until it returns `false`: one
    /// loop per width, so a walk down a chain does not re-dispatch at every block.
    #[inline]
    pub fn walk(&self, ids: &[u32], mut step: impl FnMut(u32, u64) -> bool) {
        each_width!(&self.words, v => {
            for id in ids {
                let mask = v.get(*id as usize).map_or(0, |w| u64::from(*w));
                if !step(*id, mask) {
                    break;
                }
            }
        })
    }

    /// Marks slot `slot` (below 64) as holding each block of `ids`; how many it did not
    /// hold already.
    #[inline]
    pub fn insert_all(&mut self, ids: &[u32], slot: u32) -> u64 {
        debug_assert!(slot < 64, "slot {slot} has no bit");
        if slot >= self.width() {
            self.widen_for(slot);
        }
        each_width!(&mut self.words, v => {
            let bit = 1 << slot;
            let mut new = 0;
            for id in ids {
                let id = *id as usize;
                if id >= v.len() {
                    v.resize(id + 1, 0);
                }
                new += u64::from(v[id] & bit == 0);
                v[id] |= bit;
            }
            new
        })
    }

    /// Clears the slots of `mask` from block `id`.
    pub fn remove(&mut self, id: u32, mask: u64) {
        each_width!(&mut self.words, v => {
            if let Some(word) = v.get_mut(id as usize) {
                // Bits above the width were never set, so dropping them loses nothing.
                *word = (u64::from(*word) & !mask) as _;
            }
        })
    }

    /// Clears the slots of `mask` from every block.
    pub fn remove_everywhere(&mut self, mask: u64) {
        each_width!(&mut self.words, v => {
            for word in v.iter_mut() {
                *word = (u64::from(*word) & !mask) as _;
            }
        })
    }

    /// Slots an entry has room for.
    #[inline]
    fn width(&self) -> u32 {
        match &self.words {
            Words::W8(_) => 8,
            Words::W16(_) => 16,
            Words::W32(_) => 32,
            Words::W64(_) => 64,
        }
    }

    /// Makes the entries wide enough for `slot` (at most three times in a table's life).
    #[cold]
    fn widen_for(&mut self, slot: u32) {
        let old: Vec<u64> =
            each_width!(&self.words, v => v.iter().map(|w| u64::from(*w)).collect());
        // The values fit: every bit set so far is below the old width.
        self.words = match slot {
            0..16 => Words::W16(old.iter().map(|w| *w as u16).collect()),
            16..32 => Words::W32(old.iter().map(|w| *w as u32).collect()),
            _ => Words::W64(old),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_widen_when_a_higher_slot_arrives_and_keep_what_they_held() {
        let mut masks = BlockMasks::default();
        assert_eq!(masks.insert_all(&[5], 0), 1);
        assert_eq!(masks.insert_all(&[5], 0), 0, "already held");
        assert_eq!(masks.insert_all(&[5, 6], 7), 2);
        assert_eq!(masks.get(5), 0b1000_0001);
        for slot in [12, 20, 63] {
            assert_eq!(masks.insert_all(&[9], slot), 1);
            assert_eq!(masks.get(5), 0b1000_0001, "kept across widening to {slot}");
        }
        assert_eq!(masks.get(9), 1 << 12 | 1 << 20 | 1 << 63);
        assert_eq!(masks.get(1000), 0, "an id never set");
    }

    #[test]
    fn removal_clears_only_the_given_slots() {
        let mut masks = BlockMasks::default();
        masks.insert_all(&[0, 1, 2, 3], 1);
        masks.insert_all(&[0, 1, 2, 3], 2);
        masks.remove(0, 1 << 1);
        assert_eq!(masks.get(0), 1 << 2);
        masks.remove_everywhere(1 << 2);
        assert_eq!((masks.get(0), masks.get(3)), (0, 1 << 1));
    }

    #[test]
    fn a_walk_stops_where_its_step_says() {
        let mut masks = BlockMasks::default();
        masks.insert_all(&[3, 4, 6], 0);
        let mut seen = Vec::new();
        masks.walk(&[3, 4, 5, 6], |id, mask| {
            seen.push(id);
            mask != 0
        });
        assert_eq!(seen, [3, 4, 5]);
    }
}
