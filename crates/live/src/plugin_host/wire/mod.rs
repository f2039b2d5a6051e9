//! The channel between `serve` and its plugin host: length-prefixed frames of a few fixed
//! fields each. Both ends are this build of `routerlab`, so there is no versioning; what the
//! codec must do is refuse anything malformed or oversized without allocating for it,
//! since the host process runs plugin code that may have scribbled on anything.
//!
//! A frame is a little-endian `u32` length, then that many bytes: a tag byte and the
//! fields in order. Integers are little-endian; a byte string or list is a `u32` count and
//! its items; an optional value is a `0`/`1` byte and the value.

use std::io::{self, Read, Write};

use routerlab_core::Unit;
use routerlab_core::abi::RlAdapterState;
use routerlab_host::{EndpointLoad, RequestData};

/// The largest call frame (`serve` → host): a 4 MiB prompt at a 1-byte block size is
/// 4 Mi hashes and ids, 48 MiB with the text.
pub const MAX_CALL_BYTES: u32 = 64 << 20;
/// The largest reply frame (host → `serve`): names of 4,096 endpoints, an error message.
pub const MAX_REPLY_BYTES: u32 = 4 << 20;
/// A plugin's error message longer than this is cut (at a character boundary) before it
/// is sent back.
pub const MAX_MESSAGE_BYTES: usize = 64 << 10;

