//! The OpenAI-compatible request and response shapes, as far as routing and the simulated
//! engine need them: a prompt (chat `messages` flattened exactly as the chat JSONL format
//! flattens them, so a live request and a replayed one hash alike), `max_tokens`,
//! `stream`, `user`; and the response bodies, whole or as server-sent events.

use routerlab_trace::format::chat::{Message, flatten_messages};
use serde::Deserialize;

/// Which endpoint a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `/v1/completions`.
    Completions,
    /// `/v1/chat/completions`.
    Chat,
}

impl Api {
    /// The API of a request path, if it is one of the two.
    pub fn of_path(path: &str) -> Option<Api> {
        match path {
            "/v1/completions" => Some(Api::Completions),
            "/v1/chat/completions" => Some(Api::Chat),
            _ => None,
        }
    }
}

/// What routing and the engine read of a completion request.
#[derive(Debug, Clone, PartialEq)]
pub struct Inference {
    /// The endpoint it came to.
    pub api: Api,
    /// `model`, as given (empty when absent).
    pub model: String,
    /// The prompt bytes (chat messages flattened).
    pub prompt: Vec<u8>,
    /// `max_tokens` (or `max_completion_tokens`), if given.
    pub max_tokens: Option<u32>,
    /// Whether the client asked for server-sent events.
    pub stream: bool,
    /// The OpenAI `user` field: the session when no session header is given.
    pub user: Option<String>,
    /// vLLM's disaggregated-serving `kv_transfer_params`, as given.
    pub kv_transfer_params: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Body<'a> {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    prompt: Option<serde_json::Value>,
    #[serde(default, borrow)]
    messages: Option<Vec<ChatMessage<'a>>>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    max_completion_tokens: Option<u32>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    kv_transfer_params: Option<serde_json::Value>,
}

/// A chat message as clients send it: `content` one string, or a list of parts (of which
/// the `text` parts are the prompt, joined by newlines as vLLM joins them), or absent (an
/// assistant's tool call).
#[derive(Deserialize)]
struct ChatMessage<'a> {
    #[serde(borrow)]
    role: std::borrow::Cow<'a, str>,
    #[serde(default)]
    content: Option<Content>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Deserialize)]
struct ContentPart {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
}

impl ChatMessage<'_> {
    /// The message as the chat trace format has it (its text parts joined).
    fn flat(&self) -> Message<'_> {
        let content = match &self.content {
            None => std::borrow::Cow::Borrowed(""),
            Some(Content::Text(text)) => std::borrow::Cow::Borrowed(text.as_str()),
            Some(Content::Parts(parts)) => std::borrow::Cow::Owned(
                parts
                    .iter()
                    .filter(|p| p.kind == "text")
                    .filter_map(|p| p.text.as_deref())
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
        };
        Message {
            role: std::borrow::Cow::Borrowed(&self.role),
            content,
        }
    }
}

/// Reads a request body of `api`; the error says what is wrong, for a 400.
pub fn parse(api: Api, body: &[u8]) -> Result<Inference, String> {
    let parsed: Body<'_> = serde_json::from_slice(body)
        .map_err(|e| format!("the body is not a valid request: {e}"))?;
    let mut prompt = Vec::new();
    match (api, parsed.prompt, parsed.messages) {
        (Api::Completions, Some(serde_json::Value::String(text)), _) => {
            prompt.extend_from_slice(text.as_bytes())
        }
        (Api::Completions, Some(_), _) => {
            return Err(
                "`prompt` must be one string (token-id and batched prompts are not routed)".into(),
            );
        }
        (Api::Completions, None, _) => return Err("missing `prompt`".into()),
        (Api::Chat, _, Some(messages)) => {
            let flat: Vec<Message<'_>> = messages.iter().map(ChatMessage::flat).collect();
            flatten_messages(&flat, &mut prompt)
        }
        (Api::Chat, _, None) => return Err("missing `messages`".into()),
    }
    Ok(Inference {
        api,
        model: parsed.model.unwrap_or_default(),
        prompt,
        max_tokens: parsed.max_tokens.or(parsed.max_completion_tokens),
        stream: parsed.stream,
        user: parsed.user,
        kv_transfer_params: parsed.kv_transfer_params.filter(|p| !p.is_null()),
    })
}

/// `count` generated tokens of filler text (the simulated engine's output).
pub fn filler(count: u32) -> String {
    " x".repeat(count as usize)
}

