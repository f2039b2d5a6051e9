//! routerlab-cli: the `routerlab` command line: flags, printing and exit codes.
//!
//! The flow is the same for every command: clap parses the [`Command`] (each command's
//! arguments beside its code in [`cmd`]; the groups of flags that describe a run in
//! [`opts`]), the flags become a layer over the experiment file that
//! `routerlab_experiment` resolves into a checked run, a module of [`cmd`] runs it over
//! the library crates, and [`exit`] turns whatever failed into one line on stderr and an
//! exit code, in one place.

#![allow(clippy::print_stdout)]

pub mod cmd;
pub mod exit;
pub mod opts;
pub mod progress;
#[cfg(test)]
mod vocabulary;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Route LLM requests through routing plugins and measure the result.
#[derive(Parser, Debug)]
#[command(name = "routerlab", version, about, long_about = None)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Replay a trace through a matcher (and optionally a detector) and report statistics.
    Replay(Box<crate::opts::ReplayArgs>),
    /// Replay one trace through several policies and put their statistics side by side.
    Compare(Box<crate::cmd::compare::CompareOpts>),
    /// Run a grid of replays from a sweep file, whole or one shard of it.
    Sweep(crate::cmd::sweep::SweepArgs),
    /// Put the shards of a sweep back together: the whole sweep's table, CSV or plots.
    Merge(crate::cmd::sweep::MergeArgs),
    /// Search fleet shapes, GPUs, policies and their settings for an objective (least cost
    /// at an SLO, goodput per GPU, or a cost front) and rank what was found.
    Recommend(Box<crate::cmd::recommend::RecommendArgs>),
    /// Summarise a trace before routing it: requests, conversations, arrivals, lengths, and
    /// the most prefix reuse any router could realise.
    Inspect(crate::cmd::inspect::InspectArgs),
    /// List every plugin on the search path: name, kind, version, ABI, file.
    Plugins(crate::cmd::plugins::PluginsArgs),
    /// Print a shell completion script, e.g. `routerlab completions bash >
    /// ~/.local/share/bash-completion/completions/routerlab`.
    Completions {
        /// The shell.
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Write a synthetic trace (the prototype's chat workload, or Mooncake format).
    GenTrace(crate::cmd::gen_trace::GenTraceArgs),
    /// Write a replay's report as an insta snapshot, or check it against the stored one.
    Snapshot(Box<crate::cmd::snapshot::SnapshotArgs>),
    /// Fit the engine model to a measured run and write the engine config.
    Calibrate(Box<crate::cmd::calibrate::CalibrateArgs>),
    /// Fit the engine model on measured runs, predict others, and report the errors.
    Validate(Box<crate::cmd::validate::ValidateArgs>),
    /// Route live OpenAI-compatible traffic to engines with the same plugins a replay uses.
    Serve(Box<crate::cmd::live::ServeArgs>),
    /// Run a simulated OpenAI-compatible engine (the replay's engine model, in real time).
    Engine(crate::cmd::live::EngineArgs),
    /// Send a trace's requests to an OpenAI-compatible URL and report what a client measured.
    Drive(Box<crate::cmd::drive::DriveArgs>),
    /// The plugins of `serve --plugin-isolation process`, in a process of their own
    /// (started by `serve`, not by hand).
    #[command(hide = true)]
    PluginHost(Box<crate::cmd::live::PluginHostArgs>),
}

/// Runs the command line; returns the process exit code.
pub fn main() -> ExitCode {
    // A plugin that crashes the process still gets it to say which plugin, call and line.
    routerlab_os::crash::install_fatal_signal_handler();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Replay(opts) => cmd::replay::run(*opts),
        Command::Compare(opts) => cmd::compare::run(*opts),
        Command::Sweep(args) => cmd::sweep::run(args),
        Command::Merge(args) => cmd::sweep::merge(args),
        Command::Recommend(args) => cmd::recommend::run(*args),
        Command::Inspect(args) => cmd::inspect::run(args),
        Command::Plugins(args) => cmd::plugins::run(args),
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command, "routerlab", &mut script);
            cmd::print_stdout(&String::from_utf8_lossy(&script), "the completion script")
        }
        Command::GenTrace(args) => cmd::gen_trace::run(args),
        Command::Calibrate(args) => cmd::calibrate::run(*args),
        Command::Validate(args) => cmd::validate::run(*args),
        Command::Snapshot(args) => cmd::snapshot::run(*args),
        Command::Serve(args) => cmd::live::serve(*args),
        Command::Engine(args) => cmd::live::engine(args),
        Command::Drive(args) => cmd::drive::drive(*args),
        Command::PluginHost(args) => cmd::live::plugin_host(*args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("error: {failure}");
            ExitCode::from(failure.exit_code())
        }
    }
}
