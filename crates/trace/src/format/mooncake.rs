//! Mooncake JSONL: lengths and prefix-block ids, no text. The common line takes a fast
//! path that reads it without serde; anything unusual goes through serde, which also words
//! the errors.

use std::borrow::Cow;
use std::fmt;

use crate::diagnose::diagnose;
use crate::error::{Fault, TraceError};
use crate::ids::{IdKey, IdValue};
use crate::linker::Linker;
use crate::request::TraceRequest;
use crate::trace_format::TraceFormat;

impl Linker {
    pub(crate) fn parse_mooncake(
        &mut self,
        line_no: usize,
        bytes: &[u8],
        out: &mut TraceRequest,
    ) -> Result<(), TraceError> {
        out.blocks.clear();
        // The fast path accepts only ASCII, so a line it takes needs no UTF-8 check.
        let fast = fast_mooncake(bytes, &mut out.blocks, self.times_only);
        let parsed: MooncakeLine<'_> = if let Some(line) = fast {
            line
        } else {
            out.blocks.clear();
            let text = self.utf8(line_no, bytes)?;
            let mut de = serde_json::Deserializer::from_str(text);
            let seed = MooncakeSeed {
                blocks: &mut out.blocks,
            };
            serde::de::DeserializeSeed::deserialize(seed, &mut de)
                .and_then(|v| de.end().map(|()| v))
                .map_err(|e| diagnose(&self.path, line_no, text, TraceFormat::Mooncake, &e))?
        };
        let block = u64::from(self.options.trace_block_size);
        let needed = parsed.input_length.div_ceil(block);
        if (out.blocks.len() as u64) < needed && !self.times_only {
            return Err(self.error_at(
                line_no,
                Some("hash_ids"),
                Fault::HashIdsTooShort,
                format!(
                    "{} ids, but input_length {} needs {needed} blocks of {block} tokens \
                     (is --trace-block-size right?)",
                    out.blocks.len(),
                    parsed.input_length
                ),
            ));
        }
        out.blocks.truncate(needed as usize);
        if let Some(ts) = parsed.timestamp
            && !(ts.is_finite() && ts >= 0.0)
        {
            return Err(self.error_at(
                line_no,
                Some("timestamp"),
                Fault::InvalidField,
                format!("expected non-negative milliseconds, found {ts}"),
            ));
        }
        if let Some(ts) = parsed.timestamp
            && ts * 1e6 >= u64::MAX as f64
        {
            return Err(self.error_at(
                line_no,
                Some("timestamp"),
                Fault::InvalidField,
                format!("{ts} ms does not fit in 64-bit nanoseconds (at most about 584 years)"),
            ));
        }
        let mut parent_seq = None;
        if let Some(parent) = parsed.parent_chat_id.filter(|p| *p >= 0) {
            parent_seq = Some(*self.ids.get(IdKey::Int(parent)).ok_or_else(|| {
                self.error_at(
                    line_no,
                    Some("parent_chat_id"),
                    Fault::UnknownParent,
                    format!("parent_chat_id {parent} is not the chat_id of an earlier request"),
                )
            })?);
        }
        if let Some(chat) = parsed.chat_id
            && self.ids.contains(IdKey::Int(chat))
        {
            return Err(self.error_at(
                line_no,
                Some("chat_id"),
                Fault::DuplicateId,
                format!("chat_id {chat} appears twice"),
            ));
        }
        // Every check is done: only now does the line become request `seq` (skipped lines
        // must leave no gap, since positions index per-request tables).
        let adapter = self.adapter(parsed.adapter.as_deref(), line_no)?;
        let seq = self.take_seq(line_no)?;
        if let Some(chat) = parsed.chat_id {
            self.ids.insert_new(IdKey::Int(chat), seq);
        }
        out.session = self.session(
            parsed.session_id.as_ref().map(IdValue::key),
            seq,
            &mut parent_seq,
        );
        out.seq = seq;
        out.line = line_no;
        out.parent_seq = parent_seq;
        out.prompt.clear();
        out.prompt_len = parsed.input_length;
        out.arrival_ns = parsed.timestamp.map(|ms| round_up_from_half(ms * 1e6));
        out.output_tokens = parsed.output_length;
        out.adapter = adapter;
        out.session_end = parsed.session_end.unwrap_or(false);
        Ok(())
    }
}

