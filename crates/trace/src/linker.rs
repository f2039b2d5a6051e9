//! Turning a trace's lines into requests linked to their parents and sessions: the state
//! every format's parser extends (`impl Linker` in each `format` module), here without
//! knowing any format's fields.

use std::path::PathBuf;

use crate::adapters::{MAX_ADAPTER_NAME, MAX_ADAPTERS};
use crate::error::{Fault, TraceError};
use crate::ids::{IdKey, IdTable, MAX_REQUESTS};
use crate::request::{TraceOptions, TraceRequest};
use crate::trace_format::TraceFormat;

/// Turns lines into requests and links them to their parents.
pub(crate) struct Linker {
    pub(crate) path: PathBuf,
    pub(crate) format: TraceFormat,
    pub(crate) options: TraceOptions,
    pub(crate) seq: u64,
    /// Chat ids, or Mooncake chat ids, to their `seq`.
    pub(crate) ids: IdTable<u64>,
    /// Azure CSV: the first request's time, from which arrivals count.
    pub(crate) csv_start_ns: Option<u64>,
    /// Session id to (session number, last `seq`).
    pub(crate) sessions: IdTable<(u64, u64)>,
    /// The adapters named so far.
    pub(crate) adapters: crate::adapters::Adapters,
    /// Agentic play id to its number.
    pub(crate) plays: IdTable<u64>,
    /// Reading for the arrival times alone (see [`TraceReader::times_only`]).
    pub(crate) times_only: bool,
}

impl Linker {
    /// A linker for the trace at `path`, of `format`, read with `options`: nothing linked.
    pub(crate) fn new(path: PathBuf, format: TraceFormat, options: TraceOptions) -> Linker {
        Linker {
            path,
            format,
            options,
            seq: 0,
            ids: IdTable::default(),
            csv_start_ns: None,
            sessions: IdTable::default(),
            adapters: Default::default(),
            plays: IdTable::default(),
            times_only: false,
        }
    }

    pub(crate) fn error_at(
        &self,
        line: usize,
        field: Option<&str>,
        fault: Fault,
        message: String,
    ) -> TraceError {
        TraceError {
            file: self.path.clone(),
            line,
            field: field.map(str::to_owned),
            fault,
            message,
        }
    }

    pub(crate) fn parse_line(
        &mut self,
        line_no: usize,
        bytes: &[u8],
        out: &mut TraceRequest,
    ) -> Result<(), TraceError> {
        match self.format {
            TraceFormat::Chat => {
                let text = self.utf8(line_no, bytes)?;
                self.parse_chat(line_no, text, out)
            }
            TraceFormat::Mooncake => self.parse_mooncake(line_no, bytes, out),
            TraceFormat::TokenIds => {
                let text = self.utf8(line_no, bytes)?;
                self.parse_token_ids(line_no, text, out)
            }
            TraceFormat::AzureCsv | TraceFormat::BurstGpt => {
                let text = self.utf8(line_no, bytes)?;
                self.parse_csv(line_no, text, out)
            }
            TraceFormat::AgenticMooncake | TraceFormat::Weka => {
                let text = self.utf8(line_no, bytes)?;
                self.parse_agentic(line_no, text, out)
            }
        }
    }

    pub(crate) fn utf8<'b>(&self, line_no: usize, bytes: &'b [u8]) -> Result<&'b str, TraceError> {
        std::str::from_utf8(bytes).map_err(|e| {
            self.error_at(
                line_no,
                None,
                Fault::InvalidUtf8,
                format!("invalid UTF-8 at byte {}", e.valid_up_to()),
            )
        })
    }

    pub(crate) fn take_seq(&mut self, line_no: usize) -> Result<u64, TraceError> {
        if self.seq >= MAX_REQUESTS {
            return Err(self.error_at(
                line_no,
                None,
                Fault::InvalidField,
                format!("a trace may hold at most {MAX_REQUESTS} requests"),
            ));
        }
        self.seq += 1;
        Ok(self.seq)
    }

    /// Numbers the session and, with no explicit parent, links to its previous request.
    pub(crate) fn session(
        &mut self,
        key: Option<IdKey<'_>>,
        seq: u64,
        parent_seq: &mut Option<u64>,
    ) -> u64 {
        let Some(key) = key else { return 0 };
        let entry = self
            .sessions
            .get_or_insert_with(key, |len| (len as u64 + 1, 0));
        if parent_seq.is_none() && entry.1 != 0 {
            *parent_seq = Some(entry.1);
        }
        entry.1 = seq;
        entry.0
    }

    /// The number of the adapter a line names (0: none, the base model).
    pub(crate) fn adapter(&mut self, name: Option<&str>, line: usize) -> Result<u32, TraceError> {
        let Some(name) = name else { return Ok(0) };
        let why = if name.is_empty() {
            "an adapter name is not empty (leave `adapter` out for the base model)".to_owned()
        } else if name.len() > MAX_ADAPTER_NAME {
            format!(
                "an adapter name is at most {MAX_ADAPTER_NAME} bytes, not {}",
                name.len()
            )
        } else if let Some(n) = self.adapters.number(name) {
            return Ok(n);
        } else {
            format!("a trace may name at most {MAX_ADAPTERS} adapters")
        };
        Err(self.error_at(line, Some("adapter"), Fault::InvalidField, why))
    }
}
