//! vLLM's disaggregated-serving protocol as an engine of one pool speaks it: which leg a
//! request is (`kv_transfer_params`), and the parameters a prefill hands the decode on.

use super::{Role, Shared};

/// Which leg of a disaggregated request a request is, to an engine of `role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Leg {
    /// Served whole (no `kv_transfer_params`, or an aggregated engine).
    Whole,
    /// A prefill engine's: one token, its KV kept for a decode engine.
    PrefillForRemote,
    /// A decode engine's: the KV comes from the prefill engine named.
    MovedIn,
}

/// The leg `params` ask for of an engine of `role`, or why they are malformed.
pub(super) fn disaggregated_leg(
    role: Role,
    params: Option<&serde_json::Value>,
) -> Result<Leg, String> {
    let Some(params) = params else {
        return Ok(Leg::Whole);
    };
    let Some(params) = params.as_object() else {
        return Err("`kv_transfer_params` must be an object".into());
    };
    let flag = |key: &str| params.get(key).and_then(serde_json::Value::as_bool) == Some(true);
    match role {
        Role::Prefill if flag("do_remote_decode") => Ok(Leg::PrefillForRemote),
        Role::Decode if flag("do_remote_prefill") => {
            for (key, ok) in [
                (
                    "remote_engine_id",
                    params
                        .get("remote_engine_id")
                        .is_some_and(|v| v.is_string()),
                ),
                (
                    "remote_host",
                    params.get("remote_host").is_some_and(|v| v.is_string()),
                ),
                (
                    "remote_port",
                    params.get("remote_port").is_some_and(|v| v.is_u64()),
                ),
            ] {
                if !ok {
                    return Err(format!(
                        "`kv_transfer_params` asks for a remote prefill but has no valid `{key}`"
                    ));
                }
            }
            Ok(Leg::MovedIn)
        }
        _ => Ok(Leg::Whole),
    }
}

/// What a prefill engine answers a decode engine's pull with: where the KV is.
pub(super) fn handoff_params(shared: &Shared, id: u64, blocks: u32) -> serde_json::Value {
    serde_json::json!({
        "do_remote_prefill": true,
        "do_remote_decode": false,
        "remote_block_ids": (0..blocks).collect::<Vec<u32>>(),
        "remote_engine_id": format!("routerlab-engine-{}", shared.address),
        "remote_request_id": format!("cmpl-{id}"),
        "remote_host": shared.address.ip().to_string(),
        "remote_port": shared.address.port(),
        "tp_size": 1,
    })
}

/// `response` with the prefill's `kv_transfer_params`, when it has them.
pub(super) fn with_handoff(
    mut response: serde_json::Value,
    handoff: Option<serde_json::Value>,
) -> serde_json::Value {
    if let (Some(params), Some(object)) = (handoff, response.as_object_mut()) {
        object.insert("kv_transfer_params".into(), params);
    }
    response
}
