//! One vocabulary across commands, checked from clap's own definitions: a long flag has one
//! value name and one type wherever it appears (STABILITY.md keeps the table of names), and
//! a command's help groups its flags by concern.

use std::collections::BTreeMap;

/// What a flag takes, as a user sees it: its value names (none for a switch) and the type
/// its value is parsed into.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Shape {
    values: String,
    parser: String,
}

/// Every long flag whose shape differs between two commands of `cli` (subcommands at any
/// depth, hidden ones too), one line each: the flag, then each shape with the commands
/// that give it.
pub fn clashes(cli: &clap::Command) -> Vec<String> {
    let mut seen: BTreeMap<String, Vec<(Shape, String)>> = BTreeMap::new();
    let mut stack: Vec<(String, &clap::Command)> = vec![(String::new(), cli)];
    while let Some((path, command)) = stack.pop() {
        for arg in command.get_arguments() {
            let Some(long) = arg.get_long() else {
                continue;
            };
            if matches!(long, "help" | "version") {
                continue;
            }
            let values = match arg.get_action().takes_values() {
                true => arg
                    .get_value_names()
                    .map(|names| {
                        names
                            .iter()
                            .map(|n| n.as_str())
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .unwrap_or_else(|| arg.get_id().as_str().to_uppercase()),
                false => String::new(),
            };
            let shape = Shape {
                values,
                // The type's name (in debug builds; an opaque id otherwise): last segment.
                parser: format!("{:?}", arg.get_value_parser().type_id())
                    .rsplit("::")
                    .next()
                    .unwrap_or_default()
                    .to_owned(),
            };
            seen.entry(long.to_owned())
                .or_default()
                .push((shape, path.trim().to_owned()));
        }
        for sub in command.get_subcommands() {
            stack.push((format!("{path} {}", sub.get_name()), sub));
        }
    }
    let mut out = Vec::new();
    for (long, uses) in seen {
        let mut shapes: Vec<(Shape, Vec<String>)> = Vec::new();
        for (shape, command) in uses {
            match shapes.iter_mut().find(|(s, _)| *s == shape) {
                Some((_, commands)) => commands.push(command),
                None => shapes.push((shape, vec![command])),
            }
        }
        if shapes.len() > 1 {
            let said: Vec<String> = shapes
                .iter()
                .map(|(s, commands)| {
                    let value = match s.values.as_str() {
                        "" => "a switch".to_owned(),
                        v => format!("{v} ({})", s.parser),
                    };
                    format!("{value} in {}", commands.join(", "))
                })
                .collect();
            out.push(format!("--{long}: {}", said.join("; ")));
        }
    }
    out
}

/// The most flags a command leaves under clap's plain "Options" heading; the rest are
/// grouped by concern.
const MOST_UNGROUPED: usize = 5;

/// The visible flags under no help heading of every command (at any depth) that leaves
/// more than [`MOST_UNGROUPED`] of them there, one line each.
pub fn ungrouped(cli: &clap::Command) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack: Vec<(String, &clap::Command)> = vec![(String::new(), cli)];
    while let Some((path, command)) = stack.pop() {
        let flags: Vec<&clap::Arg> = command
            .get_arguments()
            .filter(|a| !a.is_hide_set() && !a.is_positional())
            .filter(|a| !matches!(a.get_long(), Some("help" | "version")))
            .filter(|a| a.get_help_heading().is_none())
            .collect();
        if flags.len() > MOST_UNGROUPED {
            for flag in flags {
                out.push(format!(
                    "{}: --{} has no help heading",
                    path.trim(),
                    flag.get_long().unwrap_or(flag.get_id().as_str())
                ));
            }
        }
        for sub in command.get_subcommands() {
            stack.push((format!("{path} {}", sub.get_name()), sub));
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use clap::{Arg, ArgAction, Command, CommandFactory};

    #[test]
    fn one_long_flag_has_one_value_name_and_one_type_in_every_command() {
        let clashes = super::clashes(&crate::Cli::command());
        assert!(clashes.is_empty(), "{}", clashes.join("\n"));
    }

    #[test]
    fn every_flag_of_a_long_help_is_under_a_heading() {
        let ungrouped = super::ungrouped(&crate::Cli::command());
        assert!(ungrouped.is_empty(), "{}", ungrouped.join("\n"));
    }

    #[test]
    fn a_flag_left_out_of_the_headings_is_found() {
        let flag = |name: &'static str| Arg::new(name).long(name).action(ArgAction::SetTrue);
        let grouped = |name: &'static str| flag(name).help_heading("Group");
        let cli = Command::new("planted")
            .subcommand(Command::new("few").args([
                flag("a"),
                flag("b"),
                flag("c"),
                flag("d"),
                flag("e"),
                grouped("f"),
            ]))
            .subcommand(Command::new("many").args([
                flag("a"),
                flag("b"),
                flag("c"),
                flag("d"),
                flag("e"),
                flag("f"),
                grouped("g"),
            ]));
        let ungrouped = super::ungrouped(&cli);
        assert_eq!(ungrouped.len(), 6, "{ungrouped:?}");
        assert!(
            ungrouped.iter().all(|l| l.starts_with("many: --")),
            "{ungrouped:?}"
        );
    }

    /// Each renamed flag's old spelling is still read, as the new name (STABILITY.md lists
    /// them, for one minor version).
    #[test]
    fn old_spellings_still_work_as_hidden_aliases() {
        use clap::Parser;
        let parse = |args: &[&str]| {
            crate::Cli::try_parse_from([&["routerlab"], args].concat())
                .unwrap_or_else(|e| panic!("{args:?}: {e}"))
                .command
        };
        let crate::Command::Engine(engine) = parse(&[
            "engine",
            "--speedup",
            "7",
            "--kv-events",
            "tcp://127.0.0.1:0",
            "--kv-events-replay",
            "tcp://127.0.0.1:0",
        ]) else {
            unreachable!()
        };
        assert_eq!(engine.model_speedup, 7.0);
        assert!(engine.publish_kv_events.is_some() && engine.publish_kv_events_replay.is_some());
        let crate::Command::GenTrace(gen_trace) = parse(&["gen-trace", "--format", "agentic"])
        else {
            unreachable!()
        };
        assert_eq!(
            gen_trace.trace_format,
            routerlab_trace::TraceFormat::AgenticMooncake
        );
        let crate::Command::Calibrate(calibrate) =
            parse(&["calibrate", "run", "--block-size", "32"])
        else {
            unreachable!()
        };
        assert_eq!(calibrate.run_args.kv_block_tokens, 32);
        let help = crate::Cli::command()
            .find_subcommand_mut("engine")
            .expect("engine")
            .render_long_help()
            .to_string();
        let listed = |flag: &str| help.lines().any(|l| l.trim_start().starts_with(flag));
        assert!(
            !listed("--speedup ") && listed("--model-speedup "),
            "{help}"
        );
    }

    /// The check finds a planted clash of either kind, and passes a name used alike.
    #[test]
    fn a_planted_clash_is_found() {
        let cli = Command::new("planted")
            .subcommand(
                Command::new("a")
                    .arg(Arg::new("size").long("size").value_name("BYTES"))
                    .arg(
                        Arg::new("n")
                            .long("n")
                            .value_name("N")
                            .value_parser(clap::value_parser!(u64)),
                    )
                    .arg(Arg::new("same").long("same").value_name("X")),
            )
            .subcommand(
                Command::new("b")
                    .arg(Arg::new("size").long("size").value_name("TOKENS"))
                    .arg(
                        Arg::new("n")
                            .long("n")
                            .value_name("N")
                            .value_parser(clap::value_parser!(f64)),
                    )
                    .arg(Arg::new("same").long("same").value_name("X")),
            )
            .subcommand(
                Command::new("c").arg(Arg::new("size").long("size").action(ArgAction::SetTrue)),
            );
        let clashes = super::clashes(&cli);
        assert_eq!(clashes.len(), 2, "{clashes:?}");
        let (n, size) = (&clashes[0], &clashes[1]);
        assert!(n.starts_with("--n: ") && n.contains("N (u64) in a"), "{n}");
        assert!(n.contains("N (f64) in b"), "{n}");
        assert!(
            size.starts_with("--size: ") && size.contains("BYTES (String) in a"),
            "{size}"
        );
        assert!(
            size.contains("TOKENS (String) in b") && size.contains("a switch in c"),
            "{size}"
        );
    }
}
