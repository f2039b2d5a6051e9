//! A deadline on plugin calls: a call that does not return within the deadline ends the
//! run with one line naming the plugin, the call and the trace line, instead of a replay
//! that hangs without a word.
//!
//! Each thread that calls plugins has a slot of atomics (registered once, never freed: the
//! threads that route are few and live for the run). A call marks its slot busy and bumps
//! its sequence; leaving marks it idle. Nothing on that path reads a clock or takes a
//! lock: a call costs a handful of plain stores. A watchdog thread, started by the command that wants a deadline,
//! looks at every slot each tick: a slot busy with the same count for the whole deadline is
//! a stuck call, and the watchdog hands it to the command's callback (which reports and
//! ends the process; the stuck thread cannot be stopped from outside).

use std::cell::Cell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// One thread's plugin call, as the watchdog reads it. `seq` is a sequence lock over the
/// name fields: odd while `enter` writes them, even once they are a consistent pair; it
/// also tells one call from the next.
struct Slot {
    busy: AtomicBool,
    seq: AtomicU64,
    line: AtomicU64,
    plugin: AtomicPtr<u8>,
    plugin_len: AtomicUsize,
    call: AtomicPtr<u8>,
    call_len: AtomicUsize,
}

static SLOTS: Mutex<Vec<&'static Slot>> = Mutex::new(Vec::new());

/// Whether a watchdog runs: without one, calls keep no books at all.
static WATCHING: AtomicBool = AtomicBool::new(false);

thread_local! {
    static MINE: Cell<Option<&'static Slot>> = const { Cell::new(None) };
}

fn mine() -> &'static Slot {
    MINE.with(|m| match m.get() {
        Some(slot) => slot,
        None => {
            let slot: &'static Slot = Box::leak(Box::new(Slot {
                busy: AtomicBool::new(false),
                seq: AtomicU64::new(0),
                line: AtomicU64::new(0),
                plugin: AtomicPtr::new(std::ptr::null_mut()),
                plugin_len: AtomicUsize::new(0),
                call: AtomicPtr::new(std::ptr::null_mut()),
                call_len: AtomicUsize::new(0),
            }));
            SLOTS.lock().unwrap_or_else(|p| p.into_inner()).push(slot);
            m.set(Some(slot));
            slot
        }
    })
}

#[inline]
pub(crate) fn enter(plugin: &'static str, call: &'static str) {
    if !WATCHING.load(Ordering::Relaxed) {
        return;
    }
    let slot = mine();
    // One writer (this thread): plain loads and stores, no locked read-modify-write, so a
    // plugin call pays a few moves and no bus lock.
    let seq = slot.seq.load(Ordering::Relaxed);
    slot.seq.store(seq + 1, Ordering::Relaxed);
    std::sync::atomic::fence(Ordering::Release);
    slot.plugin
        .store(plugin.as_ptr().cast_mut(), Ordering::Relaxed);
    slot.plugin_len.store(plugin.len(), Ordering::Relaxed);
    slot.call.store(call.as_ptr().cast_mut(), Ordering::Relaxed);
    slot.call_len.store(call.len(), Ordering::Relaxed);
    slot.seq.store(seq + 2, Ordering::Release);
    slot.busy.store(true, Ordering::Release);
}

#[inline]
pub(crate) fn leave() {
    if WATCHING.load(Ordering::Relaxed) {
        mine().busy.store(false, Ordering::Release);
    }
}

#[inline]
pub(crate) fn set_line(line: u64) {
    if WATCHING.load(Ordering::Relaxed) {
        mine().line.store(line, Ordering::Relaxed);
    }
}

/// A plugin call that outlived the deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stuck {
    /// The plugin's name.
    pub plugin: &'static str,
    /// The call (`match`, `update`, ...).
    pub call: &'static str,
    /// The trace line of the request being routed; 0 = none.
    pub line: u64,
}

