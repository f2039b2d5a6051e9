//! Chat JSONL: one request per line, a `prompt` string or OpenAI-style `messages`, with
//! optional `id`, `parent`, `session`, `arrival_s`, `output_tokens`, `adapter` and
//! `session_end`.

use std::borrow::Cow;

use serde::Deserialize;

use crate::blocks::hash_text_blocks;
use crate::diagnose::diagnose;
use crate::error::{Fault, TraceError};
use crate::ids::{IdKey, IdValue};
use crate::linker::Linker;
use crate::request::TraceRequest;
use crate::trace_format::TraceFormat;

impl Linker {
    pub(crate) fn parse_chat(
        &mut self,
        line_no: usize,
        text: &str,
        out: &mut TraceRequest,
    ) -> Result<(), TraceError> {
        let parsed: ChatLine<'_> = serde_json::from_str(text)
            .map_err(|e| diagnose(&self.path, line_no, text, TraceFormat::Chat, &e))?;
        let id = match &parsed.id {
            Some(id) => id.key(),
            None => IdKey::Int(line_no as i64),
        };
        if self.ids.contains(id) {
            return Err(self.error_at(
                line_no,
                Some("id"),
                Fault::DuplicateId,
                format!("id {id} appears twice"),
            ));
        }
        let mut parent_seq = match &parsed.parent {
            Some(parent) => {
                let key = parent.key();
                Some(*self.ids.get(key).ok_or_else(|| {
                    self.error_at(
                        line_no,
                        Some("parent"),
                        Fault::UnknownParent,
                        format!("parent {key} is not the id of an earlier request"),
                    )
                })?)
            }
            None => None,
        };
        if let Some(arrival) = parsed.arrival_s
            && !(arrival.is_finite() && arrival >= 0.0)
        {
            return Err(self.error_at(
                line_no,
                Some("arrival_s"),
                Fault::InvalidField,
                format!("expected non-negative seconds, found {arrival}"),
            ));
        }
        if let Some(arrival) = parsed.arrival_s
            && arrival * 1e9 >= u64::MAX as f64
        {
            return Err(self.error_at(
                line_no,
                Some("arrival_s"),
                Fault::InvalidField,
                format!("{arrival} s does not fit in 64-bit nanoseconds (at most about 584 years)"),
            ));
        }
        out.prompt.clear();
        match (&parsed.prompt, &parsed.messages) {
            (Some(prompt), None) => out.prompt.extend_from_slice(prompt.as_bytes()),
            (None, Some(messages)) => flatten_messages(messages, &mut out.prompt),
            (Some(_), Some(_)) => {
                return Err(self.error_at(
                    line_no,
                    Some("messages"),
                    Fault::InvalidField,
                    "give either `prompt` or `messages`, not both".into(),
                ));
            }
            (None, None) => {
                return Err(self.error_at(
                    line_no,
                    Some("prompt"),
                    Fault::MissingField,
                    "missing: each line needs `prompt` (string) or `messages` (list)".into(),
                ));
            }
        }
        let adapter = self.adapter(parsed.adapter.as_deref(), line_no)?;
        let seq = self.take_seq(line_no)?;
        self.ids.insert_new(id, seq);
        out.session = self.session(
            parsed.session.as_ref().map(IdValue::key),
            seq,
            &mut parent_seq,
        );
        out.seq = seq;
        out.line = line_no;
        out.parent_seq = parent_seq;
        out.prompt_len = out.prompt.len() as u64;
        out.arrival_ns = parsed.arrival_s.map(|s| (s * 1e9).round() as u64);
        out.output_tokens = parsed.output_tokens;
        out.adapter = adapter;
        out.session_end = parsed.session_end.unwrap_or(false);
        hash_text_blocks(
            &out.prompt,
            self.options.block_size as usize,
            &mut out.blocks,
        );
        Ok(())
    }
}

/// The documented flattening of `messages`: for each message, `<|ROLE|>\n` + content + `\n`.
pub fn flatten_messages(messages: &[Message<'_>], out: &mut Vec<u8>) {
    for message in messages {
        out.extend_from_slice(b"<|");
        out.extend_from_slice(message.role.as_bytes());
        out.extend_from_slice(b"|>\n");
        out.extend_from_slice(message.content.as_bytes());
        out.push(b'\n');
    }
}

/// One OpenAI-style message.
#[derive(Debug, Deserialize)]
pub struct Message<'a> {
    /// `system`, `user`, `assistant`, ...
    #[serde(borrow)]
    pub role: Cow<'a, str>,
    /// The text.
    #[serde(borrow)]
    pub content: Cow<'a, str>,
}

#[derive(Debug, Deserialize)]
struct ChatLine<'a> {
    #[serde(borrow, default)]
    id: Option<IdValue<'a>>,
    #[serde(borrow, default)]
    prompt: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    messages: Option<Vec<Message<'a>>>,
    #[serde(borrow, default)]
    parent: Option<IdValue<'a>>,
    #[serde(borrow, default)]
    session: Option<IdValue<'a>>,
    #[serde(default)]
    arrival_s: Option<f64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(borrow, default)]
    adapter: Option<Cow<'a, str>>,
    #[serde(default)]
    session_end: Option<bool>,
}
