//! The fleet's endpoints as the description gives them: a count or names, one pool or a
//! prefill and a decode pool.

use routerlab_sim::MAX_ENDPOINTS;
use routerlab_sim::scenario::{DEFAULT_ENDPOINTS, default_endpoints};
use serde_yaml::Value;

use crate::ExperimentError;
use crate::file::Experiment;
use crate::resolve::{Given, check_endpoints, given_endpoints};

/// The fleet's endpoints and how many of the first prefill (a disaggregated fleet):
/// `endpoints` (a count or names) with `prefill_endpoints` N taking its first N, or
/// `prefill_endpoints` and `decode_endpoints` (each a count or names) one after the other.
pub(crate) fn fleet(opts: &Experiment) -> Result<(Vec<String>, Option<usize>), ExperimentError> {
    let given =
        |value: &Option<Value>, key| value.as_ref().map(|v| given_endpoints(v, key)).transpose();
    let (prefill, decode, all) = (
        given(&opts.prefill_endpoints, "prefill_endpoints")?,
        given(&opts.decode_endpoints, "decode_endpoints")?,
        given(&opts.endpoints, "endpoints")?,
    );
    match (prefill, decode, all) {
        (_, Some(_), Some(_)) => Err(ExperimentError::invalid(
            "give --decode-endpoints or --endpoints, not both (with --endpoints, --prefill-endpoints N makes its first N the prefill pool)",
        )),
        (None, Some(_), None) => Err(ExperimentError::invalid(
            "a disaggregated fleet needs --prefill-endpoints as well as --decode-endpoints",
        )),
        (Some(_), None, None) => Err(ExperimentError::invalid(
            "a disaggregated fleet needs --decode-endpoints M as well (or --endpoints, whose first N --prefill-endpoints makes the prefill pool)",
        )),
        (Some(prefill), Some(decode), None) => {
            let names = |pool: Given, role: &str| match pool {
                Given::Count(n) => (0..n.min(MAX_ENDPOINTS as u64 + 1))
                    .map(|i| format!("{role}-{i}"))
                    .collect::<Vec<_>>(),
                Given::Names(names) => names,
            };
            let (prefill, decode) = (names(prefill, "prefill"), names(decode, "decode"));
            if prefill.is_empty()
                || decode.is_empty()
                || prefill.len() + decode.len() > MAX_ENDPOINTS
            {
                return Err(ExperimentError::invalid(format!(
                    "--prefill-endpoints and --decode-endpoints must each be at least 1, and {MAX_ENDPOINTS} at most together"
                )));
            }
            if let Some(both) = prefill.iter().find(|p| decode.contains(p)) {
                return Err(ExperimentError::invalid(format!(
                    "`{both}` is in both --prefill-endpoints and --decode-endpoints"
                )));
            }
            let split = prefill.len();
            let endpoints = check_endpoints(prefill.into_iter().chain(decode).collect())?;
            Ok((endpoints, Some(split)))
        }
        (prefill, None, all) => {
            let endpoints = match all {
                None => default_endpoints(DEFAULT_ENDPOINTS),
                Some(Given::Count(n)) if n == 0 || n > MAX_ENDPOINTS as u64 => {
                    return Err(ExperimentError::invalid(format!(
                        "--endpoints: expected 1 to {MAX_ENDPOINTS} endpoints, found {n}"
                    )));
                }
                Some(Given::Count(n)) => default_endpoints(n as usize),
                Some(Given::Names(names)) => check_endpoints(names)?,
            };
            let prefill = match prefill {
                None => None,
                Some(Given::Count(p)) if p == 0 || p >= endpoints.len() as u64 => {
                    return Err(ExperimentError::invalid(format!(
                        "--prefill-endpoints must be from 1 to {} (the rest of the {} endpoints decode)",
                        endpoints.len().saturating_sub(1),
                        endpoints.len()
                    )));
                }
                Some(Given::Count(p)) => Some(p as usize),
                Some(Given::Names(_)) => {
                    return Err(ExperimentError::invalid(
                        "with --endpoints, --prefill-endpoints is a count N (its first N endpoints prefill); names go with --decode-endpoints instead",
                    ));
                }
            };
            Ok((endpoints, prefill))
        }
    }
}
