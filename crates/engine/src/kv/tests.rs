//! The KV cache's tests.

use super::*;

/// A cache where some free blocks hold hashes and some of them are held again.
fn used_cache() -> KvCache {
    let mut kv = KvCache::new(8);
    kv.record_events();
    let mut ids = Vec::new();
    kv.allocate_into(6, &mut ids);
    for (i, id) in ids.iter().enumerate() {
        kv.publish(*id, 100 + i as u64, None);
    }
    kv.release(&ids);
    kv.hold(ids[2]);
    kv
}

#[test]
fn kv_reuses_prefixes_pins_held_blocks_and_evicts_deepest_first() {
    let mut kv = KvCache::new(4);
    let a: Vec<u32> = (0..3).map(|_| kv.allocate().unwrap()).collect();
    for (i, id) in a.iter().enumerate() {
        kv.publish(*id, 100 + i as u64, None);
    }
    assert_eq!(kv.cached_prefix(&[100, 101, 102, 999]), 3);
    assert_eq!(kv.cached_prefix(&[100, 555, 102]), 1);
    // Held blocks are pinned: only the one empty block can be allocated.
    let spare = kv.allocate().unwrap();
    assert_eq!(kv.allocate(), None);
    kv.release(&[spare]);
    // Releasing a chain frees its deepest block first: it is evicted first.
    kv.release(&a);
    assert_eq!(kv.free(), 4);
    let _ = kv.allocate().unwrap(); // the empty block freed earlier
    assert_eq!(kv.evictions, 0);
    let _ = kv.allocate().unwrap();
    assert_eq!(kv.evictions, 1);
    assert_eq!(
        kv.cached_prefix(&[100, 101, 102]),
        2,
        "hash 102 (deepest) went first"
    );
    let _ = kv.allocate().unwrap();
    assert_eq!(kv.cached_prefix(&[100, 101, 102]), 1);
    // A cached free block taken by a new holder leaves the free queue.
    let mut ids = Vec::new();
    kv.refresh_cached_ids(&[100, 101], &mut ids);
    assert_eq!(ids.len(), 1);
    kv.hold(ids[0]);
    assert_eq!(kv.free(), 0);
    kv.release(&ids);
    assert_eq!(kv.cached_prefix(&[100]), 1);
}

#[test]
fn allocate_into_takes_what_allocate_would_in_order() {
    let (mut one_by_one, mut at_once) = (used_cache(), used_cache());
    let singles: Vec<u32> = (0..6).map(|_| one_by_one.allocate().unwrap()).collect();
    let mut batch = Vec::new();
    at_once.allocate_into(6, &mut batch);
    assert_eq!(batch, singles);
    assert_eq!(at_once.free(), one_by_one.free());
    assert_eq!(at_once.evictions, one_by_one.evictions);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    at_once.take_events(&mut a);
    one_by_one.take_events(&mut b);
    assert_eq!(a, b);
    // What is left is the same list: the last free block, then nothing.
    assert_eq!(at_once.allocate(), one_by_one.allocate());
    assert_eq!(at_once.allocate(), None);
    assert_eq!(one_by_one.allocate(), None);
}

/// The free queue hands out blocks in exactly the order a list of free blocks would
/// (released at the back, taken again from anywhere, allocated from the front), through
/// many entries left behind and the compactions they bring, and stays within twice the
/// cache. Checked against such a list over a long seeded mix of the three.
#[test]
fn the_free_queue_allocates_as_a_list_would_through_compactions() {
    const CAPACITY: u32 = 16;
    let mut kv = KvCache::new(CAPACITY);
    // The list: free blocks, oldest first.
    let mut list: Vec<u32> = (0..CAPACITY).collect();
    let mut held: Vec<u32> = Vec::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: usize| {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (seed >> 33) as usize % n
    };
    let (mut compactions, mut longest) = (0, 0);
    for step in 0..20_000 {
        let len = kv.queue.len();
        // Allocations are rare, so that entries left behind pile up between them.
        match next(64) {
            0 if !list.is_empty() => {
                let id = kv.allocate().expect("a block is free");
                assert_eq!(id, list.remove(0), "step {step}");
                held.push(id);
            }
            1..=32 if !held.is_empty() => {
                let id = held.swap_remove(next(held.len()));
                kv.release(&[id]);
                list.push(id);
            }
            _ if !list.is_empty() => {
                // A free block taken back from the middle of the list.
                let id = list.remove(next(list.len()));
                kv.hold(id);
                held.push(id);
            }
            _ => {}
        }
        assert_eq!(kv.free(), list.len() as u32, "step {step}");
        assert_eq!(kv.oldest_free(4), list[..list.len().min(4)], "step {step}");
        // The queue shrank: compacted (taken entries stay until then).
        compactions += usize::from(kv.queue.len() < len);
        longest = longest.max(kv.queue.len());
    }
    assert!(compactions > 10, "{compactions} compactions");
    assert!(longest <= 4 * CAPACITY as usize, "{longest} entries");
    // Whatever is left comes out in the list's order.
    let mut rest = Vec::new();
    kv.allocate_into(list.len() as u32, &mut rest);
    assert_eq!(rest, list);
    assert_eq!(kv.allocate(), None);
}

