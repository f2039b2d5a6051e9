//! The Weka / AgentX Claude-Code corpus (SemiAnalysis): one JSON object per session, in a
//! `.json` file, a `.jsonl` file of several, or a directory of them, read as NVIDIA Dynamo
//! 1.6.1's replay reads it and lowered into an `agentic_mooncake` v2 graph
//! ([`crate::format::agentic`]), which the reader then parses.
//!
//! A session is `{id, block_size, hash_id_scope: "local", requests, models?, ...}`; each
//! entry of `requests` is a request `{type: "n"|"s", t, model, in, out, hash_ids?,
//! api_time?}` (`t` and `api_time` in seconds) or a sub-agent `{type: "subagent", t,
//! agent_id, subagent_type, status: "completed"|"async_launched", duration_ms?,
//! requests}` whose requests are its own session. A completed sub-agent blocks its parent:
//! the first later parent request that began after it ended joins it; an async one does
//! not. Nested timestamps are absolute unless one precedes its sub-agent's marker anywhere
//! in the corpus, in which case all are relative to their markers (Dynamo's `auto`).
//!
//! Every session is one play starting at 0 (`not_before_ms` counts from its first request);
//! its hash ids are its own (`local`): the same id in two sessions is two blocks. A block
//! past the session's ids, and a prompt's partial last block, are private to the request.
//! The streams and edges are those of [`graph`]. All sessions of a corpus must
//! have one block size. Directories are walked in name order, symlinks refused.

mod graph;
mod seams;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::dependency::{Relation, Trigger};
use crate::error::{Fault, TraceError};
use graph::{Edge, Placed, Recorded, Stream, add, ms};

#[derive(Deserialize)]
struct Session {
    id: String,
    #[serde(default)]
    models: Vec<String>,
    block_size: u64,
    hash_id_scope: String,
    requests: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(tag = "type")]
enum Entry {
    #[serde(rename = "n", alias = "s")]
    Request(Request),
    #[serde(rename = "subagent")]
    Subagent(Subagent),
}

#[derive(Deserialize)]
#[serde(tag = "type")]
enum Inner {
    #[serde(rename = "n", alias = "s")]
    Request(Request),
}

#[derive(Deserialize, Clone)]
struct Request {
    t: f64,
    model: String,
    #[serde(rename = "in")]
    input: u64,
    #[serde(rename = "out")]
    output: u64,
    #[serde(default)]
    hash_ids: Vec<u64>,
    #[serde(default)]
    api_time: Option<f64>,
}

#[derive(Deserialize)]
struct Subagent {
    t: f64,
    agent_id: String,
    // Required by the format, not used by the replay.
    #[allow(dead_code)]
    subagent_type: String,
    #[serde(default)]
    duration_ms: Option<i64>,
    status: String,
    requests: Vec<Inner>,
}

impl Inner {
    fn request(&self) -> &Request {
        match self {
            Inner::Request(r) => r,
        }
    }
}

/// A lowered row, written as an `agentic_mooncake` v2 line.
#[derive(Serialize)]
struct Row<'a> {
    request_id: String,
    play_id: &'a str,
    session_id: &'a str,
    model: &'a str,
    input_length: u64,
    output_length: u64,
    hash_ids: Vec<u64>,
    not_before_ms: f64,
    dependencies: Vec<RowDependency>,
}

#[derive(Serialize)]
struct RowDependency {
    request_id: String,
    trigger: Trigger,
    delay_ms: f64,
    relation: Relation,
}

/// One session of the corpus, where it was read.
struct Located {
    file: PathBuf,
    /// Line of the file where its object starts.
    line: usize,
    /// `relative/path` (a `.jsonl` object: `relative/path#000003`).
    name: String,
    session: Session,
}

