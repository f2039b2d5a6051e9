//! The channel between `serve` and its plugin host: length-prefixed frames, each one
//! [`Call`] or [`Reply`] in postcard's compact serde format. Both ends are this build of
//! `routerlab`, so there is no versioning; what the channel must do is refuse anything
//! malformed or oversized without allocating for it, since the host process runs plugin
//! code that may have scribbled on anything: a frame's length is checked against its
//! direction's limit before a byte of it is read, serde preallocates for no list more
//! than its frame could hold, and a frame must decode whole, with nothing left over.
//!
//! A frame is a little-endian `u32` length, then that many bytes of postcard.

use std::io::{self, Read, Write};

use routerlab_core::Unit;
use routerlab_core::abi::RlAdapterState;
use routerlab_host::{EndpointLoad, RequestData};
use serde::{Deserialize, Serialize};

/// The largest call frame (`serve` → host): a 4 MiB prompt at a 1-byte block size is
/// 4 Mi hashes and ids, 48 MiB with the text.
pub const MAX_CALL_BYTES: u32 = 64 << 20;
/// The largest reply frame (host → `serve`): names of 4,096 endpoints, an error message.
pub const MAX_REPLY_BYTES: u32 = 4 << 20;
/// A plugin's error message longer than this is cut (at a character boundary) before it
/// is sent back.
pub const MAX_MESSAGE_BYTES: usize = 64 << 10;

/// An endpoint's load as it crosses the channel.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Load(#[serde(with = "LoadDef")] pub EndpointLoad);

/// What an endpoint holds of a request's adapter, as it crosses the channel.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct AdapterState(#[serde(with = "AdapterStateDef")] pub RlAdapterState);

/// [`EndpointLoad`]'s fields, for serde (the host crate has no serde).
#[derive(Serialize, Deserialize)]
#[serde(remote = "EndpointLoad")]
struct LoadDef {
    running: u64,
    waiting: u64,
    kv_blocks_used: u64,
    kv_blocks_total: u64,
    inflight_prompt_tokens: u64,
    inflight_requests: u64,
    kv_block_tokens: u64,
    #[serde(with = "LoraSlotsDef")]
    lora: routerlab_core::LoraSlots,
}

/// [`routerlab_core::LoraSlots`]' fields, for serde.
#[derive(Serialize, Deserialize)]
#[serde(remote = "routerlab_core::LoraSlots")]
struct LoraSlotsDef {
    used: u32,
    total: u32,
    active: u32,
    waiting: u32,
}

/// [`RlAdapterState`]'s fields, for serde.
#[derive(Serialize, Deserialize)]
#[serde(remote = "RlAdapterState")]
struct AdapterStateDef {
    resident: u32,
    running: u32,
    waiting: u32,
    active: u32,
    slots_used: u32,
    slots_total: u32,
    waiting_adapters: u32,
    _reserved: u32,
}

/// A request, owned, as it crosses the channel; `cached_prefix` crosses as its answers
/// (`cached`), asked of every endpoint before the call.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct WireRequest {
    /// The request's id.
    pub id: u64,
    /// When it arrived, ns since the router started.
    pub arrival_ns: u64,
    /// Its prompt's bytes.
    pub prompt: Vec<u8>,
    /// Its prefix-block hash chain.
    pub block_hashes: Vec<u64>,
    /// The chain's dense ids, when the router numbered them.
    pub block_ids: Option<Vec<u32>>,
    /// The chain's block size, in the request's unit.
    pub block_size: u32,
    /// Whether its unit is tokens (else bytes).
    pub tokens: bool,
    /// Its prompt's length in its unit.
    pub prompt_len: u64,
    /// The output tokens asked for, if said.
    pub output_tokens: Option<u64>,
    /// Its session, 0 = none.
    pub session_id: u64,
    /// The request it continues, 0 = none.
    pub parent_id: u64,
    /// It is its session's last.
    pub ends_session: bool,
    /// The router's clock at the call, ns.
    pub now_ns: u64,
    /// `RL_PHASE_*`.
    pub phase: u32,
    /// What each endpoint (by stable index) holds of its prefix, in its unit, for the
    /// endpoints `serve` knows it of; `None` when it knows it of none.
    pub cached: Option<Vec<(u32, u64)>>,
    /// The LoRA adapter it asks for; `None`: the base model.
    pub adapter: Option<WireAdapter>,
}