/// `x` rounded to the nearest integer, halves up: `x.round() as u64` for a finite `x` from
/// 0 up to (not including) 2^64, without the call to the C library's `round` that
/// `f64::round` is on the baseline x86-64 target (one in every line). The truncated part
/// is exact: below 2^53 the integer part is, and from there on `x` is an integer.
#[inline]
fn round_up_from_half(x: f64) -> u64 {
    let whole = x as u64;
    if x - whole as f64 >= 0.5 {
        whole + 1
    } else {
        whole
    }
}

/// The fast path for the common Mooncake line: an object of non-negative integer fields
/// (`timestamp`, `input_length`, `output_length`, `session_id`, `chat_id`), an integer
/// `parent_chat_id`, and `hash_ids`, with plain whitespace. Anything else (other keys,
/// floats, strings, escapes, malformed text) returns `None`, and the line goes through
/// serde, which also produces the error messages. Lines are the same either way; the
/// snapshots and bad-input tests hold both paths to that.
///
/// With `times_only`, `hash_ids` is passed over to its closing bracket, unread.
fn fast_mooncake<'a>(
    text: &[u8],
    blocks: &mut Vec<u64>,
    times_only: bool,
) -> Option<MooncakeLine<'a>> {
    #[inline(always)]
    fn number(text: &[u8], at: &mut usize) -> Option<u64> {
        if let Some((value, len)) = short_number(text, *at) {
            *at += len;
            return Some(value);
        }
        let start = *at;
        let mut value: u64 = 0;
        while let Some(digit) = text.get(*at).filter(|b| b.is_ascii_digit()) {
            // Wrapping is cheaper than checking every digit; 19 digits cannot overflow, and
            // a 20-digit number is parsed again with checks below.
            value = value.wrapping_mul(10).wrapping_add(u64::from(digit - b'0'));
            *at += 1;
        }
        let digits = &text[start..*at];
        if digits.len() == 20 {
            value = digits.iter().try_fold(0u64, |value, digit| {
                value.checked_mul(10)?.checked_add(u64::from(digit - b'0'))
            })?;
        }
        // No digits, more than a u64 holds, or a leading zero before more digits: not ours.
        // (A fraction or exponent after the digits fails the caller's separator check.)
        let leading_zero = digits.len() > 1 && digits[0] == b'0';
        ((1..=20).contains(&digits.len()) && !leading_zero).then_some(value)
    }
    let mut at = 0;
    let skip_ws = |at: &mut usize| {
        while text.get(*at).is_some_and(|b| matches!(b, b' ' | b'\t')) {
            *at += 1;
        }
    };
    // After an element of a list (`close` = `]`) or object (`}`): `Some(true)` past a comma,
    // at the next element; `Some(false)` past `close`; `None` for anything else. The usual
    // `, ` before something `starts_next` accepts is one comparison; other spacing takes the
    // general rules.
    let separator = |at: &mut usize, close: u8, starts_next: fn(u8) -> bool| {
        if text.get(*at..*at + 2) == Some(b", ")
            && text.get(*at + 2).is_some_and(|b| starts_next(*b))
        {
            *at += 2;
            return Some(true);
        }
        skip_ws(at);
        match text.get(*at) {
            Some(b',') => {
                *at += 1;
                skip_ws(at);
                Some(true)
            }
            Some(b) if *b == close => {
                *at += 1;
                Some(false)
            }
            _ => None,
        }
    };
    /// The keys the fast path knows.
    #[derive(Clone, Copy)]
    enum Key {
        Timestamp,
        InputLength,
        OutputLength,
        HashIds,
        SessionId,
        ChatId,
        ParentChatId,
    }
    // The known keys differ in their first letter: compare against the one it names, with
    // fixed-size comparisons (a few loads, not a `memcmp`).
    fn is<const N: usize>(rest: &[u8], quoted: &[u8; N]) -> bool {
        rest.get(..N) == Some(quoted.as_slice())
    }
    let mut line = MooncakeLine::default();
    let (mut has_input, mut has_ids) = (false, false);
    let mut seen = 0u8;
    skip_ws(&mut at);
    if text.get(at) != Some(&b'{') {
        return None;
    }
    at += 1;
    skip_ws(&mut at);
    // Each turn starts at a key's opening quote. The usual `": "` after a key is one
    // comparison; other spacing takes the general rules.
    loop {
        if text.get(at) != Some(&b'"') {
            return None;
        }
        let rest = &text[at + 1..];
        let (key, len) = match rest.first() {
            Some(b't') if is(rest, b"timestamp\"") => (Key::Timestamp, 9),
            Some(b'i') if is(rest, b"input_length\"") => (Key::InputLength, 12),
            Some(b'o') if is(rest, b"output_length\"") => (Key::OutputLength, 13),
            Some(b'h') if is(rest, b"hash_ids\"") => (Key::HashIds, 8),
            Some(b's') if is(rest, b"session_id\"") => (Key::SessionId, 10),
            Some(b'c') if is(rest, b"chat_id\"") => (Key::ChatId, 7),
            Some(b'p') if is(rest, b"parent_chat_id\"") => (Key::ParentChatId, 14),
            _ => return None,
        };
        // A key given twice: serde's path names it as an error.
        let bit = 1u8 << (key as u8);
        if seen & bit != 0 {
            return None;
        }
        seen |= bit;
        at += len + 2;
        if text.get(at..at + 2) == Some(b": ") {
            at += 2;
        } else {
            skip_ws(&mut at);
            if text.get(at) != Some(&b':') {
                return None;
            }
            at += 1;
        }
        skip_ws(&mut at);
        match key {
            Key::HashIds => {
                if text.get(at) != Some(&b'[') {
                    return None;
                }
                at += 1;
                skip_ws(&mut at);
                if times_only {
                    at += memchr::memchr(b']', &text[at..])? + 1;
                } else if text.get(at) == Some(&b']') {
                    at += 1;
                } else {
                    loop {
                        blocks.push(number(text, &mut at)?);
                        if !separator(&mut at, b']', |b| b.is_ascii_digit())? {
                            break;
                        }
                    }
                }
                has_ids = true;
            }
            Key::ParentChatId if text.get(at) == Some(&b'-') => {
                at += 1;
                let magnitude = i64::try_from(number(text, &mut at)?).ok()?;
                line.parent_chat_id = Some(-magnitude);
            }
            key => {
                let value = number(text, &mut at)?;
                let signed = || i64::try_from(value).ok();
                match key {
                    Key::Timestamp => line.timestamp = Some(value as f64),
                    Key::InputLength => {
                        line.input_length = value;
                        has_input = true;
                    }
                    Key::OutputLength => line.output_length = Some(value),
                    Key::SessionId => line.session_id = Some(IdValue::Int(signed()?)),
                    Key::ChatId => line.chat_id = Some(signed()?),
                    Key::ParentChatId => line.parent_chat_id = Some(signed()?),
                    Key::HashIds => return None,
                }
            }
        }
        if !separator(&mut at, b'}', |b| b == b'"')? {
            break;
        }
    }
    skip_ws(&mut at);
    (at == text.len() && has_input && has_ids).then_some(line)
}