/// A request, owned, as it crosses the channel; `cached_prefix` crosses as its answers
/// (`cached`), asked of every endpoint before the call.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WireRequest {
    pub id: u64,
    pub arrival_ns: u64,
    pub prompt: Vec<u8>,
    pub block_hashes: Vec<u64>,
    pub block_ids: Option<Vec<u32>>,
    pub block_size: u32,
    pub tokens: bool,
    pub prompt_len: u64,
    pub output_tokens: Option<u64>,
    pub session_id: u64,
    pub parent_id: u64,
    pub ends_session: bool,
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
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WireAdapter {
    pub id: u64,
    pub name: Vec<u8>,
    /// What each endpoint (by stable index) holds, for the endpoints `serve` knows it
    /// of; `None` when it knows it of none.
    pub states: Option<Vec<(u32, RlAdapterState)>>,
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
        states.iter().find(|(i, _)| *i == index).map(|(_, s)| *s)
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
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    /// Set these endpoints' loads, then detect and match (the matcher does not learn).
    Decide {
        request: WireRequest,
        loads: Vec<(u32, EndpointLoad)>,
    },
    /// The matcher's `update`.
    Learn { request: WireRequest, index: u32 },
    /// The matcher's `on_first_token`.
    FirstToken { request: WireRequest, index: u32 },
    /// The matcher's `on_complete`.
    Complete { request: WireRequest, index: u32 },
    /// An endpoint joins the fleet.
    Add { name: String },
    /// An endpoint leaves it.
    Remove { index: u32 },
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
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Sent once, when the host is ready: the matcher's name and the fleet's endpoints
    /// with their stable indices.
    Hello {
        matcher: String,
        endpoints: Vec<(String, u32)>,
    },
    /// The call succeeded.
    Done,
    /// A decision: the endpoint picked, whether anything was flagged, what was.
    Decided {
        endpoint: Option<u32>,
        constrained: bool,
        flagged: Vec<u32>,
    },
    /// The stable index an added endpoint got.
    Added { index: u32 },
    /// The plugin failed the call (its error or caught panic, as the handle words it).
    Failed { message: String },
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The stream failed, timed out or ended.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The frame is not one this codec writes.
    #[error("malformed frame: {0}")]
    Malformed(&'static str),
    /// The frame claims more bytes than the channel allows.
    #[error("a frame of {0} bytes is over the limit of {1}")]
    TooLong(u32, u32),
}

/// Writes `payload` as one frame.
fn write_frame(to: &mut impl Write, payload: &[u8]) -> io::Result<()> {
    let len = u32::try_from(payload.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame over 4 GiB"))?;
    let mut frame = Vec::with_capacity(4 + payload.len());
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(payload);
    to.write_all(&frame)
}

/// Reads one frame of at most `max` bytes into `buf`.
fn read_frame(from: &mut impl Read, max: u32, buf: &mut Vec<u8>) -> Result<(), WireError> {
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
    Ok(())
}

/// Writes a call.
pub fn write_call(to: &mut impl Write, call: &Call) -> io::Result<()> {
    let mut out = Out::default();
    match call {
        Call::Decide { request, loads } => {
            out.u8(1);
            out.request(request);
            out.len(loads.len());
            for (index, load) in loads {
                out.u32(*index);
                for value in [
                    load.running,
                    load.waiting,
                    load.kv_blocks_used,
                    load.kv_blocks_total,
                    load.inflight_prompt_tokens,
                    load.inflight_requests,
                    load.kv_block_tokens,
                ] {
                    out.u64(value);
                }
                let lora = load.lora;
                for value in [lora.used, lora.total, lora.active, lora.waiting] {
                    out.u32(value);
                }
            }
        }
        Call::Learn { request, index } => {
            out.u8(2);
            out.request(request);
            out.u32(*index);
        }
        Call::FirstToken { request, index } => {
            out.u8(3);
            out.request(request);
            out.u32(*index);
        }
        Call::Complete { request, index } => {
            out.u8(4);
            out.request(request);
            out.u32(*index);
        }
        Call::Add { name } => {
            out.u8(5);
            out.bytes(name.as_bytes());
        }
        Call::Remove { index } => {
            out.u8(6);
            out.u32(*index);
        }
    }
    write_frame(to, &out.0)
}

/// Reads a call (`buf`: scratch space, reused between calls).
pub fn read_call(from: &mut impl Read, buf: &mut Vec<u8>) -> Result<Call, WireError> {
    read_frame(from, MAX_CALL_BYTES, buf)?;
    let mut input = In(buf);
    let call = match input.u8()? {
        1 => {
            let request = input.request()?;
            let n = input.len(4 + 7 * 8 + 4 * 4)?;
            let mut loads = Vec::with_capacity(n);
            for _ in 0..n {
                let index = input.u32()?;
                let load = EndpointLoad {
                    running: input.u64()?,
                    waiting: input.u64()?,
                    kv_blocks_used: input.u64()?,
                    kv_blocks_total: input.u64()?,
                    inflight_prompt_tokens: input.u64()?,
                    inflight_requests: input.u64()?,
                    kv_block_tokens: input.u64()?,
                    lora: routerlab_core::LoraSlots {
                        used: input.u32()?,
                        total: input.u32()?,
                        active: input.u32()?,
                        waiting: input.u32()?,
                    },
                };
                loads.push((index, load));
            }
            Call::Decide { request, loads }
        }
        tag @ 2..=4 => {
            let request = input.request()?;
            let index = input.u32()?;
            match tag {
                2 => Call::Learn { request, index },
                3 => Call::FirstToken { request, index },
                _ => Call::Complete { request, index },
            }
        }
        5 => Call::Add {
            name: input.string()?,
        },
        6 => Call::Remove {
            index: input.u32()?,
        },
        _ => return Err(WireError::Malformed("unknown call")),
    };
    input.end()?;
    Ok(call)
}

/// Writes a reply.
pub fn write_reply(to: &mut impl Write, reply: &Reply) -> io::Result<()> {
    let mut out = Out::default();
    match reply {
        Reply::Hello { matcher, endpoints } => {
            out.u8(1);
            out.bytes(matcher.as_bytes());
            out.len(endpoints.len());
            for (name, index) in endpoints {
                out.bytes(name.as_bytes());
                out.u32(*index);
            }
        }
        Reply::Done => out.u8(2),
        Reply::Decided {
            endpoint,
            constrained,
            flagged,
        } => {
            out.u8(3);
            match endpoint {
                Some(index) => {
                    out.u8(1);
                    out.u32(*index);
                }
                None => out.u8(0),
            }
            out.u8(u8::from(*constrained));
            out.len(flagged.len());
            for index in flagged {
                out.u32(*index);
            }
        }
        Reply::Added { index } => {
            out.u8(4);
            out.u32(*index);
        }
        Reply::Failed { message } => {
            out.u8(5);
            let mut end = message.len().min(MAX_MESSAGE_BYTES);
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            out.bytes(&message.as_bytes()[..end]);
        }
    }
    write_frame(to, &out.0)
}

/// Reads a reply (`buf`: scratch space, reused between calls).
pub fn read_reply(from: &mut impl Read, buf: &mut Vec<u8>) -> Result<Reply, WireError> {
    read_frame(from, MAX_REPLY_BYTES, buf)?;
    let mut input = In(buf);
    let reply = match input.u8()? {
        1 => {
            let matcher = input.string()?;
            let n = input.len(8)?;
            let mut endpoints = Vec::with_capacity(n);
            for _ in 0..n {
                endpoints.push((input.string()?, input.u32()?));
            }
            Reply::Hello { matcher, endpoints }
        }
        2 => Reply::Done,
        3 => {
            let endpoint = match input.u8()? {
                0 => None,
                1 => Some(input.u32()?),
                _ => return Err(WireError::Malformed("bad option")),
            };
            let constrained = input.flag()?;
            let n = input.len(4)?;
            let mut flagged = Vec::with_capacity(n);
            for _ in 0..n {
                flagged.push(input.u32()?);
            }
            Reply::Decided {
                endpoint,
                constrained,
                flagged,
            }
        }
        4 => Reply::Added {
            index: input.u32()?,
        },
        5 => Reply::Failed {
            message: input.string()?,
        },
        _ => return Err(WireError::Malformed("unknown reply")),
    };
    input.end()?;
    Ok(reply)
}

/// A frame being written.
#[derive(Default)]
struct Out(Vec<u8>);

impl Out {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// A count; every list here is far below 4 Gi items (the frame limits say so).
    fn len(&mut self, n: usize) {
        self.u32(u32::try_from(n).unwrap_or(u32::MAX));
    }
    fn bytes(&mut self, b: &[u8]) {
        self.len(b.len());
        self.0.extend_from_slice(b);
    }
    fn option(&mut self, v: Option<u64>) {
        match v {
            Some(v) => {
                self.u8(1);
                self.u64(v);
            }
            None => self.u8(0),
        }
    }
    fn request(&mut self, r: &WireRequest) {
        self.u64(r.id);
        self.u64(r.arrival_ns);
        self.bytes(&r.prompt);
        self.len(r.block_hashes.len());
        for h in &r.block_hashes {
            self.u64(*h);
        }
        match &r.block_ids {
            Some(ids) => {
                self.u8(1);
                self.len(ids.len());
                for id in ids {
                    self.u32(*id);
                }
            }
            None => self.u8(0),
        }
        self.u32(r.block_size);
        self.u8(u8::from(r.tokens));
        self.u64(r.prompt_len);
        self.option(r.output_tokens);
        self.u64(r.session_id);
        self.u64(r.parent_id);
        self.u8(u8::from(r.ends_session));
        self.u64(r.now_ns);
        self.u32(r.phase);
        match &r.cached {
            Some(cached) => {
                self.u8(1);
                self.len(cached.len());
                for (index, units) in cached {
                    self.u32(*index);
                    self.u64(*units);
                }
            }
            None => self.u8(0),
        }
        match &r.adapter {
            Some(adapter) => {
                self.u8(1);
                self.u64(adapter.id);
                self.bytes(&adapter.name);
                match &adapter.states {
                    Some(states) => {
                        self.u8(1);
                        self.len(states.len());
                        for (index, s) in states {
                            self.u32(*index);
                            for value in [
                                s.resident,
                                s.running,
                                s.waiting,
                                s.active,
                                s.slots_used,
                                s.slots_total,
                                s.waiting_adapters,
                            ] {
                                self.u32(value);
                            }
                        }
                    }
                    None => self.u8(0),
                }
            }
            None => self.u8(0),
        }
    }
}

/// A frame being read; every read checks the bytes are there.
struct In<'a>(&'a [u8]);

impl In<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], WireError> {
        if self.0.len() < n {
            return Err(WireError::Malformed("frame ends early"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn flag(&mut self) -> Result<bool, WireError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(WireError::Malformed("bad flag")),
        }
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    /// A count of items of at least `item_bytes` each: no more than the frame can hold, so
    /// a forged count allocates nothing.
    fn len(&mut self, item_bytes: usize) -> Result<usize, WireError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(item_bytes) > self.0.len() {
            return Err(WireError::Malformed("a count larger than the frame"));
        }
        Ok(n)
    }
    fn bytes(&mut self) -> Result<Vec<u8>, WireError> {
        let n = self.len(1)?;
        Ok(self.take(n)?.to_vec())
    }
    fn string(&mut self) -> Result<String, WireError> {
        String::from_utf8(self.bytes()?).map_err(|_| WireError::Malformed("text is not UTF-8"))
    }
    fn option(&mut self) -> Result<Option<u64>, WireError> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.u64()?)),
            _ => Err(WireError::Malformed("bad option")),
        }
    }
    fn request(&mut self) -> Result<WireRequest, WireError> {
        let id = self.u64()?;
        let arrival_ns = self.u64()?;
        let prompt = self.bytes()?;
        let n = self.len(8)?;
        let block_hashes = (0..n).map(|_| self.u64()).collect::<Result<_, _>>()?;
        let block_ids = match self.u8()? {
            0 => None,
            1 => {
                let n = self.len(4)?;
                Some((0..n).map(|_| self.u32()).collect::<Result<_, _>>()?)
            }
            _ => return Err(WireError::Malformed("bad option")),
        };
        Ok(WireRequest {
            id,
            arrival_ns,
            prompt,
            block_hashes,
            block_ids,
            block_size: self.u32()?,
            tokens: self.flag()?,
            prompt_len: self.u64()?,
            output_tokens: self.option()?,
            session_id: self.u64()?,
            parent_id: self.u64()?,
            ends_session: self.flag()?,
            now_ns: self.u64()?,
            phase: self.u32()?,
            cached: match self.u8()? {
                0 => None,
                1 => {
                    let n = self.len(12)?;
                    Some(
                        (0..n)
                            .map(|_| Ok((self.u32()?, self.u64()?)))
                            .collect::<Result<_, WireError>>()?,
                    )
                }
                _ => return Err(WireError::Malformed("bad option")),
            },
            adapter: match self.u8()? {
                0 => None,
                1 => Some(self.adapter()?),
                _ => return Err(WireError::Malformed("bad option")),
            },
        })
    }
    fn adapter(&mut self) -> Result<WireAdapter, WireError> {
        let id = self.u64()?;
        let name = self.bytes()?;
        let states = match self.u8()? {
            0 => None,
            1 => {
                let n = self.len(4 * 8)?;
                let mut states = Vec::with_capacity(n);
                for _ in 0..n {
                    let index = self.u32()?;
                    let state = RlAdapterState {
                        resident: self.u32()?,
                        running: self.u32()?,
                        waiting: self.u32()?,
                        active: self.u32()?,
                        slots_used: self.u32()?,
                        slots_total: self.u32()?,
                        waiting_adapters: self.u32()?,
                        _reserved: 0,
                    };
                    states.push((index, state));
                }
                Some(states)
            }
            _ => return Err(WireError::Malformed("bad option")),
        };
        Ok(WireAdapter { id, name, states })
    }
    fn end(&self) -> Result<(), WireError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(WireError::Malformed("bytes after the last field"))
        }
    }
}

#[cfg(test)]
mod tests;
