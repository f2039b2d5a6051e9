//! A sweep: an experiment file plus a `grid`, expanded into runs, dealt to shards, and the
//! shards' runs gathered back.
//!
//! Each grid key (any experiment setting, or `policy`) takes each of its values, and the
//! runs are every combination, in file order with the last key varying fastest. Each run's
//! settings are the file's with its grid values laid over them ([`Layers`]), resolved by the
//! very code `replay` uses. Sharding is how a sweep outgrows one machine without routerlab
//! knowing any cluster: shard I of N runs the runs dealt to it ([`Partition`]), each
//! written with its [`SweepId`]; [`ShardSet`] checks that every run is there exactly once,
//! from one sweep and one partitioning, and hands them back in grid order.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use routerlab_core::hash::hash64;
use serde::{Deserialize, Serialize};
use serde_yaml::{Mapping, Value};

use crate::ExperimentError;
use crate::error::one_line;
use crate::file::{Experiment, Layers};
use crate::policy::{Policy, PolicyEntry};

/// The most runs a sweep may have (a grid, and what a shard line may claim).
pub const MAX_RUNS: usize = 100_000;

/// How runs are dealt to shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dealing {
    /// Run k to shard k mod N + 1.
    Count,
    /// By a hash of the run's name.
    Hash,
}

/// One shard of N.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    /// How runs are dealt.
    pub dealing: Dealing,
    /// Which shard, from 1.
    pub shard: usize,
    /// Of how many.
    pub of: usize,
}

impl Default for Partition {
    /// The whole sweep: shard 1 of 1.
    fn default() -> Partition {
        Partition {
            dealing: Dealing::Count,
            shard: 1,
            of: 1,
        }
    }
}

impl Partition {
    /// `I/N`, `count:I/N` or `hash:I/N`; errors quote the text after `--partition`.
    pub fn parse(text: &str) -> Result<Partition, ExperimentError> {
        let bad = |why: &str| ExperimentError::invalid(format!("--partition {text}: {why}"));
        let (dealing, rest) = match text.split_once(':') {
            Some(("count", rest)) => (Dealing::Count, rest),
            Some(("hash", rest)) => (Dealing::Hash, rest),
            Some((other, _)) => {
                return Err(bad(&format!("`{other}` is neither `count` nor `hash`")));
            }
            None => (Dealing::Count, text),
        };
        let (i, n) = rest
            .split_once('/')
            .ok_or_else(|| bad("expected I/N, e.g. 2/8"))?;
        let (shard, of): (usize, usize) = match (i.trim().parse(), n.trim().parse()) {
            (Ok(i), Ok(n)) => (i, n),
            _ => return Err(bad("I and N must be whole numbers")),
        };
        if of == 0 || shard == 0 || shard > of {
            return Err(bad(&format!("shard must be between 1 and N (N = {of})")));
        }
        Ok(Partition { dealing, shard, of })
    }

    /// The shard (1-based) that run `index` named `label` belongs to.
    pub fn shard_of(dealing: Dealing, of: usize, index: usize, label: &str) -> usize {
        match dealing {
            Dealing::Count => index % of + 1,
            Dealing::Hash => (hash64(label.as_bytes(), 0) % of as u64) as usize + 1,
        }
    }

    /// Whether run `index` named `label` is this shard's.
    pub fn holds(&self, index: usize, label: &str) -> bool {
        Partition::shard_of(self.dealing, self.of, index, label) == self.shard
    }

    /// Which sweep and which run of it `index` is, for a shard's line.
    pub fn id(&self, file: &Path, bytes: &[u8], runs: usize, index: usize) -> SweepId {
        SweepId {
            file: file.display().to_string(),
            hash: format!("{:016x}", hash64(bytes, 0)),
            runs,
            index,
            shard: format!("{}/{}", self.shard, self.of),
            dealing: self.dealing,
        }
    }
}

/// Which sweep and which run a shard's line is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepId {
    /// The sweep file as given.
    pub file: String,
    /// xxh3-64 of the sweep file's bytes, hex.
    pub hash: String,
    /// Runs in the whole sweep.
    pub runs: usize,
    /// This run's position (0-based) in the grid.
    pub index: usize,
    /// `I/N`.
    pub shard: String,
    /// How runs were dealt.
    pub dealing: Dealing,
}

