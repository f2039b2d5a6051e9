//! A map from `u64` keys to values that remembers recency, for bounded caches, tries and
//! idle-time expiry.
//!
//! Entries live in a slab threaded by a doubly linked list (most recent at the head), so
//! `touch`, `insert` and `pop_oldest` are O(1) and memory is proportional to the entries
//! held, never to the keys seen.

use routerlab_core::hash::U64Map;

const NONE: u32 = u32::MAX;

struct Slot<V> {
    key: u64,
    value: V,
    newer: u32,
    older: u32,
}

/// A recency-ordered map.
pub struct LruMap<V> {
    index: U64Map<u32>,
    slots: Vec<Slot<V>>,
    free: Vec<u32>,
    newest: u32,
    oldest: u32,
}

impl<V> std::fmt::Debug for LruMap<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LruMap").field("len", &self.len()).finish()
    }
}

impl<V> Default for LruMap<V> {
    fn default() -> Self {
        LruMap {
            index: U64Map::default(),
            slots: Vec::new(),
            free: Vec::new(),
            newest: NONE,
            oldest: NONE,
        }
    }
}

impl<V> LruMap<V> {
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Whether `key` is present (does not change recency).
    pub fn contains(&self, key: u64) -> bool {
        self.index.contains_key(&key)
    }

    /// The value for `key` (does not change recency).
    pub fn get(&self, key: u64) -> Option<&V> {
        self.index
            .get(&key)
            .map(|&slot| &self.slots[slot as usize].value)
    }

    /// The value for `key`, made most recent.
    pub fn touch(&mut self, key: u64) -> Option<&mut V> {
        let slot = *self.index.get(&key)?;
        self.unlink(slot);
        self.link_newest(slot);
        Some(&mut self.slots[slot as usize].value)
    }

    /// The value for `key`, inserted with `make` if absent; made most recent either way.
    pub fn touch_or_insert_with(&mut self, key: u64, make: impl FnOnce() -> V) -> &mut V {
        let slot = match self.index.get(&key) {
            Some(&slot) => {
                self.unlink(slot);
                slot
            }
            None => {
                let entry = Slot {
                    key,
                    value: make(),
                    newer: NONE,
                    older: NONE,
                };
                let slot = match self.free.pop() {
                    Some(slot) => {
                        self.slots[slot as usize] = entry;
                        slot
                    }
                    None => {
                        self.slots.push(entry);
                        (self.slots.len() - 1) as u32
                    }
                };
                self.index.insert(key, slot);
                slot
            }
        };
        self.link_newest(slot);
        &mut self.slots[slot as usize].value
    }

    /// The least recently used entry (does not change recency).
    pub fn oldest(&self) -> Option<(u64, &V)> {
        (self.oldest != NONE).then(|| {
            let slot = &self.slots[self.oldest as usize];
            (slot.key, &slot.value)
        })
    }

    /// Removes and returns the least recently used entry.
    pub fn pop_oldest(&mut self) -> Option<(u64, V)>
    where
        V: Default,
    {
        let slot = self.oldest;
        if slot == NONE {
            return None;
        }
        let key = self.slots[slot as usize].key;
        self.remove(key).map(|value| (key, value))
    }

    /// Removes `key`.
    pub fn remove(&mut self, key: u64) -> Option<V>
    where
        V: Default,
    {
        let slot = self.index.remove(&key)?;
        self.unlink(slot);
        self.free.push(slot);
        Some(std::mem::take(&mut self.slots[slot as usize].value))
    }

    /// Keeps only the entries for which `keep` returns true.
    pub fn retain(&mut self, mut keep: impl FnMut(&mut V) -> bool)
    where
        V: Default,
    {
        let doomed: Vec<u64> = self
            .index
            .values()
            .filter_map(|&slot| {
                let entry = &mut self.slots[slot as usize];
                (!keep(&mut entry.value)).then_some(entry.key)
            })
            .collect();
        for key in doomed {
            self.remove(key);
        }
    }

    fn unlink(&mut self, slot: u32) {
        let (newer, older) = {
            let s = &self.slots[slot as usize];
            (s.newer, s.older)
        };
        match newer {
            NONE => self.newest = older,
            n => self.slots[n as usize].older = older,
        }
        match older {
            NONE => self.oldest = newer,
            o => self.slots[o as usize].newer = newer,
        }
    }

    fn link_newest(&mut self, slot: u32) {
        let previous = self.newest;
        {
            let s = &mut self.slots[slot as usize];
            s.newer = NONE;
            s.older = previous;
        }
        match previous {
            NONE => self.oldest = slot,
            p => self.slots[p as usize].newer = slot,
        }
        self.newest = slot;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used_first() {
        let mut lru: LruMap<u32> = LruMap::default();
        for key in 1..=3 {
            *lru.touch_or_insert_with(key, || 0) += key as u32;
        }
        lru.touch(1);
        assert_eq!(lru.pop_oldest(), Some((2, 2)));
        assert_eq!(lru.pop_oldest(), Some((3, 3)));
        lru.touch_or_insert_with(4, || 4);
        assert_eq!(lru.len(), 2);
        assert_eq!(lru.pop_oldest(), Some((1, 1)));
        assert_eq!(lru.pop_oldest(), Some((4, 4)));
        assert_eq!(lru.pop_oldest(), None);
        assert!(lru.is_empty());
    }

    #[test]
    fn retain_and_remove_keep_links_consistent() {
        let mut lru: LruMap<u32> = LruMap::default();
        for key in 0..10 {
            lru.touch_or_insert_with(key, || key as u32);
        }
        lru.retain(|v| *v % 2 == 0);
        assert_eq!(lru.remove(4), Some(4));
        let order: Vec<u64> = std::iter::from_fn(|| lru.pop_oldest().map(|(k, _)| k)).collect();
        assert_eq!(order, vec![0, 2, 6, 8]);
    }
}
