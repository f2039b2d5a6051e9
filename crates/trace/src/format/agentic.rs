//! NVIDIA Dynamo's `agentic_mooncake` v2 JSONL: a header line, then one request per line
//! with its play (one agent job), its session, and typed dependencies on other requests.
//!
//! The rules are those of Dynamo 1.6.1's reader (`AgenticTraceBuilder` in
//! `aisimulate-core`, the row types in `dynamo-data-gen`): the header names the schema
//! `dynamo.agentic_mooncake`, version 2, the trace's `block_size` (it sets the trace block
//! size), `hash_id_scope: "local"` and a `source` with a non-empty `format` and `digest`.
//! A row has non-empty `request_id` (unique), `play_id`, `session_id` and `model`,
//! `input_length` above 0 with exactly `ceil(input_length / block_size)` `hash_ids`,
//! `output_length`, `not_before_ms` (finite, at least 0), and `dependencies`, each
//! `{request_id, trigger: dispatch|completion, delay_ms, relation:
//! sequence|spawn|join|replay_barrier}`: `spawn` with either trigger, the others on
//! completion only, `delay_ms` finite and at least 0, on a request of the same play, never
//! itself. The graph checks (an edge to a request that does not exist, another play's, a
//! cycle, a play without a root) are made once the whole trace is read
//! ([`crate::Workload::load`]).

use serde::Deserialize;

use crate::dependency::{RawDependency, Relation, Trigger};
use crate::error::{Fault, TraceError};
use crate::ids::IdKey;
use crate::linker::Linker;
use crate::request::TraceRequest;

/// The schema the header must name.
pub const SCHEMA: &str = "dynamo.agentic_mooncake";
/// The version read.
pub const VERSION: u32 = 2;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    schema: String,
    version: u32,
    block_size: u64,
    hash_id_scope: String,
    source: Source,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Source {
    format: String,
    digest: String,
}

#[derive(Deserialize)]
struct Row {
    request_id: String,
    play_id: String,
    session_id: String,
    model: String,
    #[serde(alias = "input_tokens")]
    input_length: Option<u64>,
    #[serde(alias = "output_tokens")]
    output_length: Option<u64>,
    hash_ids: Option<Vec<u64>>,
    not_before_ms: f64,
    #[serde(default)]
    dependencies: Vec<Dependency>,
    // Read and not used by the replay.
    #[serde(default)]
    output_token_ids: Option<Vec<u32>>,
    #[serde(default)]
    priority: Option<i32>,
    #[serde(default)]
    strict_priority: Option<u32>,
    #[serde(default)]
    policy_class: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Dependency {
    request_id: String,
    trigger: Trigger,
    delay_ms: f64,
    relation: Relation,
}

/// Milliseconds as nanoseconds, when finite, at least 0 and within 64 bits.
/// Milliseconds as nanoseconds, or why they are none a trace may state: not a number,
/// negative, or past the simulator's clock range.
fn ms_to_ns(ms: f64) -> Result<u64, String> {
    if ms.is_nan() || ms < 0.0 {
        return Err(format!(
            "must be milliseconds ≥ 0, not {}",
            crate::error::short_number(ms)
        ));
    }
    if ms * 1e6 > crate::arrivals::MAX_CLOCK_NS as f64 {
        return Err(format!(
            "{} ms is past {}",
            crate::error::short_number(ms),
            crate::arrivals::CLOCK_RANGE
        ));
    }
    Ok((ms * 1e6).round() as u64)
}

impl Linker {
    /// The number of play `id` (1-based, in order of first appearance).
    fn play(&mut self, id: &str) -> u64 {
        *self
            .plays
            .get_or_insert_with(IdKey::Text(id), |len| len as u64 + 1)
    }

    /// Checks the header line; returns the trace's block size.
    pub(crate) fn parse_agentic_header(
        &self,
        line_no: usize,
        text: &str,
    ) -> Result<u32, TraceError> {
        let bad = |field: &str, message: String| {
            self.error_at(line_no, Some(field), Fault::InvalidField, message)
        };
        let header: Header = serde_json::from_str(text).map_err(|e| {
            self.error_at(
                line_no,
                None,
                Fault::InvalidJson,
                format!("not an agentic_mooncake v2 header: {e}"),
            )
        })?;
        if header.schema != SCHEMA {
            return Err(bad(
                "schema",
                format!("`{}` is not `{SCHEMA}`", header.schema),
            ));
        }
        if header.version != VERSION {
            return Err(bad(
                "version",
                format!(
                    "version {} is not one this reads (it reads {VERSION})",
                    header.version
                ),
            ));
        }
        if header.hash_id_scope != "local" {
            return Err(bad(
                "hash_id_scope",
                format!("`{}` is not `local`", header.hash_id_scope),
            ));
        }
        if header.source.format.trim().is_empty() || header.source.digest.trim().is_empty() {
            return Err(bad("source", "needs a non-empty format and digest".into()));
        }
        match u32::try_from(header.block_size) {
            Ok(size) if (1..=1 << 20).contains(&size) => Ok(size),
            _ => Err(bad(
                "block_size",
                format!("must be from 1 to 1048576, not {}", header.block_size),
            )),
        }
    }

