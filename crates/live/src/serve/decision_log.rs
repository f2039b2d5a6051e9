//! `serve --decision-log PATH`: a JSON line per routed request
//! ([`routerlab_trace::decision_log`]), written when the request is done. What the router
//! saw and chose is kept from the decision until then, for at most [`MAX_PENDING`] requests
//! at once (the oldest past it is written as `left`). The file grows to its size limit,
//! then moves to `PATH.1` (the one there to `PATH.2`, and so on, the oldest dropped) and a
//! new one starts. The log never writes over a file it did not make: `PATH` must not exist.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use routerlab_policy_kit::LruMap;
use routerlab_trace::decision_log::{Candidate, DecisionRecord, LOG_TAG};

use super::routed::Routed;

/// Requests decided and not yet done that the log keeps at once.
pub const MAX_PENDING: usize = 65_536;

/// Where the log goes and how much of it is kept.
#[derive(Debug, Clone)]
pub struct DecisionLogSettings {
    /// The log file.
    pub path: PathBuf,
    /// The size at which it moves to `PATH.1` and a new one starts, bytes.
    pub max_bytes: u64,
    /// Older files kept (`PATH.1` … `PATH.K`).
    pub keep: u32,
    /// Whether each line carries the prompt's text too (hashes only by default).
    pub prompts: bool,
}

/// What the router saw and chose for a request not yet done.
#[derive(Default)]
struct Pending {
    record: DecisionRecord,
    arrival_ns: u64,
}

/// The open log.
pub(super) struct DecisionLog {
    settings: DecisionLogSettings,
    file: BufWriter<File>,
    written: u64,
    pending: LruMap<Pending>,
    policy: String,
}

fn create(path: &std::path::Path) -> std::io::Result<BufWriter<File>> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    Ok(BufWriter::new(file))
}

