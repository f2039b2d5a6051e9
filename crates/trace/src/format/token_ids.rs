//! Token-id JSONL (llmservingsim): the prompt as token ids, hashed in blocks of
//! `--trace-block-size` ids.

use routerlab_core::hash::chain;
use serde::Deserialize;

use crate::diagnose::diagnose;
use crate::error::{Fault, TraceError};
use crate::linker::Linker;
use crate::request::TraceRequest;
use crate::trace_format::TraceFormat;

impl Linker {
    pub(crate) fn parse_token_ids(
        &mut self,
        line_no: usize,
        text: &str,
        out: &mut TraceRequest,
    ) -> Result<(), TraceError> {
        let parsed: TokenIdsLine = serde_json::from_str(text)
            .map_err(|e| diagnose(&self.path, line_no, text, TraceFormat::TokenIds, &e))?;
        let input = parsed.input_tok_ids.len() as u64;
        if parsed.input_toks.is_some_and(|n| n != input) {
            return Err(self.error_at(
                line_no,
                Some("input_toks"),
                Fault::InvalidField,
                format!(
                    "{} does not match the {input} ids of `input_tok_ids`",
                    parsed.input_toks.unwrap_or(0)
                ),
            ));
        }
        out.seq = self.take_seq(line_no)?;
        out.line = line_no;
        out.parent_seq = None;
        out.session = 0;
        out.prompt.clear();
        out.prompt_len = input;
        out.arrival_ns = parsed.arrival_time_ns;
        out.output_tokens = parsed.output_toks;
        out.blocks.clear();
        let mut previous = 0u64;
        for block in parsed
            .input_tok_ids
            .chunks(self.options.trace_block_size as usize)
        {
            let bytes: Vec<u8> = block.iter().flat_map(|id| id.to_le_bytes()).collect();
            previous = chain(previous, &bytes);
            out.blocks.push(previous);
        }
        out.token_ids = parsed.input_tok_ids;
        Ok(())
    }
}

/// A token-id line (llmservingsim).
#[derive(Debug, Deserialize)]
struct TokenIdsLine {
    #[serde(default)]
    arrival_time_ns: Option<u64>,
    #[serde(default)]
    input_toks: Option<u64>,
    #[serde(default)]
    output_toks: Option<u64>,
    input_tok_ids: Vec<u32>,
}