impl SweepId {
    /// What is wrong with this id of a run named `label`, if anything: every field checked
    /// against the others before anything is allocated from them.
    pub fn fault(&self, label: &str) -> Option<String> {
        if !(1..=MAX_RUNS).contains(&self.runs) {
            return Some(format!("`sweep.runs` {} is not 1 to {MAX_RUNS}", self.runs));
        }
        if self.index >= self.runs {
            return Some(format!(
                "`sweep.index` {} is outside the sweep's {} runs",
                self.index, self.runs
            ));
        }
        let Some((i, n)) = self
            .shard
            .split_once('/')
            .and_then(|(i, n)| Some((i.parse::<usize>().ok()?, n.parse::<usize>().ok()?)))
            .filter(|(i, n)| (1..=*n).contains(i))
        else {
            return Some(format!(
                "`sweep.shard` `{}` is not I/N with 1 <= I <= N",
                self.shard
            ));
        };
        if Partition::shard_of(self.dealing, n, self.index, label) != i {
            return Some(format!(
                "run {} is not dealt to shard {} by {} dealing",
                self.index,
                self.shard,
                match self.dealing {
                    Dealing::Count => "count",
                    Dealing::Hash => "hash",
                }
            ));
        }
        None
    }

    /// `N` of the shard's `I/N`.
    fn shards(&self) -> usize {
        self.shard
            .split_once('/')
            .and_then(|(_, n)| n.parse().ok())
            .unwrap_or(0)
    }
}

/// The runs of a sweep gathered from its shards' lines: each checked to be of one sweep and
/// one partitioning, none twice, none missing.
#[derive(Debug)]
pub struct ShardSet<T> {
    first: Option<(PathBuf, SweepId)>,
    by_index: BTreeMap<usize, (PathBuf, T)>,
}

impl<T> Default for ShardSet<T> {
    fn default() -> ShardSet<T> {
        ShardSet {
            first: None,
            by_index: BTreeMap::new(),
        }
    }
}

impl<T> ShardSet<T> {
    /// Adds `run` (named `label`, with `id`), from line `line` of `path`.
    pub fn add(
        &mut self,
        path: &Path,
        line: usize,
        id: &SweepId,
        label: &str,
        run: T,
    ) -> Result<(), ExperimentError> {
        let at = |what: String| {
            ExperimentError::invalid(format!("{}: line {line}: {what}", path.display()))
        };
        if let Some(fault) = id.fault(label) {
            return Err(at(fault));
        }
        match &self.first {
            None => self.first = Some((path.to_owned(), id.clone())),
            Some((first_path, first)) => {
                let same = first.hash == id.hash
                    && first.runs == id.runs
                    && first.dealing == id.dealing
                    && first.shards() == id.shards();
                if !same {
                    return Err(at(format!(
                        "from another sweep or partitioning than {} ({} of {} runs, {} shards)",
                        first_path.display(),
                        first.file,
                        first.runs,
                        first.shards()
                    )));
                }
            }
        }
        if let Some((earlier, _)) = self.by_index.get(&id.index) {
            return Err(ExperimentError::invalid(format!(
                "run {} (`{label}`) is in both {} and {}: shard {} was given twice",
                id.index,
                earlier.display(),
                path.display(),
                id.shard
            )));
        }
        self.by_index.insert(id.index, (path.to_owned(), run));
        Ok(())
    }

    /// Every run of the sweep, in grid order; an error names the shards or runs missing.
    pub fn finish(self) -> Result<Vec<T>, ExperimentError> {
        let Some((_, id)) = self.first else {
            return Err(ExperimentError::invalid("the shard files hold no runs"));
        };
        let of = id.shards();
        let missing: Vec<usize> = (0..id.runs)
            .filter(|i| !self.by_index.contains_key(i))
            .collect();
        if !missing.is_empty() {
            // Which shards: by dealing, from the indices (hash dealing needs the labels,
            // which a missing run does not have; then say which runs).
            let shards: BTreeSet<usize> = match id.dealing {
                Dealing::Count => missing.iter().map(|i| i % of + 1).collect(),
                Dealing::Hash => BTreeSet::new(),
            };
            let runs: Vec<String> = missing.iter().map(ToString::to_string).collect();
            let which = if shards.is_empty() {
                "a shard is missing".to_owned()
            } else {
                let names: Vec<String> = shards.iter().map(|s| format!("{s}/{of}")).collect();
                format!("shard {} missing", names.join(", "))
            };
            let plural = if runs.len() == 1 { "run" } else { "runs" };
            return Err(ExperimentError::invalid(format!(
                "{}: {which}: no file holds {plural} {} (of {} runs)",
                id.file,
                runs.join(", "),
                id.runs
            )));
        }
        Ok(self.by_index.into_values().map(|(_, run)| run).collect())
    }
}

