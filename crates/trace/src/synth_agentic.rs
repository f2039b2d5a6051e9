//! A seeded generator of agent plays in Dynamo's `agentic_mooncake` v2 format.
//!
//! Each play is one agent job. Its main session starts at the play's arrival (plays arrive
//! as a Poisson process) with a shared system prompt and a task of its own; each turn
//! after the first waits for the previous one to complete plus a tool's run time
//! (exponential), and its prompt is the previous one plus that turn's answer and the tool's
//! output (the context grows turn by turn; the blocks it had stay its prefix). After a main
//! turn the agent may fan out: with `fanout_probability`, 2 to `fanout_max` sub-agents
//! spawn when the turn completes, each a session of `sub_turns` turns on the parent's
//! context plus a sub-task; the next main turn then joins them all.

use std::io::{self, Write};

use routerlab_core::SeededRng;

/// Tokens per hash id of the generated traces (the header's `block_size`).
pub const AGENTIC_BLOCK: u64 = 64;

/// The generator's knobs (`routerlab gen-trace --format agentic`).
#[derive(Debug, Clone, PartialEq)]
pub struct AgenticWorkload {
    /// Agent jobs.
    pub plays: u64,
    /// Plays started per second (Poisson).
    pub play_rate: f64,
    /// Mean main-session turns of a play (each play draws 1 to twice this, uniformly).
    pub turns: u64,
    /// Mean tool run time between dependent turns, ms (exponential).
    pub tool_ms: f64,
    /// Probability that a main turn fans out to sub-agents.
    pub fanout_probability: f64,
    /// Most sub-agents of one fan-out (at least 2).
    pub fanout_max: u64,
    /// Turns of each sub-agent.
    pub sub_turns: u64,
    /// Tokens of the system prompt every play shares.
    pub system_tokens: u64,
    /// Tokens of a play's task (and of a sub-agent's sub-task).
    pub task_tokens: u64,
    /// Tokens a tool's output adds to the context per turn.
    pub growth_tokens: u64,
    /// Mean output tokens of a turn (each draws half to one and a half of it).
    pub output_tokens: u64,
    /// Seed.
    pub seed: u64,
}

impl Default for AgenticWorkload {
    fn default() -> Self {
        AgenticWorkload {
            plays: 40,
            play_rate: 0.5,
            turns: 6,
            tool_ms: 2000.0,
            fanout_probability: 0.2,
            fanout_max: 3,
            sub_turns: 2,
            system_tokens: 2048,
            task_tokens: 512,
            growth_tokens: 768,
            output_tokens: 256,
            seed: 0,
        }
    }
}

impl AgenticWorkload {
    /// Checks the knobs; the message names the flag.
    pub fn validate(&self) -> Result<(), String> {
        if self.plays == 0 || self.plays > 1_000_000 {
            return Err("--plays must be from 1 to 1000000".into());
        }
        if !(self.play_rate.is_finite() && self.play_rate > 0.0) {
            return Err("--play-rate must be a positive number".into());
        }
        if !(1..=1000).contains(&self.turns) || self.sub_turns > 1000 {
            return Err("--turns must be from 1 to 1000 and --sub-turns at most 1000".into());
        }
        if !(self.tool_ms.is_finite() && (0.0..=3_600_000.0).contains(&self.tool_ms)) {
            return Err("--tool-ms must be from 0 to an hour".into());
        }
        if !(0.0..=1.0).contains(&self.fanout_probability) {
            return Err("--fanout-probability must be within 0..=1".into());
        }
        if !(2..=64).contains(&self.fanout_max) {
            return Err("--fanout-max must be from 2 to 64".into());
        }
        for (flag, value) in [
            ("--system-tokens", self.system_tokens),
            ("--task-tokens", self.task_tokens),
            ("--growth-tokens", self.growth_tokens),
            ("--output-tokens", self.output_tokens),
        ] {
            if value > 1 << 20 {
                return Err(format!("{flag} must be at most 1048576"));
            }
        }
        if self.task_tokens == 0 || self.output_tokens == 0 {
            return Err("--task-tokens and --output-tokens must be at least 1".into());
        }
        Ok(())
    }
}

/// A context: its length in tokens and the hash ids of its blocks.
#[derive(Clone)]
struct Context {
    tokens: u64,
    ids: Vec<u64>,
}

impl Context {
    /// `self` followed by `tokens` new ones: its full blocks stay, the rest is new.
    fn grown(&self, tokens: u64, next_id: &mut u64) -> Context {
        let mut ids = self.ids.clone();
        ids.truncate((self.tokens / AGENTIC_BLOCK) as usize);
        let total = self.tokens + tokens;
        while (ids.len() as u64) < total.div_ceil(AGENTIC_BLOCK) {
            ids.push(*next_id);
            *next_id += 1;
        }
        Context { tokens: total, ids }
    }
}

struct Writer<'w, W: Write> {
    out: &'w mut W,
    line: String,
}

impl<W: Write> Writer<'_, W> {
    #[allow(clippy::too_many_arguments)]
    fn row(
        &mut self,
        id: &str,
        play: &str,
        session: &str,
        context: &Context,
        output: u64,
        not_before_ms: f64,
        deps: &[(String, &str, &str, f64)],
    ) -> io::Result<()> {
        use std::fmt::Write as _;
        let line = &mut self.line;
        line.clear();
        let _ = write!(
            line,
            "{{\"request_id\":\"{id}\",\"play_id\":\"{play}\",\"session_id\":\"{session}\",\
             \"model\":\"routerlab-agent\",\"input_length\":{},\"output_length\":{output},\
             \"hash_ids\":[",
            context.tokens
        );
        for (i, hash) in context.ids.iter().enumerate() {
            let _ = write!(line, "{}{hash}", if i > 0 { "," } else { "" });
        }
        let _ = write!(
            line,
            "],\"not_before_ms\":{not_before_ms:.3},\"dependencies\":["
        );
        for (i, (on, trigger, relation, delay)) in deps.iter().enumerate() {
            let _ = write!(
                line,
                "{}{{\"request_id\":\"{on}\",\"trigger\":\"{trigger}\",\"delay_ms\":{delay:.3},\"relation\":\"{relation}\"}}",
                if i > 0 { "," } else { "" }
            );
        }
        line.push_str("]}\n");
        self.out.write_all(line.as_bytes())
    }
}