/// The corpus's files: `path` itself, or the `.json` / `.jsonl` files below it.
fn files(path: &Path) -> Result<Vec<(PathBuf, String)>, TraceError> {
    let meta = std::fs::symlink_metadata(path)
        .map_err(|e| whole(path, format!("cannot read the Weka corpus: {e}")))?;
    if meta.file_type().is_symlink() && std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
        return Err(whole(path, "a Weka directory may not be a symlink".into()));
    }
    if !meta.is_dir() {
        if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
            return Err(whole(
                path,
                "a Weka corpus is a file or a directory (not a pipe or a device)".into(),
            ));
        }
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into(),
        );
        return Ok(vec![(path.to_owned(), name)]);
    }
    let mut out = Vec::new();
    let mut stack = vec![path.to_owned()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir)
            .map_err(|e| whole(&dir, format!("cannot read the Weka directory: {e}")))?;
        for entry in entries {
            let entry = entry.map_err(|e| whole(&dir, format!("cannot read: {e}")))?;
            let file = entry.path();
            let kind = entry
                .file_type()
                .map_err(|e| whole(&file, format!("cannot read: {e}")))?;
            if kind.is_symlink() {
                return Err(whole(
                    &file,
                    "a Weka corpus may not contain symlinks".into(),
                ));
            }
            if kind.is_dir() {
                stack.push(file);
                continue;
            }
            let ext = file.extension().and_then(|e| e.to_str()).unwrap_or("");
            if kind.is_file()
                && (ext.eq_ignore_ascii_case("json") || ext.eq_ignore_ascii_case("jsonl"))
            {
                let relative = file.strip_prefix(path).unwrap_or(&file);
                let name = relative
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy())
                    .collect::<Vec<_>>()
                    .join("/");
                out.push((file, name));
            }
        }
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    if out.is_empty() {
        return Err(whole(
            path,
            "a directory given as a trace is read as a Weka corpus (a session per .json file, several per .jsonl), and this one has no .json or .jsonl file".into(),
        ));
    }
    Ok(out)
}

fn whole(path: &Path, message: String) -> TraceError {
    TraceError {
        file: path.to_owned(),
        line: 0,
        field: None,
        fault: Fault::InvalidJson,
        message,
    }
}

/// Whether the first bytes of a file look like a Weka session (a JSON object with
/// `hash_id_scope` and `requests` and no `agentic_mooncake` schema).
pub(crate) fn looks_like(head: &[u8]) -> bool {
    let has = |needle: &[u8]| head.windows(needle.len()).any(|w| w == needle);
    head.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
        && has(b"\"hash_id_scope\"")
        && has(b"\"requests\"")
        && !has(b"dynamo.agentic_mooncake")
}

/// Reads every session of the corpus at `path`, each checked.
fn read(path: &Path, observe: &mut dyn FnMut(&[u8])) -> Result<Vec<Located>, TraceError> {
    let mut out = Vec::new();
    // A file met in a directory was not named as a trace: say why it is read.
    let why = if path.is_dir() {
        format!(
            " (every .json and .jsonl file under {} is read as one: a directory given as a trace is a Weka corpus)",
            path.display()
        )
    } else {
        String::new()
    };
    for (file, name) in files(path)? {
        let bytes = routerlab_os::MappedFile::open(&file)
            .map_err(|e| whole(&file, format!("cannot read the Weka file: {e}")))?;
        observe(name.as_bytes());
        observe(&bytes);
        let single = file
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"));
        let mut stream = serde_json::Deserializer::from_slice(&bytes).into_iter::<Session>();
        let mut index = 0usize;
        let (mut counted, mut line) = (0usize, 1usize);
        loop {
            let start = stream.byte_offset();
            let skipped = bytes[start..]
                .iter()
                .take_while(|b| b.is_ascii_whitespace())
                .count();
            line += memchr::memchr_iter(b'\n', &bytes[counted..start + skipped]).count();
            counted = start + skipped;
            let Some(next) = stream.next() else { break };
            let session = next.map_err(|e| TraceError {
                file: file.clone(),
                line: e.line(),
                field: None,
                fault: if e.to_string().starts_with("missing field") {
                    Fault::MissingField
                } else {
                    Fault::InvalidJson
                },
                message: format!("not a Weka session{why}: {e}"),
            })?;
            if single && index > 0 {
                return Err(TraceError {
                    file: file.clone(),
                    line,
                    field: None,
                    fault: Fault::InvalidJson,
                    message: "a .json Weka file holds one session; name it .jsonl for several"
                        .into(),
                });
            }
            let name = if single {
                name.clone()
            } else {
                format!("{name}#{index:06}")
            };
            out.push(Located {
                file: file.clone(),
                line,
                name,
                session,
            });
            index += 1;
        }
        if index == 0 {
            return Err(whole(&file, "the Weka file holds no session".into()));
        }
    }
    Ok(out)
}