/// One run of the grid, before it is resolved.
#[derive(Debug, Clone)]
pub struct GridRun {
    /// `key=value, ...` of its grid values.
    pub label: String,
    /// Its grid values.
    pub settings: BTreeMap<String, serde_json::Value>,
    /// Its description, the policy's plugins not yet in it.
    pub experiment: Experiment,
    /// Its policy.
    pub policy: Policy,
}

/// Keys a run's plugins come from, or a replay's own output: a sweep's or a search's
/// candidates take their plugins from `policy` instead.
pub(crate) const PLUGIN_KEYS: [&str; 6] = [
    "policies",
    "matcher",
    "detector",
    "matcher_config",
    "detector_config",
    "requests_out",
];

/// A sweep's or a search's file as a mapping of settings beside its `section`.
pub(crate) fn settings_with(bytes: &[u8], section: &str) -> Result<Mapping, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_owned())?;
    routerlab_core::config::check_nesting(text)?;
    match serde_yaml::from_str(text).map_err(|e| one_line(&e.to_string()))? {
        Value::Mapping(map) => Ok(map),
        _ => Err(format!("expected a mapping of settings with a `{section}`")),
    }
}

/// The runs of the sweep file at `path` holding `bytes`, in grid order.
pub fn expand(path: &Path, bytes: &[u8]) -> Result<Vec<GridRun>, ExperimentError> {
    let at = |what: String| ExperimentError::invalid(format!("{}: {what}", path.display()));
    let mut base = settings_with(bytes, "grid").map_err(at)?;
    let grid = match base.remove("grid") {
        Some(Value::Mapping(grid)) if !grid.is_empty() => grid,
        Some(_) => return Err(at("`grid` must map settings to lists of values".into())),
        None => {
            return Err(at(
                "no `grid`: list the values to sweep, e.g. `grid: {endpoints: [4, 8]}`".into(),
            ));
        }
    };
    let base_policy = base.remove("policy");
    for key in PLUGIN_KEYS {
        if base.contains_key(key) || grid.contains_key(key) {
            return Err(at(format!(
                "`{key}` has no place in a sweep: a run's plugins come from `policy` (in the grid or beside it)"
            )));
        }
    }
    let dir = path.parent().map(Path::to_owned).unwrap_or_default();
    let mut axes: Vec<(String, Vec<Value>)> = Vec::new();
    for (key, values) in grid {
        let Value::String(key) = key else {
            return Err(at("grid keys are setting names".into()));
        };
        let Value::Sequence(values) = values else {
            return Err(at(format!("grid `{key}`: expected a list of values")));
        };
        if values.is_empty() {
            return Err(at(format!(
                "grid `{key}`: the list is empty, so the sweep has no runs"
            )));
        }
        axes.push((key, values));
    }
    if base_policy.is_none() && !axes.iter().any(|(k, _)| k == "policy") {
        return Err(at(
            "no policy: put `policy` in the grid (or one `policy` beside it)".into(),
        ));
    }
    let count = axes
        .iter()
        .try_fold(1usize, |n, (_, v)| n.checked_mul(v.len()));
    let Some(count) = count.filter(|n| *n <= MAX_RUNS) else {
        return Err(at("the grid has more than 100,000 runs".into()));
    };
    let mut runs = Vec::with_capacity(count);
    for index in 0..count {
        // The odometer: the last axis turns fastest.
        let mut rest = index;
        let mut choice = vec![0; axes.len()];
        for (slot, (_, values)) in choice.iter_mut().zip(&axes).rev() {
            *slot = rest % values.len();
            rest /= values.len();
        }
        let mut values = Mapping::new();
        let mut policy = base_policy.clone();
        let mut label_parts = Vec::new();
        let mut settings = BTreeMap::new();
        for ((key, axis), pick) in axes.iter().zip(&choice) {
            let value = axis[*pick].clone();
            label_parts.push(format!("{key}={}", compact(&value)));
            settings.insert(
                key.clone(),
                serde_json::to_value(&value).unwrap_or_default(),
            );
            if key == "policy" {
                policy = Some(value);
            } else {
                values.insert(Value::String(key.clone()), value);
            }
        }
        let label = label_parts.join(", ");
        let in_run = |what: String| at(format!("run {index} ({label}): {what}"));
        let experiment = Layers::new()
            .over(base.clone())
            .over(values)
            .paths_from(&dir)
            .experiment()
            .map_err(|e| in_run(e.to_string()))?;
        let policy: PolicyEntry = serde_yaml::from_value(policy.expect("checked above"))
            .map_err(|e| in_run(format!("policy: {}", one_line(&e.to_string()))))?;
        let policy = policy.resolve().map_err(in_run)?;
        runs.push(GridRun {
            label,
            settings,
            experiment,
            policy,
        });
    }
    Ok(runs)
}

