//! The LoRA adapters a trace's requests name (`adapter`, as an OpenAI request's `model`
//! names one): numbered 1, 2, ... in order of first appearance, 0 being the base model.

use std::collections::HashMap;

/// Distinct adapters one trace may name (each costs its name's bytes, kept for the run).
pub const MAX_ADAPTERS: usize = 65_535;

/// Longest adapter name, bytes.
pub const MAX_ADAPTER_NAME: usize = 256;

/// Adapter names by number (1-based) and back.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Adapters {
    names: Vec<Box<str>>,
    numbers: HashMap<Box<str>, u32>,
}

impl Adapters {
    /// The number of `name`, given the next one if it is new; `None` past
    /// [`MAX_ADAPTERS`].
    pub fn number(&mut self, name: &str) -> Option<u32> {
        if let Some(&n) = self.numbers.get(name) {
            return Some(n);
        }
        if self.names.len() >= MAX_ADAPTERS {
            return None;
        }
        self.names.push(name.into());
        let n = self.names.len() as u32;
        self.numbers.insert(name.into(), n);
        Some(n)
    }

    /// The name of adapter `n` (`None` for 0, the base model, or one never given).
    pub fn name(&self, n: u32) -> Option<&str> {
        self.names.get((n as usize).checked_sub(1)?).map(|s| &**s)
    }

    /// Adapters named so far.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Numbers the adapters `ahead` has past these (`ahead` grew from the same names).
    pub fn catch_up(&mut self, ahead: &Adapters) {
        for name in ahead.names.iter().skip(self.names.len()) {
            self.number(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::TraceError;

    #[test]
    fn names_are_numbered_in_order_of_first_appearance() {
        let mut a = Adapters::default();
        assert_eq!(a.number("sql"), Some(1));
        assert_eq!(a.number("chat"), Some(2));
        assert_eq!(a.number("sql"), Some(1));
        assert_eq!(
            (a.name(0), a.name(1), a.name(2), a.name(3)),
            (None, Some("sql"), Some("chat"), None)
        );
        assert_eq!(a.len(), 2);
    }

    #[test]
    fn the_table_is_bounded() {
        let mut a = Adapters::default();
        for i in 0..MAX_ADAPTERS {
            assert!(a.number(&i.to_string()).is_some());
        }
        assert_eq!(a.number("one more"), None);
        assert_eq!(a.number("0"), Some(1), "a known one is still found");
    }

    /// The requests of `text` (a trace in a file of its own) and the adapters named, or
    /// the error.
    fn read(name: &str, text: &str) -> Result<(Vec<u32>, Adapters), TraceError> {
        let path = std::env::temp_dir().join(format!("routerlab-{name}-{}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        let read = (|| {
            let mut reader = crate::TraceReader::open(&path, crate::TraceOptions::default())?;
            let mut request = crate::TraceRequest::default();
            let mut adapters = Vec::new();
            while reader.next_into(&mut request)? {
                adapters.push(request.adapter);
            }
            Ok((adapters, reader.adapters().clone()))
        })();
        std::fs::remove_file(&path).unwrap();
        read
    }

    #[test]
    fn chat_and_mooncake_lines_name_adapters_and_bad_names_are_refused() {
        let chat = "{\"prompt\": \"a\", \"adapter\": \"sql\"}\n{\"prompt\": \"b\"}\n\
                    {\"prompt\": \"c\", \"adapter\": \"chat\"}\n{\"prompt\": \"d\", \"adapter\": \"sql\"}\n";
        let (numbers, names) = read("adapters.jsonl", chat).unwrap();
        assert_eq!(numbers, [1, 0, 2, 1]);
        assert_eq!((names.name(1), names.name(2)), (Some("sql"), Some("chat")));
        let mooncake = "{\"input_length\": 4, \"hash_ids\": [1]}\n\
                        {\"input_length\": 4, \"hash_ids\": [1], \"adapter\": \"x\"}\n";
        assert_eq!(read("adapters-mc.jsonl", mooncake).unwrap().0, [0, 1]);
        for (bad, why) in [
            (
                "{\"prompt\": \"a\", \"adapter\": \"\"}",
                "an adapter name is not empty",
            ),
            ("{\"prompt\": \"a\", \"adapter\": 7}", "adapter"),
            (
                "{\"input_length\": 4, \"hash_ids\": [1], \"adapter\": \"\"}",
                "not empty",
            ),
        ] {
            let err = read("adapters-bad.jsonl", &format!("{bad}\n")).unwrap_err();
            let text = err.to_string();
            assert!(text.contains(why) && text.contains(":1"), "{bad}: {text}");
        }
        let long = format!(
            "{{\"prompt\": \"a\", \"adapter\": \"{}\"}}\n",
            "n".repeat(300)
        );
        let err = read("adapters-long.jsonl", &long).unwrap_err().to_string();
        assert!(
            err.contains("at most 256 bytes, not 300") && err.contains("adapter"),
            "{err}"
        );
    }
}
