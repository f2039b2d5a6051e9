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
use routerlab_trace::adapters::{Adapters, MAX_ADAPTER_NAME, MAX_ADAPTERS};

use super::routed::Refusal;
use crate::prom::LoraInfo;

/// The base models and the adapters named so far.
#[derive(Debug, Default)]
pub(super) struct LoraNames {
    /// `--base-model`: empty, adapters are not followed.
    base: Vec<String>,
    adapters: Adapters,
}

impl LoraNames {
    pub(super) fn new(base: Vec<String>) -> LoraNames {
        LoraNames {
            base,
            adapters: Adapters::default(),
        }
    }

    /// The adapter a request whose `model` is `model` asks for: 0 for a base model, an
    /// empty `model`, or when no base model is set; refused past [`MAX_ADAPTERS`] names
    /// or for a name over [`MAX_ADAPTER_NAME`] bytes.
    pub(super) fn number(&mut self, model: &str) -> Result<u32, Refusal> {
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
        self.adapters.number(model).ok_or_else(|| {
            Refusal(
                400,
                format!(
                    "model `{}`: serve follows at most {MAX_ADAPTERS} distinct adapters",
                    shown()
                ),
            )
        })
    }

    /// The name of adapter `id`.
    pub(super) fn name(&self, id: u32) -> Option<&str> {
        self.adapters.name(id)
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
        assert_eq!(names.number("base").unwrap(), 0);
        assert_eq!(names.number("").unwrap(), 0);
        assert_eq!(names.number("sql").unwrap(), 1);
        assert_eq!(names.number("chat").unwrap(), 2);
        assert_eq!(names.number("sql").unwrap(), 1, "numbered once");
        assert_eq!(names.name(2), Some("chat"));
        let long = names.number(&"x".repeat(MAX_ADAPTER_NAME + 1)).unwrap_err();
        assert_eq!(long.0, 400);
        assert!(long.1.contains("at most 256 bytes"), "{}", long.1);
        let mut off = LoraNames::new(vec![]);
        assert_eq!(off.number("sql").unwrap(), 0, "no base model: not followed");
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
