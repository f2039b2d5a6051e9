//! How one request of a trace waits on others: what fires the wait, what it stands for,
//! and a dependency as a trace line writes it (on another request's id) and as the graph
//! resolves it (on a position in the workload). The agentic and Weka readers write them,
//! the graph resolves them, the workload's requests carry them.

use serde::{Deserialize, Serialize};

/// What fires a dependency: the other request being sent, or finishing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// When the other request is dispatched (sent to the router).
    Dispatch,
    /// When the other request completes.
    Completion,
}

/// What a dependency stands for (the replay treats them alike; reports may not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Relation {
    /// The next turn of a session after the previous one.
    Sequence,
    /// A sub-agent started by another request.
    Spawn,
    /// A turn that waits for sub-agents.
    Join,
    /// A barrier of the recorded replay.
    ReplayBarrier,
}

/// One dependency as written: on a request named by its id.
#[derive(Debug, Clone, PartialEq)]
pub struct RawDependency {
    /// The other request's `request_id`.
    pub request_id: String,
    /// What fires it.
    pub trigger: Trigger,
    /// Nanoseconds after the trigger before this request may go.
    pub delay_ns: u64,
    /// Its kind.
    pub relation: Relation,
}

/// One resolved dependency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dependency {
    /// Position (in the workload) of the request depended on.
    pub on: usize,
    /// What of it fires this one.
    pub trigger: Trigger,
    /// Nanoseconds after the trigger.
    pub delay_ns: u64,
    /// Its kind.
    pub relation: Relation,
}