/// Starts the watchdog (once per process; later calls do nothing): a call stuck for
/// `deadline` is handed to `on_stuck`, which is expected to report it and end the process.
pub fn start(deadline: Duration, on_stuck: fn(&Stuck)) {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        WATCHING.store(true, Ordering::Relaxed);
        let tick = (deadline / 20).clamp(Duration::from_millis(1), Duration::from_millis(100));
        let spawned = std::thread::Builder::new()
            .name("routerlab-watchdog".into())
            .spawn(move || watch(deadline, tick, on_stuck));
        // Without a thread there is no deadline; the run goes on as it would have.
        drop(spawned);
    });
}

fn watch(deadline: Duration, tick: Duration, on_stuck: fn(&Stuck)) {
    // Per slot (by address): the call count last seen busy, and for how long.
    let mut seen: Vec<(usize, u64, Duration)> = Vec::new();
    loop {
        std::thread::sleep(tick);
        let slots: Vec<&'static Slot> = SLOTS.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for slot in slots {
            let key = std::ptr::from_ref(slot) as usize;
            let calls = slot.seq.load(Ordering::Acquire);
            let busy = slot.busy.load(Ordering::Acquire);
            let entry = match seen.iter_mut().find(|(k, _, _)| *k == key) {
                Some(entry) => entry,
                None => {
                    seen.push((key, calls, Duration::ZERO));
                    seen.last_mut().expect("just pushed")
                }
            };
            if !busy || entry.1 != calls {
                *entry = (key, calls, Duration::ZERO);
                continue;
            }
            entry.2 += tick;
            if entry.2 >= deadline
                && let Some(stuck) = read(slot, calls)
            {
                on_stuck(&stuck);
            }
        }
    }
}

/// The stuck call of `slot`, if its fields are the consistent pair of sequence `seq` (an
/// even number, unchanged across the reads).
fn read(slot: &Slot, seq: u64) -> Option<Stuck> {
    if seq % 2 == 1 {
        return None;
    }
    let fields = (
        slot.plugin.load(Ordering::Relaxed),
        slot.plugin_len.load(Ordering::Relaxed),
        slot.call.load(Ordering::Relaxed),
        slot.call_len.load(Ordering::Relaxed),
    );
    std::sync::atomic::fence(Ordering::Acquire);
    if slot.seq.load(Ordering::Relaxed) != seq {
        return None;
    }
    Some(Stuck {
        plugin: text(fields.0, fields.1),
        call: text(fields.2, fields.3),
        line: slot.line.load(Ordering::Relaxed),
    })
}

/// The `&'static str` that `enter` stored as `ptr` and `len`.
fn text(ptr: *mut u8, len: usize) -> &'static str {
    if ptr.is_null() {
        return "";
    }
    // SAFETY: `ptr` and `len` are one `&'static str`'s pointer and length: `enter` stores
    // them as a pair between two bumps of the slot's sequence, and `read` takes them only
    // when the sequence was even and unchanged around the loads, so both came from the
    // same `enter`. A `&'static str` stays valid for the rest of the process.
    let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
    std::str::from_utf8(bytes).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    static REPORTED: Mutex<Option<Stuck>> = Mutex::new(None);

    #[test]
    fn a_call_that_never_returns_is_reported_with_its_plugin_call_and_line() {
        start(Duration::from_millis(200), |stuck| {
            *REPORTED.lock().unwrap() = Some(stuck.clone());
        });
        // Calls that return in time are never reported.
        for _ in 0..50 {
            enter("quick", "match");
            leave();
        }
        std::thread::spawn(|| {
            set_line(42);
            enter("sleepy", "update");
            std::thread::sleep(Duration::from_secs(60));
        });
        for _ in 0..100 {
            if REPORTED.lock().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            REPORTED.lock().unwrap().clone(),
            Some(Stuck {
                plugin: "sleepy",
                call: "update",
                line: 42
            })
        );
    }
}