/// Writes the header and the plays of `workload`, each request after those it depends on.
pub fn write_agentic(workload: &AgenticWorkload, out: &mut impl Write) -> io::Result<()> {
    let mut rng = SeededRng::new(workload.seed);
    writeln!(
        out,
        "{{\"schema\":\"dynamo.agentic_mooncake\",\"version\":2,\"block_size\":{AGENTIC_BLOCK},\
         \"hash_id_scope\":\"local\",\"source\":{{\"format\":\"routerlab-gen-trace\",\
         \"digest\":\"seed-{}\"}}}}",
        workload.seed
    )?;
    let system = Context {
        tokens: 0,
        ids: Vec::new(),
    };
    let mut next_id = 0u64;
    let system = system.grown(workload.system_tokens, &mut next_id);
    let mut w = Writer {
        out,
        line: String::new(),
    };
    let mut clock_ms = 0.0f64;
    let draw_exp = |rng: &mut SeededRng, mean: f64| -(1.0 - rng.unit_f64()).ln() * mean;
    for p in 0..workload.plays {
        clock_ms += draw_exp(&mut rng, 1000.0 / workload.play_rate);
        let start = clock_ms;
        let play = format!("p{p}");
        let main = format!("p{p}-main");
        let output = |rng: &mut SeededRng| {
            let half = (workload.output_tokens / 2).max(1);
            half + rng.below(workload.output_tokens + 1)
        };
        let turns = 1 + rng.below(2 * workload.turns);
        let mut context = system.grown(workload.task_tokens, &mut next_id);
        // What the next main turn waits for: (request, trigger, relation, delay).
        let mut waits: Vec<(String, &str, &str, f64)> = Vec::new();
        for t in 0..turns {
            let id = format!("p{p}-m{t}");
            let answer = output(&mut rng);
            w.row(&id, &play, &main, &context, answer, start, &waits)?;
            waits.clear();
            let mut grown = workload.growth_tokens + answer;
            let last = t + 1 == turns;
            if !last && rng.unit_f64() < workload.fanout_probability {
                let width = 2 + rng.below(workload.fanout_max - 1);
                for j in 0..width {
                    let session = format!("p{p}-m{t}-sub{j}");
                    let mut sub = context.grown(answer + workload.task_tokens, &mut next_id);
                    let mut on = (id.clone(), "completion", "spawn", 0.0);
                    for k in 0..workload.sub_turns.max(1) {
                        let sub_id = format!("{session}-t{k}");
                        let sub_answer = output(&mut rng);
                        on.3 = if k == 0 {
                            0.0
                        } else {
                            draw_exp(&mut rng, workload.tool_ms)
                        };
                        w.row(
                            &sub_id,
                            &play,
                            &session,
                            &sub,
                            sub_answer,
                            start,
                            &[on.clone()],
                        )?;
                        sub = sub.grown(sub_answer + workload.growth_tokens, &mut next_id);
                        on = (sub_id, "completion", "sequence", 0.0);
                    }
                    // The parent reads each sub-agent's result.
                    grown += workload.task_tokens;
                    waits.push((on.0, "completion", "join", 0.0));
                }
            }
            waits.push((
                id,
                "completion",
                "sequence",
                draw_exp(&mut rng, workload.tool_ms),
            ));
            context = context.grown(grown, &mut next_id);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plays_are_seeded_and_contexts_keep_their_prefix() {
        let small = AgenticWorkload {
            plays: 5,
            fanout_probability: 0.5,
            ..AgenticWorkload::default()
        };
        let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
        write_agentic(&small, &mut a).unwrap();
        write_agentic(&small, &mut b).unwrap();
        write_agentic(&AgenticWorkload { seed: 1, ..small }, &mut c).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        let text = String::from_utf8(a).unwrap();
        let rows: Vec<serde_json::Value> = text
            .lines()
            .skip(1)
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let by_id: std::collections::HashMap<&str, &serde_json::Value> = rows
            .iter()
            .map(|r| (r["request_id"].as_str().unwrap(), r))
            .collect();
        for row in &rows {
            let ids = row["hash_ids"].as_array().unwrap();
            let len = row["input_length"].as_u64().unwrap();
            assert_eq!(ids.len() as u64, len.div_ceil(AGENTIC_BLOCK));
            // Every play shares the system prompt's 32 blocks.
            assert_eq!(ids[0], 0);
            for dep in row["dependencies"].as_array().unwrap() {
                let on = by_id[dep["request_id"].as_str().unwrap()];
                assert_eq!(on["play_id"], row["play_id"]);
                // A turn after another holds the other's full blocks as its prefix.
                let before = on["hash_ids"].as_array().unwrap();
                let full = (on["input_length"].as_u64().unwrap() / AGENTIC_BLOCK) as usize;
                if dep["relation"] == "sequence" || dep["relation"] == "spawn" {
                    assert_eq!(&ids[..full], &before[..full], "{row}");
                }
            }
        }
        assert!(rows.iter().any(|r| {
            r["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .any(|d| d["relation"] == "join")
        }));
    }
}