impl Located {
    fn error(&self, field: String, message: String) -> TraceError {
        TraceError {
            file: self.file.clone(),
            line: self.line,
            field: Some(field),
            fault: Fault::InvalidField,
            message: format!("session `{}`: {message}", self.session.id),
        }
    }

    /// Checks what Dynamo's importer checks before lowering.
    fn check(&self) -> Result<(), TraceError> {
        let s = &self.session;
        if s.id.trim().is_empty() {
            return Err(self.error("id".into(), "must not be empty".into()));
        }
        if s.block_size == 0 || s.block_size > 1 << 20 {
            return Err(self.error(
                "block_size".into(),
                format!("must be from 1 to 1048576, not {}", s.block_size),
            ));
        }
        if s.hash_id_scope != "local" {
            return Err(self.error(
                "hash_id_scope".into(),
                format!("`{}` is not `local`", s.hash_id_scope),
            ));
        }
        if s.models.iter().any(|m| m.trim().is_empty()) {
            return Err(self.error("models".into(), "declares an empty model".into()));
        }
        let mut count = 0usize;
        for (i, entry) in s.requests.iter().enumerate() {
            match entry {
                Entry::Request(r) => {
                    self.check_request(r, &format!("requests[{i}]"))?;
                    count += 1;
                }
                Entry::Subagent(sub) => {
                    let at = format!("requests[{i}]");
                    check_time(sub.t).map_err(|why| self.error(format!("{at}.t"), why))?;
                    if sub.agent_id.trim().is_empty() {
                        return Err(
                            self.error(format!("{at}.agent_id"), "must not be empty".into())
                        );
                    }
                    if let Some(d) = sub.duration_ms {
                        check_time(d as f64 / 1e3)
                            .map_err(|why| self.error(format!("{at}.duration_ms"), why))?;
                    }
                    match sub.status.as_str() {
                        "completed" if sub.requests.is_empty() => {
                            return Err(self.error(
                                format!("{at}.requests"),
                                format!(
                                    "completed sub-agent `{}` has no requests (an external wait is not modelled)",
                                    sub.agent_id
                                ),
                            ));
                        }
                        "completed" | "async_launched" => {}
                        other => {
                            return Err(self.error(
                                format!("{at}.status"),
                                format!("`{other}` is neither `completed` nor `async_launched`"),
                            ));
                        }
                    }
                    for (j, inner) in sub.requests.iter().enumerate() {
                        self.check_request(inner.request(), &format!("{at}.requests[{j}]"))?;
                        count += 1;
                    }
                }
            }
        }
        if count == 0 {
            return Err(self.error("requests".into(), "has no request".into()));
        }
        Ok(())
    }

