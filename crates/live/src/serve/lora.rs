//! LoRA adapters in `serve`: which requests name one, and what each engine holds of them.
//!
//! A request's `model` names an adapter unless it is one of the base models `serve
//! --base-model` lists (or is left out), as vLLM serves its `--lora-modules` by name.
//! Adapters are numbered 1, 2, ... in order of first appearance, as a replay numbers a
//! trace's, so the same traffic gives a plugin the same numbers live and in replay.
//!
//! What an engine holds comes from two places: its last scrape (vLLM's
//! `vllm:lora_requests_info`: its slots, the adapters of its running requests and of its
//! waiting ones, by name) and the router's own books (the requests it sent there and has
//! not seen finish, by whether their first token came). The scrape sees what other
//! routers sent; the books see what this one sent since the scrape. vLLM reports no
//! adapter that is loaded but idle, so a slot counts as used only while an adapter's
//! requests run: `slots_used` is the active adapters.

use std::collections::BTreeSet;

use routerlab_core::LoraSlots;
use routerlab_core::abi::RlAdapterState;
use std::collections::{HashMap, HashSet};

use routerlab_trace::adapters::{MAX_ADAPTER_NAME, MAX_ADAPTERS};

use super::routed::Refusal;
use crate::prom::LoraInfo;

/// The base models and the adapters named so far.
///
/// Adapters are numbered 1, 2, ... in order of first appearance and a number is never
/// given to another name (a plugin may remember what it learnt of one). At most
/// [`MAX_ADAPTERS`] names are kept: when a new one comes with the table full, every adapter
/// no request in flight uses is forgotten (its next request numbers it afresh), so no
/// client can lock the others out by naming many.
#[derive(Debug, Default)]
pub(super) struct LoraNames {
    /// `--base-model`: empty, adapters are not followed.
    base: Vec<String>,
    numbers: HashMap<Box<str>, u32>,
    names: HashMap<u32, Box<str>>,
    /// The number the next new name gets.
    next: u32,
}

impl LoraNames {
    pub(super) fn new(base: Vec<String>) -> LoraNames {
        LoraNames {
            base,
            next: 1,
            ..LoraNames::default()
        }
    }

    /// The adapter a request whose `model` is `model` asks for: 0 for a base model, an
    /// empty `model`, or when no base model is set. A name over [`MAX_ADAPTER_NAME`] bytes
    /// is refused (400); a new name with [`MAX_ADAPTERS`] adapters in flight (none idle to
    /// forget: `in_flight` lists those in use) waits for one to finish (503).
    pub(super) fn number(
        &mut self,
        model: &str,
        in_flight: impl FnOnce() -> HashSet<u32>,
    ) -> Result<u32, Refusal> {
        if self.base.is_empty() || model.is_empty() || self.base.iter().any(|b| b == model) {
            return Ok(0);
        }
        let shown = || model.chars().take(64).collect::<String>();
        if model.len() > MAX_ADAPTER_NAME {
            return Err(Refusal(
                400,
                format!(
                    "model `{}…`: an adapter's name is at most {MAX_ADAPTER_NAME} bytes",
                    shown()
                ),
            ));
        }
        if let Some(&n) = self.numbers.get(model) {
            return Ok(n);
        }
        if self.names.len() >= MAX_ADAPTERS {
            let used = in_flight();
            self.names.retain(|n, _| used.contains(n));
            self.numbers.retain(|_, n| used.contains(n));
        }
        if self.next == u32::MAX {
            return Err(Refusal(
                503,
                format!(
                    "model `{}`: serve has numbered {} adapters since it started, all it can",
                    shown(),
                    u32::MAX - 1
                ),
            ));
        }
        if self.names.len() >= MAX_ADAPTERS {
            return Err(Refusal(
                503,
                format!(
                    "model `{}`: {MAX_ADAPTERS} other adapters have requests in flight; try again when some finish",
                    shown()
                ),
            ));
        }
        let n = self.next;
        self.next += 1;
        self.names.insert(n, model.into());
        self.numbers.insert(model.into(), n);
        Ok(n)
    }

    /// The name of adapter `id`, while it is kept.
    pub(super) fn name(&self, id: u32) -> Option<&str> {
        self.names.get(&id).map(|s| &**s)
    }
}

/// What an engine holds of adapters, from its scrape and the router's books.
pub(super) struct Held<'a> {
    /// What its last scrape said.
    pub(super) scraped: &'a LoraInfo,
    /// Names of the adapters of the requests the router sent it and has not seen finish,
    /// with whether each request's first token came.
    pub(super) sent: Vec<(&'a str, bool)>,
}