/// The run of 1 to 7 digits at `text[at..]`, read eight bytes at a time: the digits are found
/// and combined with a few word-wide operations instead of a branch per digit, which is most
/// of the parsing time of a Mooncake line. `None` when there are not eight bytes left, or
/// the run is empty, longer, or has a leading zero: the caller's digit loop decides. What
/// follows the digits (a fraction, an exponent) is the caller's to reject.
#[inline(always)]
fn short_number(text: &[u8], at: usize) -> Option<(u64, usize)> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let chunk: [u8; 8] = text.get(at..at + 8)?.try_into().ok()?;
    let word = u64::from_le_bytes(chunk);
    // Byte by byte: `word - '0'` has its top bit set below '0', `word + 0x46` above '9'.
    // Borrows and carries only travel up from the first non-digit, so bytes below it are
    // exact.
    let digits = word.wrapping_sub(0x30 * ONES);
    let non_digit = (word.wrapping_add(0x46 * ONES) | digits) & (0x80 * ONES);
    let len = (non_digit.trailing_zeros() / 8) as usize;
    if len == 0 || len == 8 || (len > 1 && chunk[0] == b'0') {
        return None;
    }
    // Move the digits to the top bytes (zeros above act as leading zeros), then combine
    // neighbours: pairs, then quads, then the whole word (first byte most significant).
    let mut value = digits << (8 * (8 - len));
    value = ((value & 0x0F0F_0F0F_0F0F_0F0F).wrapping_mul(1 + (10 << 8))) >> 8;
    value = ((value & 0x00FF_00FF_00FF_00FF).wrapping_mul(1 + (100 << 16))) >> 16;
    value = ((value & 0x0000_FFFF_0000_FFFF).wrapping_mul(1 + (10_000 << 32))) >> 32;
    Some((value, len))
}