    fn check_request(&self, r: &Request, at: &str) -> Result<(), TraceError> {
        check_time(r.t).map_err(|why| self.error(format!("{at}.t"), why))?;
        if r.model.trim().is_empty() {
            return Err(self.error(format!("{at}.model"), "must not be empty".into()));
        }
        let models = &self.session.models;
        if !models.is_empty() && !models.contains(&r.model) {
            return Err(self.error(
                format!("{at}.model"),
                format!("`{}` is not among the session's `models`", r.model),
            ));
        }
        if r.input == 0 {
            return Err(self.error(format!("{at}.in"), "must be above 0".into()));
        }
        for (key, tokens) in [("in", r.input), ("out", r.output)] {
            if tokens > crate::MAX_REQUEST_TOKENS {
                return Err(self.error(
                    format!("{at}.{key}"),
                    format!(
                        "{tokens} tokens is more than the {} a request may have",
                        crate::MAX_REQUEST_TOKENS
                    ),
                ));
            }
        }
        if let Some(a) = r.api_time {
            check_time(a).map_err(|why| self.error(format!("{at}.api_time"), why))?;
        }
        Ok(())
    }

    /// Whether a nested request starts before its sub-agent's marker.
    fn nested_before_marker(&self) -> bool {
        self.session.requests.iter().any(|entry| match entry {
            Entry::Subagent(sub) => sub
                .requests
                .iter()
                .any(|inner| inner.request().t < sub.t - graph::EPSILON_S),
            Entry::Request(_) => false,
        })
    }
}

fn recorded(r: &Request, t: f64) -> Recorded {
    Recorded {
        t,
        model: r.model.clone(),
        input: r.input,
        output: r.output,
        hash_ids: r.hash_ids.clone(),
        api_time: r.api_time,
    }
}

