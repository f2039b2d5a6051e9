//! routerlab-trace: traces in, requests with block chains out.
//!
//! Everything a replay knows about its input comes through here: [`reader`] streams a
//! trace file and checks every line (one module per format under [`format`](mod@format), the id,
//! parent and session links in [`ids`], the adapters named in [`adapters`], the field-by-field diagnosis of bad lines in
//! [`diagnose`], how one request waits on others in [`dependency`], the graph of those
//! checked when a [`Workload`] loads); [`blocks`] computes prefix-block hash chains; [`synth`] and [`synth_agentic`]
//! write synthetic traces; [`workload`] loads a whole trace once into an immutable [`Workload`] that many
//! runs can share; [`inspect`] summarises a trace, up to the reuse any router could win;
//! [`sharing`] finds the blocks only one request has.
//! Nothing here knows about plugins or the simulator.

pub mod adapters;
pub mod arrivals;
pub mod blocks;
pub mod decision_log;
pub mod dependency;
pub mod diagnose;
pub mod error;
pub mod format;
mod graph;
pub mod ids;
pub mod inspect;
mod linker;
pub mod reader;
mod request;
pub mod sharing;
mod source;
pub mod synth;
pub mod synth_agentic;
mod trace_format;
pub mod workload;
mod zstd;

pub use error::{Fault, TraceError};
pub use reader::{TraceFormat, TraceOptions, TraceReader, TraceRequest};
pub use request::MAX_REQUEST_TOKENS;
pub use source::{HashJob, TraceSource};
pub use workload::{Workload, WorkloadRequest};