/// A Mooncake line; `hash_ids` go straight into the reused block buffer.
#[derive(Debug, Default)]
struct MooncakeLine<'a> {
    timestamp: Option<f64>,
    input_length: u64,
    output_length: Option<u64>,
    session_id: Option<IdValue<'a>>,
    chat_id: Option<i64>,
    parent_chat_id: Option<i64>,
    adapter: Option<Cow<'a, str>>,
    session_end: Option<bool>,
}

struct MooncakeSeed<'b> {
    blocks: &'b mut Vec<u64>,
}

impl<'de> serde::de::DeserializeSeed<'de> for MooncakeSeed<'_> {
    type Value = MooncakeLine<'de>;
    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        de.deserialize_map(self)
    }
}

struct HashIds<'b>(&'b mut Vec<u64>);

impl<'de> serde::de::DeserializeSeed<'de> for HashIds<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for HashIds<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of non-negative integers")
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(id) = seq.next_element::<u64>()? {
            self.0.push(id);
        }
        Ok(())
    }
}

impl<'de> serde::de::Visitor<'de> for MooncakeSeed<'_> {
    type Value = MooncakeLine<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Mooncake request object")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        use serde::de::Error;
        let mut line = MooncakeLine::default();
        let (mut has_input, mut has_ids) = (false, false);
        const KNOWN: [&str; 9] = [
            "timestamp",
            "input_length",
            "output_length",
            "hash_ids",
            "session_id",
            "chat_id",
            "parent_chat_id",
            "adapter",
            "session_end",
        ];
        let mut seen = [false; KNOWN.len()];
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            // A known key twice is an error, as it is in the other formats' lines.
            if let Some(i) = KNOWN.iter().position(|k| *k == key.as_ref()) {
                if seen[i] {
                    return Err(A::Error::duplicate_field(KNOWN[i]));
                }
                seen[i] = true;
            }
            match key.as_ref() {
                "timestamp" => line.timestamp = map.next_value()?,
                "input_length" => {
                    line.input_length = map.next_value()?;
                    has_input = true;
                }
                "output_length" => line.output_length = map.next_value()?,
                "hash_ids" => {
                    map.next_value_seed(HashIds(self.blocks))?;
                    has_ids = true;
                }
                "session_id" => line.session_id = map.next_value()?,
                "chat_id" => line.chat_id = map.next_value()?,
                "parent_chat_id" => line.parent_chat_id = map.next_value()?,
                "adapter" => line.adapter = map.next_value()?,
                "session_end" => line.session_end = map.next_value()?,
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        if !has_input {
            return Err(A::Error::missing_field("input_length"));
        }
        if !has_ids {
            return Err(A::Error::missing_field("hash_ids"));
        }
        Ok(line)
    }
}