/// Lowers one session into `agentic_mooncake` rows appended to `out`.
fn lower(
    located: &Located,
    relative: bool,
    next_block: &mut u64,
    out: &mut Vec<u8>,
) -> Result<(), TraceError> {
    let s = &located.session;
    let ns = located.name.as_str();
    let play = format!("{ns}:play:{}", s.id);
    let nested_t = |inner: f64, marker: f64| {
        if relative {
            marker + inner
        } else {
            inner.max(marker)
        }
    };
    let mut top = Vec::new();
    let mut subagents = Vec::new();
    for (i, entry) in s.requests.iter().enumerate() {
        match entry {
            Entry::Request(r) => top.push(Placed {
                source_id: format!("outer:{i}"),
                order: i,
                request: recorded(r, r.t),
            }),
            Entry::Subagent(sub) => subagents.push((i, sub)),
        }
    }
    if top.is_empty() {
        return Err(located.error("requests".into(), "has no parent request".into()));
    }
    let mut streams = graph::streams(ns, "root", top);
    let parents = streams.len();
    let mut joins: Vec<(String, Vec<String>)> = Vec::new();
    for (i, sub) in subagents {
        // The sub-agent's owner: the parent stream holding the last request before it.
        let owner = streams[..parents]
            .iter()
            .enumerate()
            .flat_map(|(si, st)| st.requests.iter().map(move |r| (si, r)))
            .filter(|(_, r)| r.order < i)
            .max_by_key(|(_, r)| r.order);
        let Some((owner, spawner)) = owner else {
            return Err(located.error(
                format!("requests[{i}]"),
                format!(
                    "sub-agent `{}` comes before any parent request",
                    sub.agent_id
                ),
            ));
        };
        let spawner = spawner.source_id.clone();
        let inner: Vec<Placed> = sub
            .requests
            .iter()
            .enumerate()
            .map(|(j, e)| {
                let r = e.request();
                Placed {
                    source_id: format!("outer:{i}:inner:{j}"),
                    order: j,
                    request: recorded(r, nested_t(r.t, sub.t)),
                }
            })
            .collect();
        if inner.is_empty() {
            continue;
        }
        let end = match sub.duration_ms {
            Some(d) => sub.t + d as f64 / 1000.0,
            None => inner.iter().map(|p| p.request.end()).fold(sub.t, f64::max),
        };
        let mut children = graph::streams(ns, &format!("subagent:{i}:{}", sub.agent_id), inner);
        let scope = children[0].session.clone();
        children[0].fork_source = Some(spawner);
        for child in &mut children {
            child.scope.clone_from(&scope);
        }
        let join = (sub.status == "completed")
            .then(|| {
                streams[owner]
                    .requests
                    .iter()
                    .filter(|r| r.order > i && r.request.t + graph::EPSILON_S >= end)
                    .min_by_key(|r| r.order)
                    .map(|r| r.source_id.clone())
            })
            .flatten();
        if let Some(join) = join {
            let terminals: Vec<String> = children
                .iter()
                .filter_map(|c| c.requests.last().map(|r| r.source_id.clone()))
                .collect();
            joins.push((join, terminals));
        }
        streams.extend(children);
    }
    let by_source: HashMap<&str, &Recorded> = streams
        .iter()
        .flat_map(|st| st.requests.iter())
        .map(|p| (p.source_id.as_str(), &p.request))
        .collect();
    let root_time = by_source
        .values()
        .map(|r| r.t)
        .fold(f64::INFINITY, f64::min);
    let root = streams[0].requests[0].clone();
    let mut edges: HashMap<String, Vec<Edge>> = HashMap::new();
    for st in &streams {
        for pair in st.requests.windows(2) {
            add(
                edges.entry(pair[1].source_id.clone()).or_default(),
                Edge {
                    on: pair[0].source_id.clone(),
                    trigger: Trigger::Completion,
                    delay_ms: ms(pair[1].request.t - pair[0].request.end()),
                    relation: Relation::Sequence,
                },
            );
        }
    }
    for st in &streams {
        let (Some(first), Some(source)) = (st.requests.first(), &st.fork_source) else {
            continue;
        };
        let parent = by_source[source.as_str()];
        let (trigger, delay_ms) = if first.request.t < parent.end() {
            (Trigger::Dispatch, ms(first.request.t - parent.t))
        } else {
            (Trigger::Completion, ms(first.request.t - parent.end()))
        };
        add(
            edges.entry(first.source_id.clone()).or_default(),
            Edge {
                on: source.clone(),
                trigger,
                delay_ms,
                relation: Relation::Spawn,
            },
        );
    }
    graph::barriers(&streams, &mut edges);
    for (target, terminals) in joins {
        let t = by_source[target.as_str()].t;
        for terminal in terminals {
            let delay_ms = ms(t - by_source[terminal.as_str()].end());
            add(
                edges.entry(target.clone()).or_default(),
                Edge {
                    on: terminal,
                    trigger: Trigger::Completion,
                    delay_ms,
                    relation: Relation::Join,
                },
            );
        }
    }
    // A stream with no edge at all hangs off the play's first request.
    for st in &streams {
        let Some(first) = st.requests.first() else {
            continue;
        };
        if first.source_id == root.source_id
            || edges.get(&first.source_id).is_some_and(|e| !e.is_empty())
        {
            continue;
        }
        edges
            .entry(first.source_id.clone())
            .or_default()
            .push(Edge {
                on: root.source_id.clone(),
                trigger: Trigger::Dispatch,
                delay_ms: ms(first.request.t - root.request.t),
                relation: Relation::Spawn,
            });
    }
    write_rows(located, &play, &streams, root_time, edges, next_block, out)
}

/// The longest time a session may state, seconds: the simulator's clock range.
const MAX_TIME_S: f64 = crate::arrivals::MAX_CLOCK_NS as f64 / 1e9;

/// Why a time in seconds is none a session may state: not a number, negative, or past
/// the simulator's clock range.
fn check_time(t: f64) -> Result<(), String> {
    if t.is_nan() || t < 0.0 {
        return Err(format!(
            "must be seconds ≥ 0, not {}",
            crate::error::short_number(t)
        ));
    }
    if t > MAX_TIME_S {
        return Err(format!(
            "{} s is past {}",
            crate::error::short_number(t),
            crate::arrivals::CLOCK_RANGE
        ));
    }
    Ok(())
}

