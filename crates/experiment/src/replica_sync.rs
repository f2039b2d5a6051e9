//! How router replicas share their state (`replica_sync` and the `sync_*` keys), resolved
//! into the route crate's settings: a preset's values unless a key overrides them.

use routerlab_route::{ReplicaSync, SyncScope, SyncStrategy};

use crate::{Experiment, ExperimentError, Sync, SyncWhat};

/// The replicas' sharing the description asks for (`none` unless `replica_sync` is given),
/// checked against the `replicas` it has.
pub fn resolve(opts: &Experiment, replicas: usize) -> Result<ReplicaSync, ExperimentError> {
    let mut sync = match opts.replica_sync {
        None | Some(Sync::None) => ReplicaSync::none(),
        Some(Sync::LlmD) => ReplicaSync::preset("llm-d").expect("a preset"),
        Some(Sync::Dynamo) => ReplicaSync::preset("dynamo").expect("a preset"),
        Some(other) => ReplicaSync {
            strategy: match other {
                Sync::Periodic => SyncStrategy::Periodic,
                Sync::Delta => SyncStrategy::Delta,
                Sync::Broadcast => SyncStrategy::Broadcast,
                _ => SyncStrategy::Shared,
            },
            // 200 ms, llm-d's publisher cadence, for a schedule not given.
            interval_ns: match other {
                Sync::Periodic | Sync::Delta => 200_000_000,
                _ => 0,
            },
            ..ReplicaSync::none()
        },
    };
    if let Some(scope) = opts.sync_scope {
        sync.scope = match scope {
            SyncWhat::Loads => SyncScope::Loads,
            SyncWhat::Decisions => SyncScope::Decisions,
        };
    }
    let ms = |key: &str, value: Option<f64>, default: u64| -> Result<u64, ExperimentError> {
        match value {
            None => Ok(default),
            Some(v) if (0.0..=3.6e9).contains(&v) => Ok((v * 1e6).round() as u64),
            Some(v) => Err(ExperimentError::invalid(format!(
                "--{} must be 0 or more milliseconds, at most an hour, not {v}",
                key.replace('_', "-")
            ))),
        }
    };
    sync.interval_ns = ms("sync_interval_ms", opts.sync_interval_ms, sync.interval_ns)?;
    sync.delay_ns = ms("sync_delay_ms", opts.sync_delay_ms, sync.delay_ns)?;
    sync.ttl_ns = ms("sync_ttl_ms", opts.sync_ttl_ms, sync.ttl_ns)?;
    sync.loss = opts.sync_loss.unwrap_or(sync.loss);
    if !sync.is_on() && opts.sync_scope.is_some() {
        return Err(ExperimentError::invalid(
            "--sync-scope needs a --replica-sync strategy",
        ));
    }
    sync.check(replicas).map_err(|problem| {
        // The keys are the flags' names.
        let flags = [
            "replica_sync",
            "sync_interval_ms",
            "sync_delay_ms",
            "sync_loss",
            "sync_ttl_ms",
            "router_replicas",
        ]
        .iter()
        .fold(problem, |text, key| {
            text.replace(key, &format!("--{}", key.replace('_', "-")))
        });
        ExperimentError::invalid(flags)
    })?;
    Ok(sync)
}
