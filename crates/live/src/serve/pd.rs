//! The prefill leg of a request to a disaggregated fleet, in vLLM's disaggregated-serving
//! proxy protocol (its NIXL connector's proxy, `tests/v1/kv_connector/nixl_integration/
//! toy_proxy_server.py`, and vllm-router's PD mode speak it):
//!
//! 1. The prefill pool's plugins pick a prefill endpoint; it gets the request with
//!    `kv_transfer_params: {do_remote_decode: true, do_remote_prefill: false,
//!    remote_engine_id: null, remote_block_ids: null, remote_host: null, remote_port:
//!    null}`, `stream: false`, `max_tokens: 1` (and `max_completion_tokens: 1` when the
//!    client gave it), without `stream_options`, `min_tokens` or `min_completion_tokens`.
//! 2. Its answer's `kv_transfer_params` (where the decode endpoint pulls the KV from) go
//!    into the client's own request, which the decode pool's plugins route like any
//!    (`proxy` in the parent module), streamed back as it comes.
//!
//! The prefill endpoint's answer is its first token and its completion for the prefill
//! pool's plugins; the decode endpoint's stream is the decode pool's.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::header::HeaderValue;
use hyper::{Response, StatusCode};
use routerlab_core::Phase;
use serde_json::{Map, Value};

use super::routed::{Refusal, Routed};
use super::{MAX_ANSWER_BYTES, PREFILL_ENDPOINT_HEADER, Shared};
use crate::http::{self, Body};

/// Where the prefill leg is sent from.
pub(super) struct Upstream<'a> {
    pub(super) shared: &'a Arc<Shared>,
    pub(super) path: &'a str,
    pub(super) authorization: Option<&'a HeaderValue>,
}

/// The client's request as its prefill leg: one token, not streamed, asking for the KV to
/// be kept for a remote decode.
pub(super) fn prefill_request(client: &Map<String, Value>) -> Bytes {
    let mut leg = client.clone();
    leg.insert(
        "kv_transfer_params".into(),
        serde_json::json!({
            "do_remote_decode": true,
            "do_remote_prefill": false,
            "remote_engine_id": null,
            "remote_block_ids": null,
            "remote_host": null,
            "remote_port": null,
        }),
    );
    leg.insert("stream".into(), Value::Bool(false));
    leg.insert("max_tokens".into(), Value::from(1));
    if leg.contains_key("max_completion_tokens") {
        leg.insert("max_completion_tokens".into(), Value::from(1));
    }
    for key in ["stream_options", "min_tokens", "min_completion_tokens"] {
        leg.remove(key);
    }
    Bytes::from(serde_json::to_vec(&leg).expect("a JSON object serialises"))
}

/// The client's request as its decode leg: itself, with the prefill answer's
/// `kv_transfer_params` when it had any.
pub(super) fn decode_request(client: &Map<String, Value>, params: Option<Value>) -> Bytes {
    let mut leg = client.clone();
    if let Some(params) = params.filter(|p| p.as_object().is_some_and(|o| !o.is_empty())) {
        leg.insert("kv_transfer_params".into(), params);
    }
    Bytes::from(serde_json::to_vec(&leg).expect("a JSON object serialises"))
}

/// An error answer naming the prefill endpoint that gave it (when one did).
fn refused(status: StatusCode, message: &str, prefill: Option<&str>) -> Box<Response<Body>> {
    let mut response = http::error(status, message);
    if let Some(name) = prefill.and_then(|n| n.parse().ok()) {
        response.headers_mut().insert(PREFILL_ENDPOINT_HEADER, name);
    }
    Box::new(response)
}

