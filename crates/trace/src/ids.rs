//! Ids as traces write them (integers or strings) and the tables that turn them into
//! request positions and session numbers.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;

use routerlab_core::hash::BlockInterner;
use serde::Deserialize;

/// An id as written: an integer or a string.
#[derive(Debug)]
pub(crate) enum IdValue<'a> {
    Int(i64),
    Text(Cow<'a, str>),
}

impl IdValue<'_> {
    /// The normalised key: `7` and `"7"` are one id.
    pub(crate) fn key(&self) -> IdKey<'_> {
        match self {
            IdValue::Int(n) => IdKey::Int(*n),
            IdValue::Text(text) => match text.parse::<i64>() {
                Ok(n) if n.to_string() == *text => IdKey::Int(n),
                _ => IdKey::Text(text),
            },
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for IdValue<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct Visit<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visit<'a> {
            type Value = IdValue<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an integer")
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Self::Value, E> {
                Ok(IdValue::Int(n))
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Self::Value, E> {
                i64::try_from(n)
                    .map(IdValue::Int)
                    .map_err(|_| E::custom("integer id too large"))
            }
            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                s: &'de str,
            ) -> Result<Self::Value, E> {
                Ok(IdValue::Text(Cow::Borrowed(s)))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(IdValue::Text(Cow::Owned(s.to_owned())))
            }
        }
        de.deserialize_any(Visit(PhantomData))
    }
}

/// A normalised id.
#[derive(Debug, Clone, Copy)]
pub(crate) enum IdKey<'a> {
    Int(i64),
    Text(&'a str),
}

impl fmt::Display for IdKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdKey::Int(n) => write!(f, "{n}"),
            IdKey::Text(s) => f.write_str(s),
        }
    }
}

/// Requests a trace may hold, so that every id and session table can number its keys with
/// 32-bit ids.
pub(crate) const MAX_REQUESTS: u64 = u32::MAX as u64 - 1;

/// Values by normalised id: integers through a [`BlockInterner`] into a dense array (ids
/// in traces mostly count up, so recent ones sit together in memory; a hash map would put
/// every lookup of a large trace on a cache miss), other text in a string map.
pub(crate) struct IdTable<V> {
    ints: BlockInterner,
    values: Vec<V>,
    texts: HashMap<Box<str>, V>,
}

impl<V> Default for IdTable<V> {
    fn default() -> Self {
        IdTable {
            ints: BlockInterner::default(),
            values: Vec::new(),
            texts: HashMap::new(),
        }
    }
}

impl<V> IdTable<V> {
    pub(crate) fn get(&self, key: IdKey<'_>) -> Option<&V> {
        match key {
            IdKey::Int(n) => self.ints.get(n as u64).map(|i| &self.values[i as usize]),
            IdKey::Text(s) => self.texts.get(s),
        }
    }

    pub(crate) fn contains(&self, key: IdKey<'_>) -> bool {
        self.get(key).is_some()
    }

    /// Inserts a key that is not in the table yet.
    pub(crate) fn insert_new(&mut self, key: IdKey<'_>, value: V) {
        self.get_or_insert_with(key, |_| value);
    }

    pub(crate) fn get_or_insert_with(
        &mut self,
        key: IdKey<'_>,
        make: impl FnOnce(usize) -> V,
    ) -> &mut V {
        let len = self.len();
        match key {
            IdKey::Int(n) => {
                let index = self.ints.intern(n as u64).expect(
                    "ids never outnumber requests, \
                     and `take_seq` keeps those below u32::MAX",
                ) as usize;
                if index == self.values.len() {
                    self.values.push(make(len));
                }
                &mut self.values[index]
            }
            IdKey::Text(s) => {
                if !self.texts.contains_key(s) {
                    self.texts.insert(s.into(), make(len));
                }
                self.texts.get_mut(s).expect("just inserted")
            }
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.values.len() + self.texts.len()
    }
}