    pub(crate) fn parse_agentic(
        &mut self,
        line_no: usize,
        text: &str,
        out: &mut TraceRequest,
    ) -> Result<(), TraceError> {
        let row: Row = serde_json::from_str(text).map_err(|e| {
            let fault = if e.to_string().starts_with("missing field") {
                Fault::MissingField
            } else {
                Fault::InvalidJson
            };
            self.error_at(
                line_no,
                None,
                fault,
                format!("not an agentic_mooncake v2 request: {e}"),
            )
        })?;
        let _ = (
            &row.output_token_ids,
            row.priority,
            row.strict_priority,
            &row.policy_class,
        );
        let field = |name: &str, fault: Fault, message: String| {
            self.error_at(line_no, Some(name), fault, message)
        };
        for (name, value) in [
            ("request_id", &row.request_id),
            ("play_id", &row.play_id),
            ("session_id", &row.session_id),
            ("model", &row.model),
        ] {
            if value.trim().is_empty() {
                return Err(field(name, Fault::InvalidField, "must not be empty".into()));
            }
        }
        let input = row
            .input_length
            .ok_or_else(|| field("input_length", Fault::MissingField, "missing".into()))?;
        if input == 0 {
            return Err(field(
                "input_length",
                Fault::InvalidField,
                "must be above 0".into(),
            ));
        }
        let output = row
            .output_length
            .ok_or_else(|| field("output_length", Fault::MissingField, "missing".into()))?;
        let ids = row
            .hash_ids
            .ok_or_else(|| field("hash_ids", Fault::MissingField, "missing".into()))?;
        let block = u64::from(self.options.trace_block_size);
        let needed = input.div_ceil(block);
        if ids.len() as u64 != needed {
            return Err(field(
                "hash_ids",
                Fault::HashIdsTooShort,
                format!(
                    "{} ids, but input_length {input} at block_size {block} needs exactly {needed}",
                    ids.len()
                ),
            ));
        }
        let not_before = ms_to_ns(row.not_before_ms)
            .map_err(|why| field("not_before_ms", Fault::InvalidField, why))?;
        out.dependencies.clear();
        for dependency in &row.dependencies {
            if dependency.request_id.trim().is_empty() {
                return Err(field(
                    "dependencies",
                    Fault::InvalidField,
                    "a dependency has an empty request_id".into(),
                ));
            }
            if dependency.request_id == row.request_id {
                return Err(field(
                    "dependencies",
                    Fault::InvalidField,
                    format!("request `{}` depends on itself", row.request_id),
                ));
            }
            let delay_ns = ms_to_ns(dependency.delay_ms).map_err(|why| {
                field(
                    "dependencies",
                    Fault::InvalidField,
                    format!("delay_ms {why}"),
                )
            })?;
            if dependency.trigger == Trigger::Dispatch && dependency.relation != Relation::Spawn {
                return Err(field(
                    "dependencies",
                    Fault::InvalidField,
                    format!(
                        "a {:?} dependency (on `{}`) fires on completion, not dispatch (only spawn may)",
                        dependency.relation, dependency.request_id
                    ),
                ));
            }
            out.dependencies.push(RawDependency {
                request_id: dependency.request_id.clone(),
                trigger: dependency.trigger,
                delay_ns,
                relation: dependency.relation,
            });
        }
        if self.ids.contains(IdKey::Text(&row.request_id)) {
            return Err(field(
                "request_id",
                Fault::DuplicateId,
                format!("request_id `{}` appears twice", row.request_id),
            ));
        }
        let seq = self.take_seq(line_no)?;
        self.ids.insert_new(IdKey::Text(&row.request_id), seq);
        // Sessions are numbered; the parent link comes from the dependencies instead.
        let mut no_parent = Some(0);
        out.session = self.session(Some(IdKey::Text(&row.session_id)), seq, &mut no_parent);
        out.play = self.play(&row.play_id);
        out.request_id = row.request_id;
        out.seq = seq;
        out.line = line_no;
        out.parent_seq = None;
        out.prompt.clear();
        out.prompt_len = input;
        out.blocks.clear();
        out.blocks.extend(ids);
        out.arrival_ns = Some(not_before);
        out.output_tokens = Some(output);
        Ok(())
    }
}
