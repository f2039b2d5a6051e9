//! routerlab-report: what a run produces, apart from the code that produced it.
//!
//! [`schema`] is the stable report (`Serialize + Deserialize`, human tables, invariants),
//! [`run`] its `run` block, [`stats`] the accumulators every driver reduces into (the
//! replays and `drive` alike), [`records`] the per-request records, [`compare`] reports side
//! by side (tables and CSV, from finished reports only) and [`redact`] the form snapshots
//! store. Plots, `drive` and saved-report tools need only this crate, never the simulator.

pub mod agentic;
pub mod compare;
mod human;
mod invariants;
mod latency;
pub mod off_policy;
pub mod records;
pub mod redact;
pub mod run;
pub mod schema;
pub mod slo;
pub mod stats;

pub use invariants::checked;
pub use run::RunInfo;
pub use schema::*;
pub use slo::{Slo, SloReport};