/// The index follows the blocks through eviction and reuse: a hash is found at the
/// block that holds it now, an evicted one is gone, and a block that takes a new hash
/// answers only to that one. Cycled many times over a small cache, so that every
/// block is reused again and again.
#[test]
fn the_index_finds_each_hash_at_the_block_that_holds_it_now() {
    let mut kv = KvCache::new(64);
    let mut ids = Vec::new();
    for round in 0..200u64 {
        let hashes: Vec<u64> = (0..48).map(|i| round * 1_000 + i).collect();
        ids.clear();
        kv.allocate_into(48, &mut ids);
        kv.publish_run(&ids, &hashes, None, usize::MAX);
        for (id, hash) in ids.iter().zip(&hashes) {
            assert_eq!(kv.cached(*hash), Some(*id), "round {round}");
        }
        assert_eq!(kv.cached_prefix(&hashes), 48);
        kv.release(&ids);
        if round > 0 {
            // 64 blocks: the 48 of this round and 16 of the last; the last round's
            // deepest were released first, so evicted first, and its first 16 remain.
            let last: Vec<u64> = (0..48).map(|i| (round - 1) * 1_000 + i).collect();
            assert_eq!(kv.cached_prefix(&last), 16, "round {round}");
            assert_eq!(kv.cached(last[16]), None);
        }
    }
    assert_eq!(
        kv.cached(7),
        None,
        "the first round's blocks were all evicted"
    );
}

/// An index starts with room for one entry a block (up to 2^14), and gets room for its
/// limit only when it fills: a lightly used cache keeps a small table.
#[test]
fn the_index_gets_room_for_its_limit_only_once_full() {
    let mut kv = KvCache::new(20_000);
    let start = kv.by_hash.capacity();
    assert!((16_384..57_344).contains(&start), "{start}");
    assert_eq!(kv.index_limit(), 57_344);
    let mut ids = Vec::new();
    kv.allocate_into(100, &mut ids);
    kv.publish_run(&ids, &(0..100).collect::<Vec<u64>>(), None, usize::MAX);
    assert_eq!(kv.by_hash.capacity(), start);
    // Rounds of 2,000 fresh blocks until the table has been filled once.
    for round in 1..=20u64 {
        kv.release(&ids);
        ids.clear();
        kv.allocate_into(2_000, &mut ids);
        let hashes: Vec<u64> = (0..2_000).map(|i| round * 10_000 + i).collect();
        kv.publish_run(&ids, &hashes, None, usize::MAX);
        assert_eq!(kv.cached_prefix(&hashes), 2_000, "round {round}");
    }
    assert!(kv.by_hash.capacity() >= 57_344, "{}", kv.by_hash.capacity());
    assert!(kv.by_hash.len() <= 57_344);
}

/// Blocks published as their request's alone hold their hashes, count as evicted and
/// report their events as others do, but are not found by hash until indexed, even
/// through a rebuild of the index.
#[test]
fn blocks_alone_are_found_only_once_indexed() {
    let mut kv = KvCache::new(16);
    kv.record_events();
    let mut ids = Vec::new();
    kv.allocate_into(4, &mut ids);
    kv.publish_run(&ids, &[10, 11, 12, 13], None, 2);
    assert_eq!(kv.cached_prefix(&[10, 11, 12, 13]), 2);
    assert_eq!(kv.cached(12), None);
    kv.sweep();
    assert_eq!(kv.cached(12), None, "a rebuild leaves them out");
    let mut events = Vec::new();
    kv.take_events(&mut events);
    let stored = |hash, parent| KvEvent::Stored { hash, parent };
    let expected = [
        stored(10, None),
        stored(11, Some(10)),
        stored(12, Some(11)),
        stored(13, Some(12)),
    ];
    assert_eq!(events, expected);
    kv.index_alone(&ids);
    assert_eq!(kv.cached_prefix(&[10, 11, 12, 13]), 4);
    assert_eq!(kv.cached(13), Some(ids[3]));
    kv.sweep();
    assert_eq!(
        kv.cached(13),
        Some(ids[3]),
        "indexed, they stay through a rebuild"
    );
    // Evicted all the same: all 16 blocks taken, the 4 published among them.
    kv.release(&ids);
    let mut all = Vec::new();
    kv.allocate_into(16, &mut all);
    assert_eq!(kv.evictions, 4);
    assert_eq!(kv.cached(11), None);
}