/// A grid value as it appears in a run's name (a recommend candidate's too).
pub(crate) fn compact(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".to_owned(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_parse_like_nextest_and_refuse_nonsense() {
        let p = Partition::parse("2/3").unwrap();
        assert_eq!((p.dealing, p.shard, p.of), (Dealing::Count, 2, 3));
        assert_eq!(Partition::parse("hash:1/1").unwrap().dealing, Dealing::Hash);
        for bad in ["0/3", "4/3", "1/0", "x/3", "2", "modulo:1/2"] {
            assert!(Partition::parse(bad).is_err(), "{bad}");
        }
        // Count dealing: every shard gets every N-th run.
        let shards: Vec<usize> = (0..7)
            .map(|i| Partition::shard_of(Dealing::Count, 3, i, ""))
            .collect();
        assert_eq!(shards, [1, 2, 3, 1, 2, 3, 1]);
    }

    #[test]
    fn the_grid_expands_last_key_fastest_with_names_and_merged_engines() {
        let file = b"timing: trace\nengine: {preset: dynamo, max_num_seqs: 64}\ntrace: t.jsonl\nmodel_config: m.json\ngrid:\n  policy: [lcp, 'lcp + num-requests {max_running: 8}']\n  endpoints: [4, 8]\n  engine: [{num_gpu_blocks: 1024}]\n";
        let runs = expand(Path::new("dir/sweep.yaml"), file).unwrap();
        let labels: Vec<&str> = runs.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "policy=lcp, endpoints=4, engine={\"num_gpu_blocks\":1024}",
                "policy=lcp, endpoints=8, engine={\"num_gpu_blocks\":1024}",
                "policy=lcp + num-requests {max_running: 8}, endpoints=4, engine={\"num_gpu_blocks\":1024}",
                "policy=lcp + num-requests {max_running: 8}, endpoints=8, engine={\"num_gpu_blocks\":1024}",
            ]
        );
        let engine = runs[0].experiment.engine.clone().unwrap();
        assert_eq!(
            engine.max_num_seqs,
            Some(64),
            "the file's engine stays under the grid's"
        );
        assert_eq!(engine.num_gpu_blocks, Some(1024));
        assert_eq!(
            runs[0].experiment.trace.as_deref(),
            Some(Path::new("dir/t.jsonl"))
        );
        assert_eq!(
            runs[0].experiment.model_config.as_deref(),
            Some(Path::new("dir/m.json")),
            "every path of the file is taken from its directory"
        );
        assert_eq!(runs[3].policy.detector.as_deref(), Some("num-requests"));
    }

    #[test]
    fn bad_sweep_files_say_what_is_wrong() {
        let err = |text: &str| {
            expand(Path::new("s.yaml"), text.as_bytes())
                .err()
                .unwrap()
                .to_string()
        };
        assert!(err("trace: t\n").contains("no `grid`"));
        assert!(err("grid: {endpoints: [4]}\n").contains("no policy"));
        assert!(err("grid: {policy: [lcp], endpoints: []}\n").contains("the list is empty"));
        assert!(err("matcher: lcp\ngrid: {endpoints: [4]}\n").contains("`matcher` has no place"));
        let e = err("grid: {policy: [lcp], endpoints: [4], speedup: [fast]}\n");
        assert!(
            e.starts_with("s.yaml: run 0 (policy=lcp, endpoints=4, speedup=fast): "),
            "{e}"
        );
    }

    #[test]
    fn shard_sets_refuse_doubles_strangers_and_gaps() {
        let id = |index, shard: &str| SweepId {
            file: "s.yaml".into(),
            hash: "00".into(),
            runs: 3,
            index,
            shard: shard.into(),
            dealing: Dealing::Count,
        };
        let p = Path::new("a.jsonl");
        let mut set = ShardSet::default();
        set.add(p, 1, &id(0, "1/2"), "x", 'a').unwrap();
        set.add(p, 2, &id(2, "1/2"), "z", 'c').unwrap();
        let twice = set.add(p, 3, &id(0, "1/2"), "x", 'a').unwrap_err();
        assert!(
            twice.to_string().contains("shard 1/2 was given twice"),
            "{twice}"
        );
        let wrong = set.add(p, 3, &id(1, "1/2"), "y", 'b').unwrap_err();
        assert_eq!(
            wrong.to_string(),
            "a.jsonl: line 3: run 1 is not dealt to shard 1/2 by count dealing"
        );
        let missing = set.finish().unwrap_err().to_string();
        assert_eq!(
            missing,
            "s.yaml: shard 2/2 missing: no file holds run 1 (of 3 runs)"
        );
    }
}