/// For the fuzz targets: one line as the fast path reads it and as the serde path reads
/// it, each as debug text with its blocks (`None`: declined, or rejected). Whenever the fast
/// path accepts a line, the serde path must read exactly the same values.
#[doc(hidden)]
pub fn both_paths(bytes: &[u8]) -> (Option<String>, Option<String>) {
    let mut fast_blocks = Vec::new();
    let fast =
        fast_mooncake(bytes, &mut fast_blocks, false).map(|l| format!("{l:?} {fast_blocks:?}"));
    let mut blocks = Vec::new();
    let slow = std::str::from_utf8(bytes).ok().and_then(|text| {
        let mut de = serde_json::Deserializer::from_str(text);
        let line = serde::de::DeserializeSeed::deserialize(
            MooncakeSeed {
                blocks: &mut blocks,
            },
            &mut de,
        )
        .ok()?;
        de.end().ok()?;
        Some(format!("{line:?} {blocks:?}"))
    });
    (fast, slow)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The serde path, for comparison.
    fn slow(text: &str, blocks: &mut Vec<u64>) -> Option<String> {
        let mut de = serde_json::Deserializer::from_str(text);
        let line =
            serde::de::DeserializeSeed::deserialize(MooncakeSeed { blocks }, &mut de).ok()?;
        de.end().ok()?;
        Some(format!("{line:?}"))
    }

    #[test]
    fn milliseconds_round_to_nanoseconds_as_f64_round_does() {
        let mut rng = routerlab_core::SeededRng::new(5);
        let mut xs = vec![0.0, 0.5, 1.5, 2.5, 0.49999999999999994, 4503599627370495.5];
        xs.extend([
            2f64.powi(52),
            2f64.powi(53),
            2f64.powi(53) + 2.0,
            2f64.powi(63),
        ]);
        xs.push(u64::MAX as f64 - 4096.0);
        for _ in 0..100_000 {
            let ms = rng.below(1 << 40) as f64 + rng.below(1000) as f64 / 1000.0;
            xs.push(ms * 1e6);
            xs.push(rng.below(u64::MAX >> 11) as f64 + 0.5);
        }
        for x in xs {
            assert_eq!(round_up_from_half(x), x.round() as u64, "{x}");
        }
    }

    #[test]
    fn short_numbers_read_eight_bytes_at_a_time_or_decline() {
        let mut rng = routerlab_core::SeededRng::new(3);
        for _ in 0..20_000 {
            let digits = 1 + rng.below(7);
            let value = rng.below(10u64.pow(digits as u32));
            let end = [b",", b"]", b" ", b"}", b"x"][rng.below(5) as usize];
            let text = format!("{value}{}        ", std::str::from_utf8(end).unwrap());
            assert_eq!(
                short_number(text.as_bytes(), 0),
                Some((value, value.to_string().len())),
                "{text:?}"
            );
        }
        for declined in ["12345678,", "0123,    ", ",1,      ", "12,"] {
            assert_eq!(short_number(declined.as_bytes(), 0), None, "{declined:?}");
        }
        assert_eq!(short_number(b"[9999999]", 1), Some((9_999_999, 7)));
        assert_eq!(short_number(b"0,       ", 0), Some((0, 1)));
        assert_eq!(short_number(b"12.5,    ", 0), Some((12, 2)));
    }

    #[test]
    fn the_mooncake_fast_path_agrees_with_serde_or_declines() {
        let taken = [
            r#"{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2, 3]}"#,
            r#"{"timestamp":27,"input_length":1,"output_length":0,"hash_ids":[]}"#,
            r#"  { "hash_ids" : [ 7 ] , "input_length" : 3 , "session_id" : 4 }  "#,
            r#"{"timestamp": 5, "input_length": 10, "hash_ids": [1], "chat_id": 3, "parent_chat_id": -1}"#,
            r#"{"input_length": 10, "hash_ids": [18446744073709551615], "parent_chat_id": 2}"#,
        ];
        for text in taken {
            let (mut fast_blocks, mut slow_blocks) = (Vec::new(), Vec::new());
            let fast =
                fast_mooncake(text.as_bytes(), &mut fast_blocks, false).map(|l| format!("{l:?}"));
            assert!(fast.is_some(), "fast path should take {text}");
            assert_eq!(fast, slow(text, &mut slow_blocks), "{text}");
            assert_eq!(fast_blocks, slow_blocks, "{text}");
            // Read for its times only, the line is the same, without its blocks.
            let mut none = Vec::new();
            let times = fast_mooncake(text.as_bytes(), &mut none, true).map(|l| format!("{l:?}"));
            assert_eq!((times, none), (fast, Vec::new()), "{text}");
        }
        let declined = [
            r#"{"timestamp": 1.5, "input_length": 1, "hash_ids": [1]}"#,
            r#"{"timestamp": 1, "input_length": -5, "hash_ids": [1]}"#,
            r#"{"input_length": 1, "hash_ids": [1], "extra": "x"}"#,
            r#"{"input_length": 1, "hash_ids": [01]}"#,
            r#"{"input_length": 1}"#,
            r#"{"input_length": 1, "hash_ids": [1]} trailing"#,
            r#"{"input_length": 1, "hash_ids": [1,]}"#,
            r#"{"session_id": "abc", "input_length": 1, "hash_ids": [1]}"#,
            r#"{"input_length": 1e3, "hash_ids": [1]}"#,
            r#"{"input_length": 1, "hash_ids": [1.5, 2, 3, 4, 5, 6]}"#,
            r#"{"input_length": 1, "hash_ids": [1, 2e3, 3, 4, 5, 6]}"#,
            r#"{"timestamp": 1.5e3, "input_length": 1, "hash_ids": [1]}"#,
            r#"{"input_length": 18446744073709551616, "hash_ids": [1]}"#,
            r#"{"input_length": 99999999999999999999, "hash_ids": [1]}"#,
            r#"{"input_length": 100000000000000000000, "hash_ids": [1]}"#,
            r#"[1, 2]"#,
            "",
        ];
        for text in declined {
            assert!(
                fast_mooncake(text.as_bytes(), &mut Vec::new(), false).is_none(),
                "fast path must decline {text}"
            );
        }
    }
}