/// Evicted blocks' entries stay in the index until it is rebuilt, so it never holds
/// more than its limit (112 entries for 64 blocks), whatever has passed through it; a
/// block evicted and then given its old hash again is found once more, and only under
/// it.
#[test]
fn the_index_stays_within_its_limit() {
    let mut kv = KvCache::new(64);
    let mut ids = Vec::new();
    let mut most = 0;
    for round in 0..500u64 {
        ids.clear();
        kv.allocate_into(40, &mut ids);
        // Every third round brings back the hashes of the round before the last.
        let base = if round % 3 == 2 { round - 2 } else { round };
        let hashes: Vec<u64> = (0..40).map(|i| base * 1_000 + i).collect();
        kv.publish_run(&ids, &hashes, None, usize::MAX);
        kv.release(&ids);
        most = most.max(kv.by_hash.len());
        for (id, hash) in ids.iter().zip(&hashes) {
            assert_eq!(kv.cached(*hash), Some(*id), "round {round}");
        }
    }
    assert_eq!(kv.index_limit(), 112);
    assert!(most <= 112, "the index held {most} entries for 64 blocks");
    assert!(most > 64, "entries of evicted blocks were kept: {most}");
    assert_eq!(
        kv.by_hash.capacity(),
        112,
        "the table never outgrows the limit"
    );
    // Every block holds a hash of the last two rounds; those of earlier ones are gone.
    let held = (0..1_000)
        .filter(|i| kv.cached(498_000 + i).is_some())
        .count()
        + (0..1_000)
            .filter(|i| kv.cached(499_000 + i).is_some())
            .count();
    assert_eq!(held, 64);
    assert_eq!(kv.cached(496_000), None);
}

/// Anonymous blocks are taken and given back exactly as blocks with ids would be: two
/// caches see the same requests, one naming every block, the other only each request's
/// leading ones (the rest anonymous). They evict the same number of blocks, keep the same
/// number free, and find the same named hashes cached, through runs of anonymous blocks
/// split, merged and compacted; a request's anonymous blocks named once computed (as at a
/// preemption) are found again.
#[test]
fn anonymous_blocks_are_taken_and_given_back_as_named_ones_would_be() {
    const CAPACITY: u32 = 96;
    let (mut named, mut anon) = (KvCache::new(CAPACITY), KvCache::new(CAPACITY));
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = |n: u64| {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (seed >> 33) % n
    };
    // Held requests: (ids in `named`, ids in `anon`, anonymous count, of them hashed).
    let mut held: Vec<(Vec<u32>, Vec<u32>, u32, u32)> = Vec::new();
    let mut fresh = 1_000_000u64;
    let (mut runs_seen, mut compactions) = (0, 0);
    for step in 0..5_000 {
        if next(3) == 0 && !held.is_empty() {
            let (ids, mut lead, count, hashed) = held.swap_remove(next(held.len() as u64) as usize);
            if next(4) == 0 {
                // Preempted: its computed anonymous blocks are named and indexed first.
                let hashes: Vec<u64> = ids[lead.len()..][..hashed as usize]
                    .iter()
                    .map(|id| named.blocks[*id as usize].hash)
                    .collect();
                named.index_alone(&ids);
                anon.name_anon(&hashes, &mut lead);
                for hash in &hashes {
                    assert!(anon.cached(*hash).is_some(), "step {step}");
                }
                anon.release_anon(count - hashed, 0);
            } else {
                anon.release_anon(count - hashed, hashed);
            }
            named.release(&ids);
            anon.release(&lead);
        } else {
            // A request of up to 12 blocks: a chain whose first blocks come from a small
            // pool of shared hashes (hits held again), then fresh ones only it has.
            let len = 1 + next(12) as u32;
            let lead = next(u64::from(len) + 1) as u32;
            if len > named.free() {
                continue;
            }
            let base = next(6) * 100;
            let chain: Vec<u64> = (0..len)
                .map(|i| match i < lead {
                    true => base + u64::from(i),
                    false => {
                        fresh += 1;
                        fresh
                    }
                })
                .collect();
            let (mut ids, mut lead_ids) = (Vec::new(), Vec::new());
            named.allocate_into(len, &mut ids);
            anon.allocate_into(lead, &mut lead_ids);
            anon.allocate_anon(len - lead);
            let computed = next(u64::from(len) + 1) as usize;
            named.publish_run(&ids[..computed], &chain[..computed], None, lead as usize);
            let lead_computed = computed.min(lead as usize);
            anon.publish_run(
                &lead_ids[..lead_computed],
                &chain[..lead_computed],
                None,
                usize::MAX,
            );
            let hashed = (computed - lead_computed) as u32;
            held.push((ids, lead_ids, len - lead, hashed));
        }
        assert_eq!(anon.free(), named.free(), "step {step}");
        assert_eq!(anon.evictions, named.evictions, "step {step}");
        for hash in (0..600).filter(|h| h % 100 < 12) {
            let found = |kv: &KvCache| kv.cached(hash).is_some();
            assert_eq!(found(&anon), found(&named), "hash {hash}, step {step}");
        }
        runs_seen += usize::from(anon.queue[anon.head..].iter().any(|e| e & RUN != 0));
        compactions += usize::from(anon.head == 0 && anon.first > 0);
        assert!(anon.queue.len() <= anon.queue_limit());
    }
    assert!(runs_seen > 1_000, "{runs_seen} steps with runs queued");
    assert!(
        compactions > 0 && named.evictions > 1_000,
        "{}",
        named.evictions
    );
}