/// A whole (non-streamed) response carrying `text`.
pub fn response(
    api: Api,
    id: u64,
    model: &str,
    text: &str,
    usage: serde_json::Value,
) -> serde_json::Value {
    match api {
        Api::Completions => serde_json::json!({
            "id": format!("cmpl-{id}"), "object": "text_completion", "created": 0,
            "model": model,
            "choices": [{"index": 0, "text": text, "finish_reason": "length"}],
            "usage": usage,
        }),
        Api::Chat => serde_json::json!({
            "id": format!("chatcmpl-{id}"), "object": "chat.completion", "created": 0,
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "length"}],
            "usage": usage,
        }),
    }
}

/// The `usage` block: token counts, with the prompt tokens the engine's prefix cache
/// served (`prompt_tokens_details.cached_tokens`, as vLLM reports them).
pub fn usage(prompt_tokens: u64, cached_tokens: u64, completion_tokens: u64) -> serde_json::Value {
    serde_json::json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    })
}

/// One server-sent event carrying `text`; the last one says why generation stopped and
/// carries `usage`.
pub fn event(
    api: Api,
    id: u64,
    model: &str,
    text: &str,
    last: Option<&serde_json::Value>,
) -> String {
    let finish = if last.is_some() {
        serde_json::json!("length")
    } else {
        serde_json::Value::Null
    };
    let mut chunk = match api {
        Api::Completions => serde_json::json!({
            "id": format!("cmpl-{id}"), "object": "text_completion", "created": 0,
            "model": model,
            "choices": [{"index": 0, "text": text, "finish_reason": finish}],
        }),
        Api::Chat => serde_json::json!({
            "id": format!("chatcmpl-{id}"), "object": "chat.completion.chunk", "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}],
        }),
    };
    if let Some(usage) = last {
        chunk["usage"] = usage.clone();
    }
    format!("data: {chunk}\n\n")
}

/// The event that ends a stream.
pub const DONE: &str = "data: [DONE]\n\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_messages_flatten_as_the_chat_trace_format_does() {
        let body = br#"{"model": "m", "messages": [{"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"}], "max_tokens": 3, "stream": true, "user": "u1"}"#;
        let request = parse(Api::Chat, body).unwrap();
        assert_eq!(request.prompt, b"<|system|>\nbe brief\n<|user|>\nhi\n");
        assert_eq!(request.max_tokens, Some(3));
        assert!(request.stream);
        assert_eq!(request.user.as_deref(), Some("u1"));
    }

    /// Content as a list of parts, as GuideLLM and the OpenAI SDK send it (it was refused
    /// with a 400): its text parts are the prompt, joined by newlines; other parts and an
    /// absent content add nothing. One text part hashes as the same string would.
    #[test]
    fn content_parts_are_read_as_their_text() {
        let body = br#"{"messages": [{"role": "system", "content": [{"type": "text", "text": "be brief"}]},
            {"role": "user", "content": [{"type": "text", "text": "hi"},
             {"type": "image_url", "image_url": {"url": "x"}}, {"type": "text", "text": "there"}]},
            {"role": "assistant", "content": null, "tool_calls": []}]}"#;
        let request = parse(Api::Chat, body).unwrap();
        assert_eq!(
            request.prompt,
            b"<|system|>\nbe brief\n<|user|>\nhi\nthere\n<|assistant|>\n\n"
        );
        let plain = br#"{"messages": [{"role": "system", "content": "be brief"}]}"#;
        let parts = br#"{"messages": [{"role": "system", "content": [{"type": "text", "text": "be brief"}]}]}"#;
        assert_eq!(
            parse(Api::Chat, plain).unwrap().prompt,
            parse(Api::Chat, parts).unwrap().prompt
        );
        let bad = br#"{"messages": [{"role": "user", "content": 7}]}"#;
        assert!(parse(Api::Chat, bad).is_err());
    }

    #[test]
    fn malformed_requests_say_what_is_wrong() {
        assert!(
            parse(Api::Completions, b"{}")
                .unwrap_err()
                .contains("missing `prompt`")
        );
        assert!(
            parse(Api::Completions, br#"{"prompt": [1, 2]}"#)
                .unwrap_err()
                .contains("one string")
        );
        assert!(
            parse(Api::Chat, b"{")
                .unwrap_err()
                .contains("not a valid request")
        );
    }
}