/// A request's LoRA adapter as it crosses the channel; `adapter_state` crosses as its
/// answers, asked of every endpoint before the call.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct WireAdapter {
    /// Its number.
    pub id: u64,
    /// Its name's bytes.
    pub name: Vec<u8>,
    /// What each endpoint (by stable index) holds, for the endpoints `serve` knows it
    /// of; `None` when it knows it of none.
    pub states: Option<Vec<(u32, AdapterState)>>,
}

impl WireRequest {
    /// What endpoint `index` holds of this request's prefix, as `serve` said.
    pub fn cached_prefix(&self, index: u32) -> Option<u64> {
        let cached = self.cached.as_ref()?;
        cached
            .iter()
            .find(|(i, _)| *i == index)
            .map(|(_, units)| *units)
    }

    /// What endpoint `index` holds of this request's adapter, as `serve` said.
    pub fn adapter_state(&self, index: u32) -> Option<RlAdapterState> {
        let states = self.adapter.as_ref()?.states.as_ref()?;
        states.iter().find(|(i, _)| *i == index).map(|(_, s)| s.0)
    }

    /// Calls `f` with the request as the plugins take it, its `cached_prefix` and
    /// `adapter_state` answered from what `serve` asked before the call (when it knew),
    /// and `predict` from `forecasts` when given.
    pub fn lend<R>(
        &self,
        forecasts: Option<&[(u32, routerlab_core::abi::RlPrediction)]>,
        f: impl FnOnce(&RequestData<'_>) -> R,
    ) -> R {
        let cached = |i| self.cached_prefix(i);
        let adapter = |i| self.adapter_state(i);
        let predict = |i: u32| forecasts?.iter().find(|(j, _)| *j == i).map(|(_, p)| *p);
        let mut data = self.data();
        if self.cached.is_some() {
            data.cached_prefix = Some(&cached);
        }
        if forecasts.is_some() {
            data.predict = Some(&predict);
        }
        if let Some(lora) = &mut data.lora
            && self.adapter.as_ref().is_some_and(|a| a.states.is_some())
        {
            lora.state = Some(&adapter);
        }
        f(&data)
    }

    /// The request as the plugin handles take it (without `cached_prefix` and
    /// `adapter_state`: the caller lends [`WireRequest::cached_prefix`] and
    /// [`WireRequest::adapter_state`] when they are there).
    pub fn data(&self) -> RequestData<'_> {
        RequestData {
            id: self.id,
            arrival_ns: self.arrival_ns,
            prompt: &self.prompt,
            block_hashes: &self.block_hashes,
            block_ids: self.block_ids.as_deref(),
            block_size: self.block_size,
            unit: if self.tokens {
                Unit::Tokens
            } else {
                Unit::Bytes
            },
            prompt_len: self.prompt_len,
            output_tokens: self.output_tokens,
            session_id: self.session_id,
            parent_id: self.parent_id,
            ends_session: self.ends_session,
            now_ns: self.now_ns,
            cached_prefix: None,
            phase: routerlab_core::Phase::from_raw(self.phase),
            cached_tiers: None,
            predict: None,
            lora: self.adapter.as_ref().map(|a| routerlab_host::Lora {
                id: a.id,
                name: &a.name,
                state: None,
            }),
        }
    }
}

/// What `serve` asks of the host. Endpoints are named by their stable index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Call {
    /// Set these endpoints' loads, then detect and match (the matcher does not learn).
    Decide {
        /// The request.
        request: WireRequest,
        /// Endpoints' loads by stable index.
        loads: Vec<(u32, Load)>,
    },
    /// The matcher's `update`.
    Learn {
        /// The request.
        request: WireRequest,
        /// The endpoint it went to.
        index: u32,
    },
    /// The matcher's `on_first_token`.
    FirstToken {
        /// The request.
        request: WireRequest,
        /// The endpoint it went to.
        index: u32,
    },
    /// The matcher's `on_complete`.
    Complete {
        /// The request.
        request: WireRequest,
        /// The endpoint it went to.
        index: u32,
    },
    /// An endpoint joins the fleet.
    Add {
        /// Its name.
        name: String,
    },
    /// An endpoint leaves it.
    Remove {
        /// Its stable index.
        index: u32,
    },
}