impl Held<'_> {
    /// The adapters in use by running requests, and those only waiting requests use.
    fn in_use(&self) -> (BTreeSet<&str>, BTreeSet<&str>) {
        let mut active: BTreeSet<&str> = self.scraped.running.iter().map(|s| s.as_str()).collect();
        active.extend(self.sent.iter().filter(|(_, d)| *d).map(|(n, _)| *n));
        let mut waiting: BTreeSet<&str> = self.scraped.waiting.iter().map(|s| s.as_str()).collect();
        waiting.extend(self.sent.iter().filter(|(_, d)| !*d).map(|(n, _)| *n));
        waiting.retain(|n| !active.contains(n));
        (active, waiting)
    }

    /// Its slots, as `EndpointStatus::lora` reads them.
    pub(super) fn slots(&self) -> LoraSlots {
        let (active, waiting) = self.in_use();
        let small = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        LoraSlots {
            used: small(active.len()),
            total: self.scraped.slots,
            active: small(active.len()),
            waiting: small(waiting.len()),
        }
    }

    /// What `adapter_state` answers for a request of adapter `name`: its requests there
    /// are the router's own count, or at least one where the scrape names the adapter.
    pub(super) fn state(&self, name: &str) -> RlAdapterState {
        let slots = self.slots();
        let count = |decoding: bool| {
            (self.sent.iter())
                .filter(|(n, d)| *n == name && *d == decoding)
                .count()
        };
        let listed = |list: &[String]| usize::from(list.iter().any(|n| n == name));
        let running = count(true).max(listed(&self.scraped.running));
        let waiting = count(false).max(listed(&self.scraped.waiting));
        let small = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        RlAdapterState {
            resident: u32::from(running > 0),
            running: small(running),
            waiting: small(waiting),
            active: slots.active,
            slots_used: slots.used,
            slots_total: slots.total,
            waiting_adapters: slots.waiting,
            _reserved: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_other_than_the_base_names_an_adapter() {
        let mut names = LoraNames::new(vec!["base".into()]);
        let mut number = |model: &str| names.number(model, HashSet::new);
        assert_eq!(number("base").unwrap(), 0);
        assert_eq!(number("").unwrap(), 0);
        assert_eq!(number("sql").unwrap(), 1);
        assert_eq!(number("chat").unwrap(), 2);
        assert_eq!(number("sql").unwrap(), 1, "numbered once");
        let long = number(&"x".repeat(MAX_ADAPTER_NAME + 1)).unwrap_err();
        assert_eq!(long.0, 400);
        assert!(long.1.contains("at most 256 bytes"), "{}", long.1);
        assert_eq!(names.name(2), Some("chat"));
        let mut off = LoraNames::new(vec![]);
        assert_eq!(
            off.number("sql", HashSet::new).unwrap(),
            0,
            "no base model: not followed"
        );
    }

    /// One client naming more adapters than are kept locks nobody out: idle adapters are
    /// forgotten (and numbered afresh, never with a number another name had); only with
    /// every kept adapter in flight does a new one wait (503).
    #[test]
    fn idle_adapters_are_forgotten_so_no_client_locks_others_out() {
        let mut names = LoraNames::new(vec!["base".into()]);
        for i in 0..MAX_ADAPTERS {
            names.number(&format!("flood-{i}"), HashSet::new).unwrap();
        }
        // Two adapters still have requests in flight: they are kept, the rest forgotten.
        let busy: HashSet<u32> = [1, 7].into();
        let fresh = names.number("another-client", || busy.clone()).unwrap();
        assert_eq!(
            fresh,
            MAX_ADAPTERS as u32 + 1,
            "a number never given before"
        );
        assert_eq!(names.name(1), Some("flood-0"));
        assert_eq!(names.name(7), Some("flood-6"));
        assert_eq!(names.name(2), None, "forgotten");
        assert_eq!(names.number("flood-0", HashSet::new).unwrap(), 1, "kept");
        let again = names.number("flood-1", HashSet::new).unwrap();
        assert!(again > fresh, "numbered afresh: {again}");
        // Every kept adapter in flight: a new name waits.
        let mut full = LoraNames::new(vec!["base".into()]);
        for i in 0..MAX_ADAPTERS {
            full.number(&format!("a-{i}"), HashSet::new).unwrap();
        }
        let all: HashSet<u32> = (1..=MAX_ADAPTERS as u32).collect();
        let refused = full.number("late", || all.clone()).unwrap_err();
        assert_eq!(refused.0, 503, "{}", refused.1);
    }

    #[test]
    fn the_scrape_and_the_books_add_up() {
        let scraped = LoraInfo {
            slots: 2,
            running: vec!["sql".into()],
            waiting: vec!["sql".into(), "chat".into()],
        };
        let held = Held {
            scraped: &scraped,
            sent: vec![("sql", true), ("sql", true), ("code", false)],
        };
        assert_eq!(
            held.slots(),
            LoraSlots {
                used: 1,
                total: 2,
                active: 1,
                waiting: 2
            },
            "sql runs; chat and code only wait"
        );
        let sql = held.state("sql");
        assert_eq!(
            (sql.resident, sql.running, sql.waiting),
            (1, 2, 1),
            "two of its own running; the scrape says some wait"
        );
        let code = held.state("code");
        assert_eq!((code.resident, code.running, code.waiting), (0, 0, 1));
        let other = held.state("other");
        assert_eq!((other.resident, other.running, other.waiting), (0, 0, 0));
        assert_eq!((other.slots_total, other.waiting_adapters), (2, 2));
    }
}
