//! CSV traces that carry arrival times and lengths but no prefix identity: Azure's LLM
//! inference traces (`TIMESTAMP,ContextTokens,GeneratedTokens`) and BurstGPT
//! (`Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`).
//!
//! With no way to tell which requests share a prefix, every request gets an empty block
//! chain: the replay runs them as load-only traffic, every hit is zero, and the command
//! line says so once. The first line must be the header the format names, so a CSV of
//! another layout is refused instead of being read column by column into the wrong fields.

use crate::error::{Fault, TraceError};
use crate::linker::Linker;
use crate::request::TraceRequest;
use crate::trace_format::TraceFormat;

/// The header of an Azure LLM inference trace.
pub(crate) const AZURE_HEADER: &str = "TIMESTAMP,ContextTokens,GeneratedTokens";
/// The leading columns of a BurstGPT trace.
pub(crate) const BURSTGPT_HEADER: &str = "Timestamp,Model,Request tokens,Response tokens";

impl Linker {
    /// Checks the header line of a CSV trace.
    pub(crate) fn check_csv_header(&self, line_no: usize, text: &str) -> Result<(), TraceError> {
        let (expected, matches) = match self.format {
            TraceFormat::AzureCsv => (AZURE_HEADER, text.trim() == AZURE_HEADER),
            _ => (BURSTGPT_HEADER, text.trim().starts_with(BURSTGPT_HEADER)),
        };
        if matches {
            return Ok(());
        }
        Err(self.error_at(
            line_no,
            None,
            Fault::InvalidField,
            format!(
                "{} traces start with the header `{expected}`, not `{}`",
                self.format,
                text.trim()
            ),
        ))
    }

    /// One data line of a CSV trace.
    pub(crate) fn parse_csv(
        &mut self,
        line_no: usize,
        text: &str,
        out: &mut TraceRequest,
    ) -> Result<(), TraceError> {
        let cells: Vec<&str> = text.split(',').map(str::trim).collect();
        let columns: &[&str] = match self.format {
            TraceFormat::AzureCsv => &["TIMESTAMP", "ContextTokens", "GeneratedTokens"],
            _ => &["Timestamp", "Model", "Request tokens", "Response tokens"],
        };
        if cells.len() < columns.len() {
            return Err(self.error_at(
                line_no,
                Some(columns[cells.len()]),
                Fault::MissingField,
                format!(
                    "{} columns, the header has at least {}",
                    cells.len(),
                    columns.len()
                ),
            ));
        }
        let count = |column: usize| -> Result<u64, TraceError> {
            cells[column].parse::<u64>().map_err(|_| {
                self.error_at(
                    line_no,
                    Some(columns[column]),
                    Fault::InvalidField,
                    format!("`{}` is not a whole number of tokens", cells[column]),
                )
            })
        };
        let (arrival_ns, prompt, output) = match self.format {
            TraceFormat::AzureCsv => {
                let at = parse_datetime_ns(cells[0]).ok_or_else(|| {
                    self.error_at(
                        line_no,
                        Some("TIMESTAMP"),
                        Fault::InvalidField,
                        format!(
                            "`{}` is not a time like 2023-11-16 18:17:03.9799600",
                            cells[0]
                        ),
                    )
                })?;
                let (prompt, output) = (count(1)?, count(2)?);
                // Arrivals count from the first request, as Mooncake's timestamps do.
                let start = self.csv_start_ns.unwrap_or(at);
                let since = at.checked_sub(start).ok_or_else(|| {
                    self.error_at(
                        line_no,
                        Some("TIMESTAMP"),
                        Fault::InvalidField,
                        format!("`{}` is before the first request's", cells[0]),
                    )
                })?;
                self.csv_start_ns = Some(start);
                (since, prompt, output)
            }
            _ => {
                let seconds: f64 = cells[0]
                    .parse()
                    .ok()
                    .filter(|s: &f64| s.is_finite() && *s >= 0.0 && *s < 1e9)
                    .ok_or_else(|| {
                        self.error_at(
                            line_no,
                            Some("Timestamp"),
                            Fault::InvalidField,
                            format!("`{}` is not a number of seconds from 0 to 1e9", cells[0]),
                        )
                    })?;
                ((seconds * 1e9).round() as u64, count(2)?, count(3)?)
            }
        };
        out.seq = self.take_seq(line_no)?;
        out.line = line_no;
        out.parent_seq = None;
        out.session = 0;
        out.prompt.clear();
        out.prompt_len = prompt;
        out.arrival_ns = Some(arrival_ns);
        out.output_tokens = Some(output);
        out.blocks.clear();
        out.token_ids.clear();
        Ok(())
    }
}