impl Call {
    /// The call's name in logs.
    pub fn name(&self) -> &'static str {
        match self {
            Call::Decide { .. } => "decide",
            Call::Learn { .. } => "update",
            Call::FirstToken { .. } => "on_first_token",
            Call::Complete { .. } => "on_complete",
            Call::Add { .. } => "add_endpoints",
            Call::Remove { .. } => "remove_endpoints",
        }
    }
}

/// What the host answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    /// Sent once, when the host is ready: the matcher's name and the fleet's endpoints
    /// with their stable indices.
    Hello {
        /// The matcher's name.
        matcher: String,
        /// The endpoints with their stable indices.
        endpoints: Vec<(String, u32)>,
    },
    /// The call succeeded.
    Done,
    /// A decision: the endpoint picked, whether anything was flagged, what was.
    Decided {
        /// The endpoint picked, by stable index; `None`: none.
        endpoint: Option<u32>,
        /// Whether the detector flagged any endpoint.
        constrained: bool,
        /// The endpoints it flagged.
        flagged: Vec<u32>,
    },
    /// The stable index an added endpoint got.
    Added {
        /// The index.
        index: u32,
    },
    /// The plugin failed the call (its error or caught panic, as the handle words it).
    Failed {
        /// The plugin's words.
        message: String,
    },
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The stream failed, timed out or ended.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The frame is not one this codec writes.
    #[error("malformed frame: {0}")]
    Malformed(String),
    /// The frame claims more bytes than the channel allows.
    #[error("a frame of {0} bytes is over the limit of {1}")]
    TooLong(u32, u32),
}

/// Writes `value` as one frame.
fn write_frame(to: &mut impl Write, value: &impl Serialize) -> io::Result<()> {
    // The length first, then the payload, in one write.
    let mut frame = postcard::to_extend(value, vec![0u8; 4])
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let len = u32::try_from(frame.len() - 4)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame over 4 GiB"))?;
    frame[..4].copy_from_slice(&len.to_le_bytes());
    to.write_all(&frame)
}

/// Reads one frame of at most `max` bytes into `buf`, and decodes it whole.
fn read_frame<T: serde::de::DeserializeOwned>(
    from: &mut impl Read,
    max: u32,
    buf: &mut Vec<u8>,
) -> Result<T, WireError> {
    let mut len = [0u8; 4];
    from.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len);
    if len > max {
        return Err(WireError::TooLong(len, max));
    }
    buf.clear();
    from.take(u64::from(len)).read_to_end(buf)?;
    if buf.len() != len as usize {
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
    }
    match postcard::take_from_bytes(buf) {
        Ok((value, [])) => Ok(value),
        Ok((_, rest)) => Err(WireError::Malformed(format!(
            "{} bytes after the message",
            rest.len()
        ))),
        Err(e) => Err(WireError::Malformed(e.to_string())),
    }
}

/// Writes a call.
pub fn write_call(to: &mut impl Write, call: &Call) -> io::Result<()> {
    write_frame(to, call)
}

/// Reads a call (`buf`: scratch space, reused between calls).
pub fn read_call(from: &mut impl Read, buf: &mut Vec<u8>) -> Result<Call, WireError> {
    read_frame(from, MAX_CALL_BYTES, buf)
}

/// Writes a reply; a failure's message is cut to [`MAX_MESSAGE_BYTES`].
pub fn write_reply(to: &mut impl Write, reply: &Reply) -> io::Result<()> {
    if let Reply::Failed { message } = reply
        && message.len() > MAX_MESSAGE_BYTES
    {
        let mut end = MAX_MESSAGE_BYTES;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        let message = message[..end].to_owned();
        return write_frame(to, &Reply::Failed { message });
    }
    write_frame(to, reply)
}

/// Reads a reply (`buf`: scratch space, reused between calls).
pub fn read_reply(from: &mut impl Read, buf: &mut Vec<u8>) -> Result<Reply, WireError> {
    read_frame(from, MAX_REPLY_BYTES, buf)
}

#[cfg(test)]
mod tests;