/// The hash ids of `r`, `block` tokens each: its own ids (mapped through `ids`, so equal
/// ids within the session stay equal), a private id past them and for a partial last block.
fn blocks(r: &Recorded, block: u64, ids: &mut HashMap<u64, u64>, next: &mut u64) -> Vec<u64> {
    let full = r.input / block;
    let mut fresh = || {
        *next += 1;
        *next
    };
    let mut out: Vec<u64> = (0..full as usize)
        .map(|i| match r.hash_ids.get(i) {
            Some(id) => *ids.entry(*id).or_insert_with(&mut fresh),
            None => fresh(),
        })
        .collect();
    if !r.input.is_multiple_of(block) {
        out.push(fresh());
    }
    out
}

fn write_rows(
    located: &Located,
    play: &str,
    streams: &[Stream],
    root_time: f64,
    mut edges: HashMap<String, Vec<Edge>>,
    next_block: &mut u64,
    out: &mut Vec<u8>,
) -> Result<(), TraceError> {
    let ns = &located.name;
    let block = located.session.block_size;
    let mut ids = HashMap::new();
    let mut rows = Vec::new();
    for st in streams {
        for p in &st.requests {
            let dependencies = edges
                .remove(&p.source_id)
                .unwrap_or_default()
                .into_iter()
                .map(|e| RowDependency {
                    request_id: format!("{ns}:request:{}", e.on),
                    trigger: e.trigger,
                    delay_ms: e.delay_ms,
                    relation: e.relation,
                })
                .collect();
            rows.push(Row {
                request_id: format!("{ns}:request:{}", p.source_id),
                play_id: play,
                session_id: &st.session,
                model: &p.request.model,
                input_length: p.request.input,
                output_length: p.request.output,
                hash_ids: blocks(&p.request, block, &mut ids, next_block),
                not_before_ms: ms(p.request.t - root_time),
                dependencies,
            });
        }
    }
    rows.sort_by(|a, b| a.request_id.cmp(&b.request_id));
    for row in rows {
        serde_json::to_writer(&mut *out, &row)
            .map_err(|e| located.error("requests".into(), format!("cannot lower: {e}")))?;
        out.push(b'\n');
    }
    Ok(())
}

/// Lowers the Weka corpus at `path` (a file or a directory) into `agentic_mooncake` v2
/// text: the header, then every session's rows. `observe` sees each file's name and bytes
/// (for the report's content hash).
pub(crate) fn lower_corpus(
    path: &Path,
    observe: &mut dyn FnMut(&[u8]),
) -> Result<Vec<u8>, TraceError> {
    let sessions = read(path, observe)?;
    let mut block = None;
    for s in &sessions {
        s.check()?;
        match block {
            Some(b) if b != s.session.block_size => {
                return Err(s.error(
                    "block_size".into(),
                    format!(
                        "{} differs from the corpus's {b} (one block size per corpus)",
                        s.session.block_size
                    ),
                ));
            }
            _ => block = Some(s.session.block_size),
        }
    }
    let block = block.ok_or_else(|| whole(path, "the Weka corpus holds no session".into()))?;
    let relative = sessions.iter().any(Located::nested_before_marker);
    let mut out = format!(
        "{{\"schema\":\"{}\",\"version\":{},\"block_size\":{block},\"hash_id_scope\":\"local\",\
         \"source\":{{\"format\":\"weka\",\"digest\":\"{}\"}}}}\n",
        crate::format::agentic::SCHEMA,
        crate::format::agentic::VERSION,
        if relative {
            "nested-times-relative"
        } else {
            "nested-times-absolute"
        }
    )
    .into_bytes();
    let mut next_block = 0u64;
    for s in &sessions {
        lower(s, relative, &mut next_block, &mut out)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
