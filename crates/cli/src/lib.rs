//! routerlab-cli: the `routerlab` command line, and the only crate that knows about flags.
//!
//! The flow is the same for every command: clap parses [`opts`] (one type that is both the
//! flags and the experiment file), [`spec`] resolves them into a plain, checked run
//! specification with no I/O, a module of [`cmd`] runs it over the library crates, and
//! [`exit`] turns whatever failed into one line on stderr and an exit code, in one place.

#![allow(clippy::print_stdout)]

pub mod cmd;
pub mod exit;
pub mod opts;
pub mod policy;
pub mod progress;
pub mod spec;

use std::process::ExitCode;

use clap::Parser;

use crate::opts::{Cli, Command};

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
        Command::Snapshot(args) => cmd::snapshot::run(*args),
        Command::Serve(args) => cmd::live::serve(*args),
        Command::Engine(args) => cmd::live::engine(args),
        Command::Drive(args) => cmd::live::drive(*args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("error: {failure}");
            ExitCode::from(failure.exit_code())
        }
    }
}