impl DecisionLog {
    /// Starts the log of `policy`'s decisions; an existing `PATH` is refused.
    pub(super) fn open(settings: DecisionLogSettings, policy: &str) -> Result<DecisionLog, String> {
        // Its rotated files are its own: none may be there already.
        for k in 1..=settings.keep {
            let older = PathBuf::from(format!("{}.{k}", settings.path.display()));
            if older.exists() {
                return Err(format!(
                    "--decision-log {}: {} exists, and rotating the log would write over it",
                    settings.path.display(),
                    older.display()
                ));
            }
        }
        let file = create(&settings.path).map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => format!(
                "--decision-log {}: exists; the log never writes over a file (move it, or name a new one)",
                settings.path.display()
            ),
            _ => format!("--decision-log {}: {e}", settings.path.display()),
        })?;
        Ok(DecisionLog {
            settings,
            file,
            written: 0,
            pending: LruMap::default(),
            policy: policy.to_owned(),
        })
    }

    /// The router chose `endpoint` for `routed` from `candidates`, with chance
    /// `propensity` when it chose at random.
    pub(super) fn decided(
        &mut self,
        routed: &Routed,
        block_bytes: u32,
        candidates: Vec<Candidate>,
        endpoint: &str,
        propensity: Option<f64>,
    ) {
        if self.pending.len() >= MAX_PENDING
            && let Some((_, oldest)) = self.pending.pop_oldest()
        {
            let end = oldest.arrival_ns;
            self.write(oldest, "left", None, end, 0);
        }
        let record = DecisionRecord {
            log: LOG_TAG.to_owned(),
            seq: routed.seq,
            arrival_s: routed.arrival_ns as f64 / 1e9,
            session: routed.session,
            parent: routed.parent,
            prompt_tokens: routed.tokens(),
            block_bytes,
            blocks: routed.hashes.clone(),
            prompt: (self.settings.prompts)
                .then(|| String::from_utf8_lossy(&routed.prompt).into_owned()),
            max_tokens: routed.output_tokens,
            policy: self.policy.clone(),
            candidates,
            endpoint: endpoint.to_owned(),
            propensity,
            status: String::new(),
            output_tokens: 0,
            ttft_ms: None,
            tpot_ms: None,
            e2e_ms: 0.0,
        };
        let arrival_ns = routed.arrival_ns;
        self.pending.remove(routed.seq);
        self.pending
            .touch_or_insert_with(routed.seq, || Pending { record, arrival_ns });
    }

    /// The request `seq` went to `endpoint` after all (a retry).
    pub(super) fn sent(&mut self, seq: u64, endpoint: &str) {
        if let Some(pending) = self.pending.touch(seq)
            && pending.record.endpoint != endpoint
        {
            pending.record.endpoint = endpoint.to_owned();
            // Not the policy's choice: the chance it had is not this endpoint's.
            pending.record.propensity = None;
        }
    }

    /// The request `seq` is done at `end_ns`: `status`, its first bytes at `first_ns`,
    /// `events` server-sent events when streamed.
    pub(super) fn done(
        &mut self,
        seq: u64,
        status: &str,
        first_ns: Option<u64>,
        end_ns: u64,
        events: Option<u64>,
    ) {
        let Some(pending) = self.pending.remove(seq) else {
            return;
        };
        let output = pending.record.max_tokens.or(events).unwrap_or(0);
        self.write(pending, status, first_ns, end_ns, output);
    }

    fn write(
        &mut self,
        pending: Pending,
        status: &str,
        first_ns: Option<u64>,
        end_ns: u64,
        output: u64,
    ) {
        let Pending {
            mut record,
            arrival_ns,
        } = pending;
        let ms = |ns: u64| (ns.saturating_sub(arrival_ns)) as f64 / 1e6;
        record.status = status.to_owned();
        record.output_tokens = output;
        record.ttft_ms = first_ns.map(ms);
        record.e2e_ms = ms(end_ns);
        record.tpot_ms = match (first_ns, output) {
            (Some(first), n) if n >= 2 => {
                Some(end_ns.saturating_sub(first) as f64 / 1e6 / (n - 1) as f64)
            }
            _ => None,
        };
        let Ok(mut line) = serde_json::to_string(&record) else {
            return;
        };
        line.push('\n');
        if self.written > 0 && self.written + line.len() as u64 > self.settings.max_bytes {
            self.rotate();
        }
        if self
            .file
            .write_all(line.as_bytes())
            .and_then(|()| self.file.flush())
            .is_ok()
        {
            self.written += line.len() as u64;
        } else {
            eprintln!(
                "serve: --decision-log {}: a line could not be written",
                self.settings.path.display()
            );
        }
    }

    /// Moves the log to `PATH.1` (older ones up one, the oldest dropped) and starts anew.
    fn rotate(&mut self) {
        let path = &self.settings.path;
        let numbered = |k: u32| PathBuf::from(format!("{}.{k}", path.display()));
        let _ = self.file.flush();
        if self.settings.keep == 0 {
            let _ = std::fs::remove_file(path);
        } else {
            let _ = std::fs::remove_file(numbered(self.settings.keep));
            for k in (1..self.settings.keep).rev() {
                let _ = std::fs::rename(numbered(k), numbered(k + 1));
            }
            let _ = std::fs::rename(path, numbered(1));
        }
        match create(path) {
            Ok(file) => {
                self.file = file;
                self.written = 0;
            }
            Err(e) => eprintln!(
                "serve: --decision-log {}: cannot start a new file: {e}",
                path.display()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routed(seq: u64) -> Routed {
        Routed {
            seq,
            arrival_ns: 1_000_000 * seq,
            prompt: vec![b'x'; 100],
            tokens: None,
            hashes: vec![seq, 7],
            ids: Vec::new(),
            output_tokens: Some(10),
            session: 0,
            parent: 0,
            phase: routerlab_core::Phase::Whole,
            adapter: None,
            ends_session: false,
        }
    }

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("routerlab-decision-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        for k in ["", ".1", ".2", ".3"] {
            let _ = std::fs::remove_file(format!("{}{k}", path.display()));
        }
        path
    }

    #[test]
    fn a_full_log_moves_up_one_and_the_oldest_beyond_keep_goes() {
        let path = scratch("rotated.jsonl");
        let settings = DecisionLogSettings {
            path: path.clone(),
            max_bytes: 1,
            keep: 2,
            prompts: true,
        };
        let mut log = DecisionLog::open(settings, "random").unwrap();
        for seq in 1..=4 {
            log.decided(&routed(seq), 128, Vec::new(), "a:1", Some(0.5));
            log.done(
                seq,
                "ok",
                Some(seq * 1_000_000 + 500_000),
                seq * 1_000_000 + 2_500_000,
                None,
            );
        }
        let seqs = |suffix: &str| -> Vec<u64> {
            let text = std::fs::read_to_string(format!("{}{suffix}", path.display())).unwrap();
            text.lines()
                .map(|l| serde_json::from_str::<DecisionRecord>(l).unwrap().seq)
                .collect()
        };
        // One line a file: the newest in PATH, the two before in PATH.1 and PATH.2.
        assert_eq!(
            (seqs(""), seqs(".1"), seqs(".2")),
            (vec![4], vec![3], vec![2])
        );
        assert!(!PathBuf::from(format!("{}.3", path.display())).exists());
        let line: DecisionRecord =
            serde_json::from_str(std::fs::read_to_string(&path).unwrap().trim()).unwrap();
        // Arrival at 4 ms, first bytes 0.5 ms later, done 2.5 ms after arriving; 10 tokens.
        assert_eq!(line.ttft_ms, Some(0.5));
        assert_eq!(line.e2e_ms, 2.5);
        assert_eq!(line.tpot_ms, Some(2.0 / 9.0));
        assert_eq!((line.output_tokens, line.status.as_str()), (10, "ok"));
        assert_eq!(line.blocks, [4, 7]);
        // Asked for, the text too.
        assert_eq!(line.prompt.as_deref(), Some("x".repeat(100).as_str()));
    }

    #[test]
    fn an_existing_file_is_never_written_over() {
        let path = scratch("taken.jsonl");
        std::fs::write(&path, b"mine\n").unwrap();
        let settings = DecisionLogSettings {
            path: path.clone(),
            max_bytes: 1 << 20,
            keep: 2,
            prompts: false,
        };
        let Err(e) = DecisionLog::open(settings.clone(), "lcp") else {
            panic!("an existing log file is refused")
        };
        assert!(e.contains("exists"), "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), b"mine\n");
        std::fs::remove_file(&path).unwrap();
        std::fs::write(format!("{}.2", path.display()), b"older\n").unwrap();
        let Err(e) = DecisionLog::open(settings, "lcp") else {
            panic!("a file rotation would overwrite is refused")
        };
        assert!(e.contains(".2 exists"), "{e}");
    }
}
