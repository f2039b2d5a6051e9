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

use serde_json::value::RawValue;

use super::routed::{Refusal, Routed};
use super::tracked::with_state;
use super::{PREFILL_ENDPOINT_HEADER, Shared};
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
/// `kv_transfer_params` (their JSON text, an object) when it had any.
pub(super) fn decode_request(client: &Map<String, Value>, params: Option<&RawValue>) -> Bytes {
    #[derive(serde::Serialize)]
    struct Leg<'a> {
        #[serde(flatten)]
        client: &'a Map<String, Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        kv_transfer_params: Option<&'a RawValue>,
    }
    let mut without;
    let client = match params {
        Some(_) if client.contains_key("kv_transfer_params") => {
            without = client.clone();
            without.remove("kv_transfer_params");
            &without
        }
        _ => client,
    };
    let leg = Leg {
        client,
        kv_transfer_params: params,
    };
    Bytes::from(serde_json::to_vec(&leg).expect("a JSON object serialises"))
}

/// The most bytes of a prefill endpoint's answer `serve` reads: one token and where its KV
/// waits (a block id list for a long prompt is tens of kilobytes).
pub const MAX_PREFILL_ANSWER_BYTES: usize = 1 << 20;

/// What `serve` reads of a prefill answer: its `kv_transfer_params`, kept as their text.
#[derive(serde::Deserialize)]
struct PrefillAnswer<'a> {
    #[serde(borrow, default)]
    kv_transfer_params: Option<&'a RawValue>,
}

/// The `kv_transfer_params` object of a prefill answer, or why there is none to relay.
fn transfer_params(answer: &[u8]) -> Result<&RawValue, &'static str> {
    let parsed: PrefillAnswer<'_> =
        serde_json::from_slice(answer).map_err(|_| "its answer is not a JSON object")?;
    let params = parsed
        .kv_transfer_params
        .ok_or("its answer has no `kv_transfer_params`")?;
    match params.get().trim_start().as_bytes().first() {
        Some(b'{') => Ok(params),
        _ => Err("its answer's `kv_transfer_params` is not an object"),
    }
}

/// A prefill leg in flight at an endpoint: when it is dropped unfinished (the client went
/// away, or the leg failed), the endpoint's in-flight counts come back down.
struct InFlight<'a> {
    shared: &'a Arc<Shared>,
    upstream: usize,
    seq: u64,
    tokens: u64,
    armed: bool,
}

impl InFlight<'_> {
    /// The leg ended by a path that settled the counts itself.
    fn settled(mut self) {
        self.armed = false;
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.armed {
            let (upstream, seq, tokens) = (self.upstream, self.seq, self.tokens);
            with_state(self.shared, true, move |state| {
                state.release_seq(upstream, seq, tokens);
            });
        }
    }
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
            let in_flight = InFlight {
                shared,
                upstream,
                seq: routed.seq,
                tokens: routed.tokens(),
                armed: true,
            };
            // One deadline for the whole leg: the headers and the whole answer.
            let deadline = tokio::time::Instant::now() + shared.settings.upstream_timeout;
            let sent = shared
                .post(&name, self.path, self.authorization, leg.clone())
                .await;
            let too_late = || {
                refused(
                    StatusCode::GATEWAY_TIMEOUT,
                    &format!(
                        "{name} did not answer the prefill within {} s",
                        shared.settings.upstream_timeout.as_secs_f64()
                    ),
                    Some(&name),
                )
            };
            let response = match sent {
                Ok(Ok(response)) => response,
                Ok(Err(e)) => {
                    // Nothing was answered: another prefill endpoint may take it.
                    drop(in_flight);
                    let mut state = shared.lock().await;
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
                    drop(in_flight);
                    shared.lock().await.upstreams[upstream].errors += 1;
                    return Err(too_late());
                }
            };
            let status = response.status();
            let whole = tokio::time::timeout_at(
                deadline,
                http_body_util::Limited::new(response.into_body(), MAX_PREFILL_ANSWER_BYTES)
                    .collect(),
            )
            .await;
            let now = shared.now_ns();
            let whole = match whole {
                Ok(whole) => whole.map(|c| c.to_bytes()),
                Err(_) => {
                    // The answer trickled past the deadline: the leg is over, its
                    // connection dropped with it.
                    drop(in_flight);
                    let mut state = shared.lock().await;
                    state.upstreams[upstream].errors += 1;
                    state.answered(upstream, false, now);
                    return Err(too_late());
                }
            };
            let mut state = shared.lock().await;
            let answer = match whole {
                Ok(answer) if status.is_success() => answer,
                Ok(answer) => {
                    // The engine's own refusal goes back to the client as it gave it.
                    state.release(upstream, &routed);
                    in_flight.settled();
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
                    in_flight.settled();
                    state.upstreams[upstream].errors += 1;
                    state.answered(upstream, false, now);
                    return Err(refused(
                        StatusCode::BAD_GATEWAY,
                        &format!(
                            "{name}: the prefill answer broke off or passed {MAX_PREFILL_ANSWER_BYTES} bytes: {e}"
                        ),
                        Some(&name),
                    ));
                }
            };
            // The rule for an answer without usable `kv_transfer_params`: the decode leg
            // goes on without them (the decode endpoint computes the prompt itself, the
            // client still gets its answer) and the prefill endpoint's errors count it.
            let params = match transfer_params(&answer) {
                Ok(params) => Some(params),
                Err(_) => {
                    state.upstreams[upstream].errors += 1;
                    None
                }
            };
            let learned = state.learn(&routed, upstream, now);
            state.first_token(&routed, upstream, learned, now);
            state.complete(&routed, upstream, learned, now);
            in_flight.settled();
            state.answered(upstream, true, now);
            drop(state);
            let decode = decode_request(&client, params);
            routed.phase = Phase::Decode;
            return Ok((routed, decode, name));
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
        let answer = br#"{"id": "x", "kv_transfer_params": {"do_remote_prefill": true, "remote_engine_id": "p0"}}"#;
        let params = transfer_params(answer).unwrap();
        let decode: Value = serde_json::from_slice(&decode_request(&client, Some(params))).unwrap();
        assert_eq!(
            decode["kv_transfer_params"],
            serde_json::json!({"do_remote_prefill": true, "remote_engine_id": "p0"})
        );
        assert_eq!(decode["max_tokens"], 50);
        assert_eq!(decode["stream"], true);
        assert_eq!(decode["min_tokens"], 3);
        let plain: Value = serde_json::from_slice(&decode_request(&client, None)).unwrap();
        assert!(plain.get("kv_transfer_params").is_none());
        // A client's own `kv_transfer_params` give way to the prefill answer's, once.
        let mut asked = client.clone();
        asked.insert("kv_transfer_params".into(), serde_json::json!({"mine": 1}));
        let text = decode_request(&asked, Some(params));
        assert_eq!(
            String::from_utf8_lossy(&text)
                .matches("kv_transfer_params")
                .count(),
            1
        );
    }

    #[test]
    fn an_answer_without_usable_transfer_params_says_why() {
        for (answer, why) in [
            (&b"not json"[..], "not a JSON object"),
            (br#"{"id": "x"}"#, "has no `kv_transfer_params`"),
            (
                br#"{"kv_transfer_params": null}"#,
                "has no `kv_transfer_params`",
            ),
            (br#"{"kv_transfer_params": [1, 2]}"#, "is not an object"),
        ] {
            assert!(transfer_params(answer).unwrap_err().contains(why), "{why}");
        }
    }
}