/// Nanoseconds since 1970-01-01 of `YYYY-MM-DD HH:MM:SS[.fraction]` (UTC, as Azure writes
/// it; up to nine fraction digits).
pub(crate) fn parse_datetime_ns(text: &str) -> Option<u64> {
    let (date, time) = text.trim().split_once([' ', 'T'])?;
    let mut d = date.split('-');
    let (y, m, day): (i64, u32, u32) = (
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
    );
    // Four-digit years: a longer one is a typo, and would overflow the day count below.
    if d.next().is_some() || !(1..=12).contains(&m) || !(1970..=9999).contains(&y) {
        return None;
    }
    // The calendar's own month lengths: 2023-02-31 is no date (it is not 2023-03-03).
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let month_days = match m {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if !(1..=month_days).contains(&day) {
        return None;
    }
    let (clock, fraction) = match time.split_once('.') {
        Some((clock, fraction)) => (clock, fraction),
        None => (time, ""),
    };
    let mut c = clock.split(':');
    let (h, min, s): (u64, u64, u64) = (
        c.next()?.parse().ok()?,
        c.next()?.parse().ok()?,
        c.next()?.parse().ok()?,
    );
    if c.next().is_some() || h > 23 || min > 59 || s > 60 {
        return None;
    }
    if fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let nanos: u64 = format!("{fraction:0<9}").parse().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = u64::try_from(era * 146_097 + doe - 719_468).ok()?;
    let seconds = days
        .checked_mul(86_400)?
        .checked_add(h * 3600 + min * 60 + s)?;
    seconds.checked_mul(1_000_000_000)?.checked_add(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn azure_times_become_nanoseconds_since_the_epoch() {
        assert_eq!(parse_datetime_ns("1970-01-01 00:00:00"), Some(0));
        assert_eq!(
            parse_datetime_ns("2023-11-16 18:17:03.9799600"),
            Some(1_700_158_623_979_960_000)
        );
        assert_eq!(
            parse_datetime_ns("2000-03-01 00:00:01.5"),
            Some(951_868_801_500_000_000)
        );
        // Leap days that exist: 2000 (divisible by 400) and 2024.
        assert_eq!(
            parse_datetime_ns("2000-02-29 00:00:00"),
            Some(951_782_400_000_000_000)
        );
        assert_eq!(
            parse_datetime_ns("2024-02-29 00:00:00"),
            Some(1_709_164_800_000_000_000)
        );
        for bad in [
            "2023-13-01 00:00:00",
            "2023-11-16",
            "2023-11-16 25:00:00",
            "x y",
            "2023-11-16 18:17:03.1234567890",
            // Found by the trace_reader fuzz target: the day count overflowed (a panic).
            "9223372036854775807-11-16 18:17:04.1",
            "10000-01-01 00:00:00",
            // Days the month does not have.
            "2023-02-31 00:00:00",
            "2023-02-29 00:00:00",
            "2100-02-29 00:00:00",
            "2023-04-31 12:00:00",
            "2023-01-00 00:00:00",
        ] {
            assert_eq!(parse_datetime_ns(bad), None, "{bad}");
        }
    }
}