impl Upstream<'_> {
    /// Runs the prefill leg of `routed` (the client's `body`): returns the request for its
    /// decode leg (`routed`, now for the decode phase, and its body) and the name of the
    /// endpoint that prefilled it, or the answer the client gets instead.
    pub(super) async fn prefill(
        &self,
        mut routed: Routed,
        body: &[u8],
    ) -> Result<(Routed, Bytes, String), Box<Response<Body>>> {
        let shared = self.shared;
        let client: Map<String, Value> = match serde_json::from_slice(body) {
            Ok(Value::Object(map)) => map,
            _ => {
                return Err(refused(
                    StatusCode::BAD_REQUEST,
                    "the body is not a JSON object",
                    None,
                ));
            }
        };
        let leg = prefill_request(&client);
        routed.phase = Phase::Prefill;
        let mut tried: Vec<usize> = Vec::new();
        loop {
            let pick = shared.pick(&routed, &tried).await;
            let upstream = match pick {
                Ok(upstream) => upstream,
                Err(Refusal(status, message)) => {
                    let status = StatusCode::from_u16(status).expect("a refusal's status is valid");
                    return Err(refused(status, &message, None));
                }
            };
            let name = shared.lock().await.send(upstream, &routed);
            let sent = shared
                .post(&name, self.path, self.authorization, leg.clone())
                .await;
            let response = match sent {
                Ok(Ok(response)) => response,
                Ok(Err(e)) => {
                    // Nothing was answered: another prefill endpoint may take it.
                    let mut state = shared.lock().await;
                    state.release(upstream, &routed);
                    state.upstreams[upstream].errors += 1;
                    state.upstreams[upstream].retries += 1;
                    tried.push(upstream);
                    if tried.len() > shared.settings.retries as usize {
                        return Err(refused(
                            StatusCode::BAD_GATEWAY,
                            &format!("{name}: {e}; the retries are spent"),
                            None,
                        ));
                    }
                    continue;
                }
                Err(_) => {
                    let mut state = shared.lock().await;
                    state.release(upstream, &routed);
                    state.upstreams[upstream].errors += 1;
                    return Err(refused(
                        StatusCode::GATEWAY_TIMEOUT,
                        &format!(
                            "{name} did not answer the prefill within {} s",
                            shared.settings.upstream_timeout.as_secs_f64()
                        ),
                        Some(&name),
                    ));
                }
            };
            let status = response.status();
            let whole = http_body_util::Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map(|c| c.to_bytes());
            let now = shared.now_ns();
            let mut state = shared.lock().await;
            let answer = match whole {
                Ok(answer) if status.is_success() => answer,
                Ok(answer) => {
                    // The engine's own refusal goes back to the client as it gave it.
                    state.release(upstream, &routed);
                    state.upstreams[upstream].errors += 1;
                    if status.is_server_error() {
                        state.answered(upstream, false, now);
                    }
                    let mut response = Response::builder()
                        .status(status)
                        .header("content-type", "application/json")
                        .body(http::full(answer))
                        .expect("a valid response");
                    if let Ok(value) = name.parse() {
                        response
                            .headers_mut()
                            .insert(PREFILL_ENDPOINT_HEADER, value);
                    }
                    return Err(Box::new(response));
                }
                Err(e) => {
                    state.release(upstream, &routed);
                    state.upstreams[upstream].errors += 1;
                    state.answered(upstream, false, now);
                    return Err(refused(
                        StatusCode::BAD_GATEWAY,
                        &format!("{name}: the prefill answer broke off: {e}"),
                        Some(&name),
                    ));
                }
            };
            let params = serde_json::from_slice::<Value>(&answer)
                .ok()
                .and_then(|v| v.get("kv_transfer_params").cloned());
            let learned = state.learn(&routed, upstream, now);
            state.first_token(&routed, upstream, learned, now);
            state.complete(&routed, upstream, learned, now);
            state.answered(upstream, true, now);
            drop(state);
            routed.phase = Phase::Decode;
            return Ok((routed, decode_request(&client, params), name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_legs_are_vllms_proxy_requests() {
        let client: Map<String, Value> = serde_json::from_str(
            r#"{"model": "m", "prompt": "hi", "max_tokens": 50, "max_completion_tokens": 50,
                "stream": true, "stream_options": {"include_usage": true}, "min_tokens": 3}"#,
        )
        .unwrap();
        let prefill: Value = serde_json::from_slice(&prefill_request(&client)).unwrap();
        assert_eq!(prefill["max_tokens"], 1);
        assert_eq!(prefill["max_completion_tokens"], 1);
        assert_eq!(prefill["stream"], false);
        assert!(prefill.get("stream_options").is_none());
        assert!(prefill.get("min_tokens").is_none());
        assert_eq!(prefill["prompt"], "hi");
        let params = &prefill["kv_transfer_params"];
        assert_eq!(params["do_remote_decode"], true);
        assert_eq!(params["do_remote_prefill"], false);
        for key in [
            "remote_engine_id",
            "remote_block_ids",
            "remote_host",
            "remote_port",
        ] {
            assert!(params[key].is_null(), "{key}");
        }
        // The decode leg is the client's request, with what the prefill answer said.
        let answer = serde_json::json!({"do_remote_prefill": true, "remote_engine_id": "p0"});
        let decode: Value =
            serde_json::from_slice(&decode_request(&client, Some(answer.clone()))).unwrap();
        assert_eq!(decode["kv_transfer_params"], answer);
        assert_eq!(decode["max_tokens"], 50);
        assert_eq!(decode["stream"], true);
        assert_eq!(decode["min_tokens"], 3);
        let plain: Value = serde_json::from_slice(&decode_request(&client, None)).unwrap();
        assert!(plain.get("kv_transfer_params").is_none());
    }
}
