//! `cargo xtask`: the project's automation, in Rust so it runs wherever cargo does.
//!
//! Every task is a thin wrapper over cargo and the `routerlab` binary: `replay`, `compare`,
//! `plugins` and `gen-trace` build the release workspace (so every plugin library sits beside the
//! binary, on its default search path) and then run the tool; `install` puts the binary,
//! the plugins and the header under a prefix; `codegen` regenerates the C header from the
//! Rust ABI; `bench` runs the benchmarks; `ci` is exactly what CI runs.

#![allow(clippy::print_stdout)]

#[cfg(test)]
mod layers;

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};

mod docs;

const USAGE: &str = "\
usage: cargo xtask [-q] <task> [args]

  -q, --quiet        no cargo progress (the default when stderr is not a terminal)

tasks:
  replay ARGS...     build (release) and run `routerlab replay ARGS...`
  compare ARGS...    build (release) and run `routerlab compare ARGS...`
  inspect TRACE      build (release) and run `routerlab inspect TRACE`
  plugins ARGS...    build (release) and list the plugins on the search path
  gen-trace ARGS...  build (release) and run `routerlab gen-trace ARGS...`
  install --prefix DIR [--dist]
                     build (release) and install bin/routerlab, lib/routerlab/ (the
                     built-in plugins) and include/routerlab.h under DIR; --dist links
                     the whole program as one unit (a much longer build, a few % faster)
  codegen [--check]  regenerate include/routerlab.h, docs/reference/cli.md and the
                     examples the README and the guide show
  bench              run the benchmarks (release) and print their numbers
  readme             run every `sh` block of README.md, as a new user would
  fuzz --smoke | --seconds N
                     run each cargo-fuzz target (nightly, cargo-fuzz) for 10 s, or N s
  ci                 what CI runs: checks its prerequisites first and installs what is
                     missing (the MSRV toolchain, nightly with Miri, cargo-fuzz), then fmt,
                     clippy, MSRV check, build, test, Miri, docs, fuzz smoke, readme
";

/// `-q`: cargo's progress hidden even on a terminal.
static QUIET: AtomicBool = AtomicBool::new(false);

/// Whether cargo runs with `--quiet`: asked for, or nobody is watching a terminal.
fn quiet() -> bool {
    quiet_when(
        QUIET.load(Ordering::Relaxed),
        std::io::stderr().is_terminal(),
    )
}

/// The rule of [`quiet`]: progress on a terminal unless `-q`; never into a pipe or a log.
fn quiet_when(asked: bool, terminal: bool) -> bool {
    asked || !terminal
}

/// `["--quiet"]` when [`quiet`], else nothing: spliced into cargo's arguments.
fn quiet_flag() -> &'static [&'static str] {
    if quiet() { &["--quiet"] } else { &[] }
}

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == "-q" || a == "--quiet") {
        QUIET.store(true, Ordering::Relaxed);
        args.remove(0);
    }
    let Some(task) = args.first() else {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    };
    let rest = &args[1..];
    let result = match task.as_str() {
        "replay" | "compare" | "inspect" | "plugins" | "gen-trace" => run_tool(task, rest),
        "install" => install(rest),
        "codegen" => codegen(rest.iter().any(|a| a == "--check")),
        "bench" => bench(rest),
        "ci" => ci(),
        "readme" => readme(rest),
        "fuzz" => fuzz(rest),
        "-h" | "--help" | "help" => {
            print!("{USAGE}");
            Ok(())
        }
        other => Err(format!("unknown task `{other}`\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_owned()
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(root());
    not_incremental_in_ci(&mut cmd);
    cmd
}

/// `cargo` by name (not `$CARGO`), so a `+toolchain` first argument reaches rustup.
fn cargo_bare() -> Command {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(root());
    not_incremental_in_ci(&mut cmd);
    cmd
}

/// On a CI machine (`CI` set) a clone is built once, so incremental state would only take
/// disk: several GB of `target/debug/incremental` for the test build alone.
fn not_incremental_in_ci(cmd: &mut Command) {
    if std::env::var_os("CI").is_some() {
        cmd.env("CARGO_INCREMENTAL", "0");
    }
}

fn run(mut cmd: Command) -> Result<(), String> {
    let shown = format!("{cmd:?}");
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{shown} failed ({status})"))
    }
}

/// What every task that runs the tool builds (a test holds the README to the same).
const RELEASE_BUILD: [&str; 3] = ["build", "--release", "--workspace"];

/// The feature that routing on engines' KV events needs (ZeroMQ, tokenizers): left out of
/// the default build, put into what `install` installs.
const KV_EVENTS: &str = "routerlab-cli/kv-events";

/// `cargo build --release --workspace`, exactly the README's build command: the same
/// packages selected means the same features unified, so switching between the two
/// rebuilds nothing.
fn build_release() -> Result<(), String> {
    let exe = format!("routerlab{}", std::env::consts::EXE_SUFFIX);
    if !root().join("target/release").join(exe).exists() {
        // On stderr, with cargo's own lines: stdout is the tool's report.
        eprintln!(
            "xtask: the first build compiles routerlab and its plugins once ({FIRST_BUILD} on 2 cores); later runs start at once"
        );
    }
    let mut cmd = cargo();
    cmd.args(RELEASE_BUILD);
    cmd.args(quiet_flag());
    run(cmd)
}

/// How long the first release build takes on a 2-core machine, as the notice says it
/// (BENCHMARKS.md has the measurement and its command).
const FIRST_BUILD: &str = "about 3 minutes";

/// `install --prefix DIR`: the release binary to `DIR/bin`, every built-in plugin library
/// to `DIR/lib/routerlab` (where the binary looks, see `routerlab_host::discovery`), the C
/// header to `DIR/include`. Each file is copied beside its name and renamed into place.
fn install(args: &[String]) -> Result<(), String> {
    let usage = "usage: cargo xtask install --prefix DIR [--dist]";
    let (prefix, dist) = match args {
        [flag, dir] if flag == "--prefix" => (PathBuf::from(dir), false),
        [flag, dir, d] if flag == "--prefix" && d == "--dist" => (PathBuf::from(dir), true),
        _ => return Err(usage.into()),
    };
    // The release build the other tasks share, with the KV-events feature (its other
    // crates are reused), or with `--dist` the release profile linked as one unit
    // (Cargo.toml): a second, much longer build for a few percent.
    let mut cmd = cargo();
    if dist {
        cmd.args(["build", "--profile", "dist", "--workspace"]);
    } else {
        cmd.args(RELEASE_BUILD);
    }
    cmd.args(["--features", KV_EVENTS]);
    cmd.args(quiet_flag());
    run(cmd)?;
    let release = root().join(if dist {
        "target/dist"
    } else {
        "target/release"
    });
    let exe = format!("routerlab{}", std::env::consts::EXE_SUFFIX);
    let mut copies = vec![(release.join(&exe), prefix.join("bin").join(&exe))];
    let plugins = std::fs::read_dir(&release)
        .map_err(|e| format!("{}: {e}", release.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(routerlab_host_plugin_file_name)
        });
    for plugin in plugins {
        let name = plugin.file_name().expect("a file").to_owned();
        copies.push((plugin, prefix.join("lib/routerlab").join(name)));
    }
    copies.push((
        root().join("include/routerlab.h"),
        prefix.join("include/routerlab.h"),
    ));
    let stripping = cfg!(target_os = "linux") && succeeds("strip", &["--version"]);
    if !stripping {
        println!("xtask install: no GNU `strip`, so the files keep their debug info");
    }
    let mut installed_bytes = 0u64;
    for (from, to) in &copies {
        let dir = to.parent().expect("a directory");
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let partial = dir.join(format!(
            ".{}.partial",
            to.file_name().expect("a file").to_string_lossy()
        ));
        std::fs::copy(from, &partial)
            .map_err(|e| format!("cannot install {}: {e}", to.display()))?;
        // The profile keeps line tables (for profiling in the tree); an install does not
        // need them. `--strip-debug` leaves the symbol tables `dlsym` reads.
        if stripping && from.extension() != Some(std::ffi::OsStr::new("h")) {
            let mut strip = Command::new("strip");
            strip.arg("--strip-debug").arg(&partial);
            run(strip)?;
        }
        std::fs::rename(&partial, to)
            .map_err(|e| format!("cannot install {}: {e}", to.display()))?;
        installed_bytes += std::fs::metadata(to).map_or(0, |m| m.len());
    }
    println!(
        "installed {} files ({} MB) under {}: add {} to PATH; `routerlab plugins` lists the plugins",
        copies.len(),
        installed_bytes.div_ceil(1 << 20),
        prefix.display(),
        prefix.join("bin").display()
    );
    Ok(())
}

/// The plugin naming rule (`routerlab_host::discovery::is_plugin_file_name`), restated here
/// because xtask does not link the host crate.
fn routerlab_host_plugin_file_name(name: &str) -> bool {
    let (prefix, suffix) = (std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX);
    name.starts_with(&format!("{prefix}routerlab_")) && name.ends_with(suffix)
}

/// Builds everything, then runs the release `routerlab` binary. Its exit code is passed on.
fn run_tool(task: &str, args: &[String]) -> Result<(), String> {
    build_release()?;
    let binary = root()
        .join("target/release")
        .join(format!("routerlab{}", std::env::consts::EXE_SUFFIX));
    let status = Command::new(&binary)
        .arg(task)
        .args(args)
        .status()
        .map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
    if status.success() {
        return Ok(());
    }
    // The tool already printed its one-line error; keep its exit code for scripts.
    if let Some(code) = status.code() {
        std::process::exit(code);
    }
    // Killed by a signal (a crashing plugin): say so, and exit as a shell would.
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt as _;
        if let Some(signal) = status.signal() {
            eprintln!("xtask: routerlab was killed by signal {signal} (see its last words above)");
            std::process::exit(128 + signal);
        }
    }
    std::process::exit(1);
}

/// The C header, generated from the ABI module.
pub fn generate_header() -> Result<String, String> {
    let mut config = cbindgen::Config {
        language: cbindgen::Language::C,
        include_guard: Some("ROUTERLAB_H".into()),
        header: Some(HEADER_PREAMBLE.into()),
        cpp_compat: true,
        usize_is_size_t: true,
        sys_includes: vec!["stdint.h".into(), "stddef.h".into()],
        no_includes: true,
        documentation: true,
        ..Default::default()
    };
    config.export.include = [
        "RlStr",
        "RlErrorSink",
        "RlRequest",
        "RlEndpointStatus",
        "RlEndpointList",
        "RlCreateInfo",
        "RlMatcherVtable",
        "RlDetectorVtable",
        "RlPluginDescriptor",
        "RlModule",
        "RlEntryFn",
    ]
    .map(String::from)
    .to_vec();
    config.autogen_warning = Some(
        "/* Generated by `cargo xtask codegen` from crates/core/src/abi.rs. Do not edit. */".into(),
    );
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(root().join("crates/core/src/abi.rs"))
        .generate()
        .map_err(|e| format!("cbindgen failed: {e}"))?;
    let mut out = Vec::new();
    bindings.write(&mut out);
    let header = String::from_utf8(out).map_err(|e| format!("header is not UTF-8: {e}"))?;
    // cbindgen only declares functions it finds defined; the entry function is defined by
    // each plugin, so its declaration goes in by hand, inside the include guard.
    let guard_end = "#endif  /* ROUTERLAB_H */";
    header
        .rfind(guard_end)
        .map(|at| format!("{}{ENTRY_DECLARATION}\n{}", &header[..at], &header[at..]))
        .ok_or_else(|| "cbindgen output has no include guard".to_owned())
}

const HEADER_PREAMBLE: &str = "\
/*
 * routerlab plugin ABI v1: everything a C plugin needs.
 *
 * A plugin library exports one function, routerlab_plugin_entry_v1, returning a static
 * RlModule. Rules (see STABILITY.md and README.md, \"Writing a plugin in C\"):
 * - every struct that may grow starts with struct_size; set it to sizeof(the struct);
 * - strings passed in are borrowed (pointer, length) UTF-8, valid for one call;
 * - report an error by calling err->write(err->ctx, msg) at most once, then return a
 *   negative RlStatus; never hand the host memory it must free;
 * - randomness only from a `seed` config key, time only from arguments;
 * - calls on one instance are serialised by the host; the library is never unloaded.
 */";

const ENTRY_DECLARATION: &str = "\
#ifdef __cplusplus
extern \"C\" {
#endif

/* The only required export: called once; returns a static module, or NULL to refuse. */
const RlModule *routerlab_plugin_entry_v1(void);

#ifdef __cplusplus
}
#endif";

fn header_path() -> PathBuf {
    root().join("include/routerlab.h")
}

/// Regenerates the header and the documents' examples (or, with `check`, fails if stale).
fn codegen(check: bool) -> Result<(), String> {
    // The command-line reference is rendered by a test of the CLI crate, which links the
    // clap definitions that xtask does not.
    let mut reference = cargo();
    reference.args(["test", "-p", "routerlab-cli", "--test", "reference"]);
    reference.args(quiet_flag());
    if !check {
        reference.env("ROUTERLAB_WRITE_REFERENCE", "1");
    }
    run(reference)
        .map_err(|_| "docs/reference/cli.md is stale: run `cargo xtask codegen` and commit it")?;
    let mut outputs = vec![(header_path(), generate_header()?)];
    for doc in docs::user_docs(&root())? {
        let fresh = docs::with_fresh_examples(&root(), &doc)?;
        outputs.push((doc, fresh));
    }
    for (path, fresh) in outputs {
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        if committed == fresh {
            println!("{} is up to date", path.display());
        } else if check {
            let shown = path.display();
            return Err(format!(
                "{shown} is stale: run `cargo xtask codegen` and commit it"
            ));
        } else {
            let written = std::fs::write(&path, fresh);
            written.map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            println!("wrote {}", path.display());
        }
    }
    Ok(())
}

fn bench(args: &[String]) -> Result<(), String> {
    build_release()?;
    let mut cmd = cargo();
    cmd.args(["bench", "--workspace"]);
    cmd.args(quiet_flag());
    cmd.args(args);
    run(cmd)
}

/// The toolchain version `rust-version` in the workspace manifest promises.
fn rust_version() -> Result<String, String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml"))
        .map_err(|e| format!("Cargo.toml: {e}"))?;
    manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .map(|v| v.trim_matches('"').to_owned())
        .ok_or_else(|| "Cargo.toml: no workspace rust-version".to_owned())
}

fn ci() -> Result<(), String> {
    let mut times: Vec<(String, std::time::Duration)> = Vec::new();
    let result = ci_steps(&mut times);
    // Each step's time, the failed one last: where CI's minutes go.
    println!("xtask ci: step times");
    let total: std::time::Duration = times.iter().map(|(_, t)| *t).sum();
    for (step, time) in &times {
        println!("  {:>7.1} s  {step}", time.as_secs_f64());
    }
    println!("  {:>7.1} s  in all", total.as_secs_f64());
    result
}

/// The steps of `ci`, each timed into `times` (a failed one too).
fn ci_steps(times: &mut Vec<(String, std::time::Duration)>) -> Result<(), String> {
    let mut timed = |name: String, step: &mut dyn FnMut() -> Result<(), String>| {
        println!("xtask ci: {name}");
        let started = std::time::Instant::now();
        let result = step();
        times.push((name, started.elapsed()));
        result
    };
    timed("prerequisites".into(), &mut prerequisites)?;
    let mut python = String::new();
    timed("the Python for the KV-event tests".into(), &mut || {
        python = kv_events_python()?;
        Ok(())
    })?;
    let msrv = format!("+{}", rust_version()?);
    let q = quiet_flag();
    let steps: [Vec<&str>; 7] = [
        vec!["fmt", "--all", "--check"],
        [
            &[
                "clippy",
                "--workspace",
                "--all-targets",
                "--features",
                EXTERNAL,
            ],
            q,
            &["--", "-D", "warnings"],
        ]
        .concat(),
        // The oldest toolchain `rust-version` promises must build everything.
        [
            &[
                msrv.as_str(),
                "check",
                "--workspace",
                "--all-targets",
                "--features",
                EXTERNAL,
            ],
            q,
        ]
        .concat(),
        // Test binaries load the plugin libraries that a plain build puts in target/debug;
        // built with the tests' features, so the test step reuses all of it.
        [&["build", "--workspace", "--features", EXTERNAL], q].concat(),
        // With the tests that need Python and Slurm, which the prerequisites set up.
        [&["test", "--workspace", "--features", EXTERNAL], q].concat(),
        // The SDK's `unsafe` under Miri: undefined behaviour fails CI like any bug. The id
        // table's tests (`hash`, no `unsafe` in it) fill tables of 65,536 keys and more: 140
        // of Miri's 157 seconds, and nothing for it to check.
        [
            &["+nightly", "miri", "test", "-p", "routerlab-core"],
            q,
            &["--", "--skip", "hash::"],
        ]
        .concat(),
        [&["doc", "--workspace", "--no-deps"], q].concat(),
    ];
    for step in steps {
        timed(format!("cargo {}", step.join(" ")), &mut || {
            let mut cmd = cargo_bare();
            cmd.args(&step);
            if step.contains(&"test") {
                cmd.env("ROUTERLAB_PYTHON", &python);
            }
            if step.contains(&"doc") {
                cmd.env("RUSTDOCFLAGS", "-D warnings");
            }
            run(cmd)
        })?;
    }
    timed("cargo xtask fuzz --smoke".into(), &mut || {
        fuzz_for(SMOKE_SECONDS, &["--features", EXTERNAL])
    })?;
    timed("cargo xtask readme".into(), &mut || readme(&[]))
}

/// The feature that builds the tests needing Python and Slurm (crates/cli/Cargo.toml); it
/// includes [`KV_EVENTS`].
const EXTERNAL: &str = "routerlab-cli/external-tools";

/// The cargo-fuzz release `ci` installs when none is on the path.
const CARGO_FUZZ_VERSION: &str = "0.13.2";

/// Whether `program args` runs and succeeds (its output thrown away).
fn succeeds(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .current_dir(root())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Everything `ci` needs besides the stable toolchain that runs it, checked in a few
/// seconds before anything is built; what is missing is installed the way a fresh CI
/// machine gets it (printed first), or, where nothing here can install it, named with the
/// one command to run.
fn prerequisites() -> Result<(), String> {
    println!("xtask ci: checking prerequisites");
    let msrv = rust_version()?;
    let rustup = succeeds("rustup", &["--version"]);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    if !succeeds(&cc, &["--version"]) {
        return Err(format!(
            "no C compiler (`{cc}`; the tests build C plugins): install one, e.g. `sudo apt-get install build-essential`, or set CC"
        ));
    }
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    if !succeeds(&cxx, &["--version"]) {
        return Err(format!(
            "no C++ compiler (`{cxx}`; libzmq, for KV events, is built from source): install one, e.g. `sudo apt-get install build-essential`, or set CXX"
        ));
    }
    let toolchains = installed_toolchains();
    // (what, is it there, the command that installs it)
    let mut needs: Vec<(String, bool, Vec<String>)> = vec![
        (
            "rustfmt".into(),
            succeeds("cargo", &["fmt", "--version"]),
            words("rustup component add rustfmt"),
        ),
        (
            "clippy".into(),
            succeeds("cargo", &["clippy", "--version"]),
            words("rustup component add clippy"),
        ),
        (
            format!("the Rust {msrv} toolchain (`rust-version`)"),
            toolchains
                .iter()
                .any(|t| t.starts_with(&format!("{msrv}-"))),
            words(&format!(
                "rustup toolchain install {msrv} --profile minimal --no-self-update"
            )),
        ),
    ];
    let has_nightly = toolchains.iter().any(|t| t.starts_with("nightly-"));
    needs.push((
        "Miri on the nightly toolchain".into(),
        has_nightly
            && succeeds("cargo", &["+nightly", "miri", "--version"])
            && nightly_has_rust_src(),
        if has_nightly {
            words("rustup component add --toolchain nightly miri rust-src")
        } else {
            words("rustup toolchain install nightly --profile minimal --component miri,rust-src --no-self-update")
        },
    ));
    // The Slurm test starts a single-node cluster of Debian's packages.
    needs.push((
        "Slurm and munge (Debian's slurm-wlm and munge)".into(),
        succeeds("sbatch", &["--version"]) && has_program("munged") && has_program("slurmctld"),
        vec![
            "sh".into(),
            "-c".into(),
            "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends slurm-wlm munge".into(),
        ],
    ));
    needs.push((
        "cargo-fuzz".into(),
        succeeds("cargo", &["fuzz", "--version"]),
        words(&format!(
            "cargo install cargo-fuzz --locked --version {CARGO_FUZZ_VERSION}"
        )),
    ));
    for (what, present, install) in needs {
        if present {
            continue;
        }
        let command = install.join(" ");
        if install[0] == "rustup" && !rustup {
            return Err(format!(
                "{what} is missing and there is no rustup to install it: install rustup (https://rustup.rs), then run `{command}`"
            ));
        }
        // A system package is the machine's, not the project's: asked first, unless this
        // is CI (`CI` set), where the machine is made for the run.
        if command.contains("apt-get") && std::env::var_os("CI").is_none() {
            use std::io::IsTerminal as _;
            if !std::io::stdin().is_terminal() {
                return Err(format!(
                    "{what} is missing: install it (`{command}`, as root), or set CI=true to let `cargo xtask ci` install it"
                ));
            }
            print!(
                "xtask ci: {what} is missing; install it now with `{command}` (as root)? [y/N] "
            );
            let _ = std::io::Write::flush(&mut std::io::stdout());
            let mut answer = String::new();
            let _ = std::io::stdin().read_line(&mut answer);
            if !matches!(answer.trim(), "y" | "Y" | "yes") {
                return Err(format!(
                    "{what} is missing: install it (`{command}`), then run again"
                ));
            }
        }
        println!("xtask ci: {what} is missing; installing it: {command}");
        let mut cmd = Command::new(&install[0]);
        cmd.args(&install[1..]).current_dir(root());
        run(cmd)
            .map_err(|e| format!("could not install {what} ({e}); run `{command}` yourself"))?;
    }
    Ok(())
}

/// Whether `name` is an executable on `PATH` or in an `sbin` directory (where Debian puts
/// daemons, often off a user's `PATH`).
fn has_program(name: &str) -> bool {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"])
        .any(|dir| std::path::Path::new(dir).join(name).is_file())
}

/// The Python packages the wire-format checks use, pinned (vLLM's own: msgspec for its
/// KV events' message types, pyzmq for libzmq, cbor2 and xxhash for its block hashes,
/// tokenizers for its tokenizer, prometheus-client for its metrics). None of them needs
/// another to be imported.
const KV_EVENTS_PYTHON_PACKAGES: [&str; 6] = [
    "msgspec==0.23.0",
    "pyzmq==27.3.0",
    "cbor2==6.3.0",
    "xxhash==4.1.0",
    "tokenizers==0.23.3",
    "prometheus-client==0.21.1",
];

/// A Python that imports those packages: `python3` when it does, else a virtual
/// environment under `target/` made for it (once).
fn kv_events_python() -> Result<String, String> {
    let check = [
        "-c",
        "import msgspec, zmq, cbor2, xxhash, tokenizers, prometheus_client",
    ];
    if succeeds("python3", &check) {
        return Ok("python3".into());
    }
    let venv = root().join("target/kv-events-python");
    let python = venv.join("bin/python").display().to_string();
    if succeeds(&python, &check) {
        return Ok(python);
    }
    let packages = KV_EVENTS_PYTHON_PACKAGES.join(" ");
    println!(
        "xtask ci: Python with {packages} is missing; installing it in {}",
        venv.display()
    );
    let mut make = Command::new("python3");
    make.args(["-m", "venv"]).arg(&venv);
    run(make).map_err(|e| {
        format!("could not make a Python virtual environment ({e}): install python3 and python3-venv, or `pip install {packages}`")
    })?;
    let mut install = Command::new(&python);
    install
        .args(["-m", "pip", "install", "--quiet", "--no-deps"])
        .args(KV_EVENTS_PYTHON_PACKAGES);
    run(install).map_err(|e| {
        format!("could not install {packages} ({e}); run `pip install {packages}` yourself")
    })?;
    Ok(python)
}

/// The toolchains rustup has (`1.85.0-x86_64-unknown-linux-gnu`, ...); none without rustup.
/// Asked by listing, because naming one that is missing may make rustup install it.
fn installed_toolchains() -> Vec<String> {
    Command::new("rustup")
        .args(["toolchain", "list"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the nightly toolchain has `rust-src`, which Miri builds its standard library from.
fn nightly_has_rust_src() -> bool {
    Command::new("rustup")
        .args(["component", "list", "--toolchain", "nightly", "--installed"])
        .output()
        .is_ok_and(|o| {
            o.status.success()
                && String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .any(|l| l.starts_with("rust-src"))
        })
}

fn words(command: &str) -> Vec<String> {
    command.split_whitespace().map(str::to_owned).collect()
}

/// The cargo-fuzz targets under `fuzz/`.
const FUZZ_TARGETS: [&str; 7] = [
    "trace_reader",
    "mooncake_fast_path",
    "settings",
    "engine",
    "run_files",
    "plugin_wire",
    "kv_events",
];

/// Runs every fuzz target for a fixed time from its committed seed corpus. New inputs go to
/// a scratch directory, so the committed corpus changes only by hand; a crash fails the
/// task and leaves its input in `fuzz/artifacts/TARGET/`. The process leaks on purpose
/// (plugin libraries are never unloaded), so leak detection is off.
fn fuzz(args: &[String]) -> Result<(), String> {
    let seconds = match args {
        [flag] if flag == "--smoke" => SMOKE_SECONDS,
        [flag, n] if flag == "--seconds" => n
            .parse::<u32>()
            .map_err(|_| format!("--seconds {n}: expected a whole number"))?,
        _ => return Err("usage: cargo xtask fuzz --smoke | --seconds N".into()),
    };
    fuzz_for(seconds, &[])
}

/// How long `fuzz --smoke` (and CI) runs each target.
const SMOKE_SECONDS: u32 = 10;

/// Each fuzz target for `seconds`, after a debug build of the workspace with `features`
/// (`ci` passes its own, so nothing is built twice).
fn fuzz_for(seconds: u32, features: &[&str]) -> Result<(), String> {
    // The fuzz crate is outside the workspace, so its lock file is not kept current by the
    // workspace's builds: a dependency added to a crate it uses must be committed there
    // too, or a clean clone's run rewrites it.
    let mut locked = cargo_bare();
    locked.args([
        "metadata",
        "--locked",
        "--format-version",
        "1",
        "--manifest-path",
    ]);
    locked
        .arg(root().join("fuzz/Cargo.toml"))
        .stdout(Stdio::null());
    run(locked).map_err(|e| {
        format!("{e}: fuzz/Cargo.lock is out of date: a cargo command in fuzz/ (`cd fuzz && cargo +nightly check`) updates it; commit it")
    })?;
    // The engine target loads the workspace's debug plugins.
    let mut build = cargo_bare();
    build.args(["build", "--workspace"]);
    build.args(features);
    build.args(quiet_flag());
    run(build)?;
    for target in FUZZ_TARGETS {
        let scratch =
            std::env::temp_dir().join(format!("routerlab-fuzz-{target}-{}", std::process::id()));
        std::fs::create_dir_all(&scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
        println!("xtask fuzz: {target} for {seconds} s");
        let mut cmd = cargo_bare();
        cmd.current_dir(root().join("fuzz"))
            .args(["+nightly", "fuzz", "run", target]);
        cmd.arg(&scratch).arg(format!("corpus/{target}"));
        cmd.args([
            "--",
            &format!("-max_total_time={seconds}"),
            "-detect_leaks=0",
            "-print_final_stats=1",
        ]);
        let result = run(cmd);
        let _ = std::fs::remove_dir_all(&scratch);
        result?;
    }
    Ok(())
}

/// Held while the README's blocks run: `serve`'s default, vLLM's, and the ones the live
/// example used to hard-code.
const TAKEN_PORTS: [u16; 6] = [8000, 8001, 8080, 18101, 18102, 18180];

/// Runs every `sh` block of the README and the guide (`docs::user_docs`, or the files
/// named) with `sh -e` from the repository root, as a new user on a fresh clone would,
/// with `HOME` in a scratch directory (blocks may write to `~`), and compares every shown
/// output and every image a block makes with what the document shows (`docs`). With
/// `--bless`, the documents' differing outputs and images are rewritten instead. Files
/// and directories the blocks create in the repository are removed afterwards, so a run
/// leaves the checkout as it found it.
fn readme(args: &[String]) -> Result<(), String> {
    let bless = args.iter().any(|a| a == "--bless");
    let named: Vec<PathBuf> = args
        .iter()
        .filter(|a| *a != "--bless")
        .map(|a| std::fs::canonicalize(a).map_err(|e| format!("{a}: {e}")))
        .collect::<Result<_, _>>()?;
    let documents = if named.is_empty() {
        docs::user_docs(&root())?
    } else {
        named
    };
    let untracked = || -> Result<std::collections::BTreeSet<String>, String> {
        let output = Command::new("git")
            .args([
                "status",
                "--porcelain",
                "--ignored",
                "--untracked-files=normal",
            ])
            .current_dir(root())
            .output()
            .map_err(|e| format!("cannot run git: {e}"))?;
        Ok(String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter(|l| l.starts_with("?? ") || l.starts_with("!! "))
            .map(|l| l[3..].trim_end_matches('/').to_owned())
            .collect())
    };
    let before = untracked()?;
    // Ports a block might be tempted to hard-code are taken while the blocks run, as on a
    // machine that already serves something there: a block must listen on port 0.
    let _taken: Vec<std::net::TcpListener> = TAKEN_PORTS
        .iter()
        .filter_map(|port| std::net::TcpListener::bind(("127.0.0.1", *port)).ok())
        .collect();
    let home = std::env::temp_dir().join(format!("routerlab-readme-home-{}", std::process::id()));
    std::fs::create_dir_all(&home).map_err(|e| format!("{}: {e}", home.display()))?;
    let result = documents
        .iter()
        .try_for_each(|doc| run_document(doc, &home, bless));
    // Said, since a file made in the checkout by anything else while the blocks ran is
    // taken for theirs.
    for created in untracked()?.difference(&before) {
        let path = root().join(created);
        eprintln!(
            "xtask readme: removing {created}, which appeared in the checkout while the blocks ran"
        );
        let _ = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
    }
    let _ = std::fs::remove_dir_all(&home);
    result
}

/// The committed image at `committed` against the one the block above made at `made`
/// (`--bless` copies the latter over the former).
fn check_image(
    name: &str,
    line: usize,
    committed: &Path,
    made: &Path,
    bless: bool,
) -> Result<(), String> {
    let read = |p: &Path| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
    if read(committed)? == read(made)? {
        return Ok(());
    }
    if bless {
        std::fs::copy(made, committed).map_err(|e| format!("{}: {e}", committed.display()))?;
        return Ok(());
    }
    Err(format!(
        "{name}:{line}: {} is not what the block above makes ({}): `cargo xtask readme --bless {name}` copies it",
        committed.display(),
        made.display()
    ))
}

/// One document's blocks, outputs and images (see `readme`).
fn run_document(doc: &Path, home: &Path, bless: bool) -> Result<(), String> {
    let name = doc
        .strip_prefix(root())
        .unwrap_or(doc)
        .display()
        .to_string();
    let text = std::fs::read_to_string(doc).map_err(|e| format!("{name}: {e}"))?;
    // (first line, line count, new lines) of each output `--bless` rewrites.
    let mut rewrites: Vec<(usize, usize, Vec<String>)> = Vec::new();
    let blocks = docs::blocks(&text);
    let images = docs::images(doc, &root(), &text)?;
    // Each image is checked right after the block above it, before a later block can
    // write the same path.
    let starts: Vec<usize> = blocks
        .iter()
        .map(|b| match b {
            docs::Block::Sh { line, .. } => *line,
            docs::Block::Transcript { shown, .. } => shown.line - 1,
        })
        .chain([usize::MAX])
        .collect();
    if let Some((line, _, _)) = images.iter().find(|(l, _, _)| *l < starts[0]) {
        return Err(format!("{name}:{line}: an image no block above makes"));
    }
    for (i, block) in blocks.into_iter().enumerate() {
        let (after, before) = (starts[i], starts[i + 1]);
        let (code, shown, line) = match &block {
            docs::Block::Sh { line, code, shown } => (code.clone(), shown.as_ref(), *line),
            docs::Block::Transcript { command, shown } => {
                (format!("{command}\n"), Some(shown), shown.line - 1)
            }
        };
        println!("xtask readme: {name}:{line}:\n{code}");
        let mut cmd = Command::new("sh");
        cmd.current_dir(root()).env("HOME", home);
        let output = if shown.is_some() {
            // A transcript is what a terminal shows: stderr into the same pipe, in order
            // (one command, so the order is its own). An `sh` block's output is its
            // stdout: a pipeline's stages would race each other on a shared pipe. Cargo's
            // own lines about building (`Compiling`, `Finished`) are left out.
            match &block {
                docs::Block::Transcript { .. } => {
                    cmd.args(["-e", "-c", &format!("exec 2>&1\n{code}")]);
                }
                docs::Block::Sh { .. } => {
                    cmd.args(["-e", "-c", &code]);
                }
            }
            cmd.env("CARGO_TERM_QUIET", "true");
            cmd.stdin(Stdio::null()).stderr(Stdio::inherit());
            cmd.output()
        } else {
            cmd.args(["-e", "-c", &code]);
            cmd.stdout(Stdio::null());
            cmd.status().map(|status| std::process::Output {
                status,
                stdout: Vec::new(),
                stderr: Vec::new(),
            })
        }
        .map_err(|e| format!("cannot run sh: {e}"))?;
        let printed = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            return Err(format!(
                "{name}:{line}: the block failed ({}):\n{code}{printed}",
                output.status
            ));
        }
        for (image, committed, made) in images
            .iter()
            .filter(|(l, _, _)| (after..before).contains(l))
        {
            check_image(&name, *image, committed, made, bless)?;
        }
        let Some(shown) = shown else { continue };
        if let Err((at, want, got)) = docs::compare(&shown.lines, &printed) {
            if bless {
                let mut fresh: Vec<String> = Vec::new();
                for (i, got) in printed.lines().map(str::trim_end).enumerate() {
                    let kept = shown
                        .lines
                        .get(i)
                        .filter(|w| docs::compare(std::slice::from_ref(w), got).is_ok());
                    fresh.push(kept.cloned().unwrap_or_else(|| got.to_owned()));
                }
                while fresh.last().is_some_and(String::is_empty) {
                    fresh.pop();
                }
                rewrites.push((shown.line, shown.lines.len(), fresh));
            } else {
                return Err(format!(
                    "{name}:{}: the shown output differs from what the command prints\n  shown:   {want}\n  printed: {got}\n(`cargo xtask readme --bless {name}` rewrites it; the whole output:)\n{printed}",
                    shown.line + at
                ));
            }
        }
    }
    if !rewrites.is_empty() {
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        for (first, count, fresh) in rewrites.into_iter().rev() {
            lines.splice(first - 1..first - 1 + count, fresh);
        }
        let mut fresh = lines.join("\n");
        fresh.push('\n');
        std::fs::write(doc, fresh).map_err(|e| format!("{name}: {e}"))?;
        println!("xtask readme: rewrote the outputs that differed in {name}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// One build configuration: a release build the README shows is the one xtask runs,
    /// flag for flag, so the features unify alike and switching rebuilds nothing.
    #[test]
    fn the_readme_builds_exactly_as_xtask_does() {
        let readme = std::fs::read_to_string(super::root().join("README.md")).unwrap();
        let benchmarks = std::fs::read_to_string(super::root().join("BENCHMARKS.md")).unwrap();
        let ours = format!("cargo {}", super::RELEASE_BUILD.join(" "));
        // The one other: with the KV-events feature, as `install` builds it.
        let with_kv_events = format!("{ours} --features {}", super::KV_EVENTS);
        let mut seen = 0;
        let mut text = readme.clone() + &benchmarks;
        for doc in super::docs::user_docs(&super::root()).unwrap() {
            text += &std::fs::read_to_string(doc).unwrap();
        }
        for line in text.lines() {
            for (at, _) in line.match_indices("cargo build --release --workspace") {
                let rest = &line[at..];
                let command = rest.split(['&', ';', '`', ')']).next().unwrap().trim_end();
                assert!(
                    command == ours || command == with_kv_events,
                    "a different release build: {line}"
                );
                seen += 1;
            }
        }
        assert!(seen >= 3, "the README shows its release build");
    }

    #[test]
    fn cargo_shows_progress_only_on_a_terminal_and_unless_asked_not_to() {
        assert!(!super::quiet_when(false, true));
        assert!(super::quiet_when(true, true));
        assert!(super::quiet_when(false, false));
    }

    /// The README's sample outputs and the guide's tables are among what `readme` checks.
    #[test]
    fn the_documents_show_checked_outputs() {
        let mut checked = 0;
        for doc in super::docs::user_docs(&super::root()).unwrap() {
            let text = std::fs::read_to_string(&doc).unwrap();
            checked += super::docs::blocks(&text)
                .iter()
                .filter(|b| match b {
                    super::docs::Block::Sh { shown, .. } => shown.is_some(),
                    super::docs::Block::Transcript { .. } => true,
                })
                .count();
        }
        assert!(checked >= 15, "{checked} shown outputs are checked");
    }

    /// What third-party authors had to discover with diagnostic plugins is in the header.
    #[test]
    fn the_header_says_what_plugins_must_know() {
        let header = std::fs::read_to_string(super::header_path()).unwrap();
        // Comment lines wrap: compare the words, not the lines.
        let header = header
            .split_whitespace()
            .filter(|w| *w != "*")
            .collect::<Vec<_>>()
            .join(" ");
        for fact in [
            "counts `ceil(prompt bytes / 4)` tokens",
            "blocks, of the trace's block size",
            "the engine's KV blocks, of `kv_block_tokens` tokens each",
            "Tokens per block of `kv_blocks_used`/`kv_blocks_total`",
            "0 is a valid and common value",
            "step through the list by `stride`, never by your own `sizeof`",
            "counted from 1 in file order",
            "Sessions are renumbered from 1",
            "in a time-free replay requests never finish",
            "the host's normal form",
        ] {
            assert!(
                header.contains(fact),
                "include/routerlab.h does not say: {fact}"
            );
        }
    }

    #[test]
    fn committed_header_is_fresh() {
        let fresh = super::generate_header().unwrap();
        let committed = std::fs::read_to_string(super::header_path()).unwrap_or_default();
        assert!(
            committed == fresh,
            "include/routerlab.h is stale: run `cargo xtask codegen` and commit the result"
        );
    }
}

/// Repository rules checked under `cargo test`, so breaking one fails CI like any bug.
#[cfg(test)]
mod tidy {
    use std::path::{Path, PathBuf};

    fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() && name != "target" && !name.starts_with('.') {
                files(&path, ext, out);
            } else if path.extension().and_then(|e| e.to_str()) == Some(ext) {
                out.push(path);
            }
        }
    }

    fn rust_sources() -> Vec<PathBuf> {
        let mut out = Vec::new();
        for dir in ["crates", "plugins", "examples", "xtask"] {
            files(&super::root().join(dir), "rs", &mut out);
        }
        out
    }

    /// Every Rust source with its path relative to the workspace root, `/`-separated.
    fn rust_sources_relative() -> Vec<(String, PathBuf)> {
        let root = super::root();
        rust_sources()
            .into_iter()
            .map(|path| {
                let rel = path
                    .strip_prefix(&root)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                (rel, path)
            })
            .collect()
    }

    #[test]
    fn every_rust_file_starts_with_module_docs() {
        for path in rust_sources() {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(
                text.starts_with("//!"),
                "{} must start with `//!` docs saying why it exists",
                path.display()
            );
        }
    }

    /// Library sources stay small enough to read whole: a file past 800 lines holds more
    /// than one concern (split it, as `timed/` and `serve/` are).
    #[test]
    fn no_library_source_file_is_over_800_lines() {
        for (rel, path) in rust_sources_relative() {
            let library = (rel.starts_with("crates/") || rel.starts_with("plugins/"))
                && rel.contains("/src/");
            if !library {
                continue;
            }
            let lines = std::fs::read_to_string(&path).unwrap().lines().count();
            assert!(lines <= 800, "{rel}: {lines} lines (at most 800)");
        }
    }

    /// No library call changes how the process's threads are scheduled: CPU affinity,
    /// scheduler class and priority are the caller's to set (as `taskset` or `chrt` do),
    /// not a side effect of a replay.
    #[test]
    fn no_library_code_changes_thread_scheduling() {
        let calls = [
            "sched_setaffinity",
            "sched_setscheduler",
            "SCHED_IDLE",
            "SCHED_BATCH",
            "setpriority",
            "pthread_setaffinity_np",
        ];
        for (rel, path) in rust_sources_relative() {
            if !rel.starts_with("crates/") && !rel.starts_with("plugins/") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for call in calls {
                assert!(!text.contains(call), "{rel}: calls `{call}`");
            }
        }
    }

    /// Modules live where their names say: a module split into files is a directory
    /// (`scheduler/{mod,tests}.rs`), never a `#[path]` that hides a child at the crate root.
    #[test]
    fn no_module_is_placed_by_a_path_attribute() {
        for (rel, path) in rust_sources_relative() {
            let text = std::fs::read_to_string(&path).unwrap();
            let placed = text.lines().any(|l| l.trim_start().starts_with("#[path"));
            assert!(
                !placed,
                "{rel}: a `#[path]` module; make it a directory module"
            );
        }
    }

    /// A router is assembled in one place: the scenario (and the route crate itself, and
    /// tests). Any other entry point goes through `Scenario`.
    #[test]
    fn routers_are_built_only_by_the_scenario() {
        for (rel, path) in rust_sources_relative() {
            let allowed = rel.starts_with("crates/route/")
                || rel == "crates/sim/src/scenario.rs"
                || rel.contains("/tests/")
                || rel.ends_with("/tests.rs");
            if allowed {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            assert!(
                !code.contains("Router::new("),
                "{rel}: builds a Router itself; use routerlab_sim::scenario::Scenario"
            );
        }
    }

    #[test]
    fn unsafe_is_confined_to_the_boundary_crates() {
        let root = super::root();
        let allowed = [
            root.join("crates/core"),
            root.join("crates/host"),
            root.join("crates/os"),
        ];
        for path in rust_sources() {
            let text = std::fs::read_to_string(&path).unwrap();
            let opts_out = text.lines().any(|l| {
                let l = l.trim_start();
                [
                    "#![allow(unsafe_code)]",
                    "#[allow(unsafe_code)]",
                    "#![expect(unsafe_code)]",
                    "#[expect(unsafe_code)]",
                ]
                .iter()
                .any(|opt_out| l.starts_with(opt_out))
            });
            if opts_out {
                assert!(
                    allowed.iter().any(|dir| path.starts_with(dir)),
                    "{}: `unsafe` is allowed only in crates/core, crates/host and crates/os",
                    path.display()
                );
            }
        }
    }

    /// Every workspace package with its dependencies of every kind (normal, dev, build,
    /// and each `[target.*]` table), as cargo itself reads the manifests.
    fn workspace() -> super::layers::Workspace {
        super::layers::Workspace::read(&super::root().join("Cargo.toml")).unwrap()
    }

    #[test]
    fn the_workspace_keeps_its_layering_rules() {
        let broken = super::layers::violations(&workspace());
        assert!(broken.is_empty(), "{}", broken.join("\n"));
    }

    /// The checker reads what cargo reads: a dependency in a `[target.*]` table, a
    /// `[dependencies.x]` table or `[dev-dependencies]` counts like any other. Built as a
    /// throwaway workspace that breaks one rule at a time.
    #[test]
    fn a_rule_broken_in_any_table_is_caught() {
        let cases = [
            (
                "[target.'cfg(unix)'.dependencies]\nlibloading = \"0.9\"\n",
                "crates/trace: only crates/host may depend on libloading",
            ),
            (
                "[dependencies.clap]\nversion = \"4\"\n",
                "crates/trace: only crates/cli and crates/experiment may depend on clap",
            ),
            (
                "[dev-dependencies]\nhyper = \"1\"\n",
                "crates/trace: only crates/live may depend on hyper",
            ),
        ];
        for (table, expected) in cases {
            let dir = scratch_workspace(table, true);
            let broken = super::layers::violations(
                &super::layers::Workspace::read(&dir.join("Cargo.toml")).unwrap(),
            );
            assert!(
                broken.iter().any(|b| b == expected),
                "{table}: expected `{expected}`, got {broken:?}"
            );
            std::fs::remove_dir_all(&dir).unwrap();
        }
        let dir = scratch_workspace("", false);
        let broken = super::layers::violations(
            &super::layers::Workspace::read(&dir.join("Cargo.toml")).unwrap(),
        );
        assert_eq!(
            broken,
            ["crates/trace: must inherit the workspace lints (`[lints] workspace = true`)"]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A workspace of one crate, `crates/trace`, with `extra` appended to its manifest.
    /// Dependencies are never fetched: `cargo metadata --no-deps` only reads manifests.
    fn scratch_workspace(extra: &str, lints: bool) -> PathBuf {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("routerlab-tidy-{}-{n}", std::process::id()));
        let krate = dir.join("crates/trace");
        std::fs::create_dir_all(krate.join("src")).unwrap();
        std::fs::write(
            dir.join("Cargo.toml"),
            "[workspace]\nmembers = [\"crates/*\"]\nresolver = \"3\"\n[workspace.lints.rust]\nunsafe_code = \"deny\"\n",
        )
        .unwrap();
        let lints = if lints {
            "[lints]\nworkspace = true\n"
        } else {
            ""
        };
        std::fs::write(
            krate.join("Cargo.toml"),
            format!(
                "[package]\nname = \"routerlab-trace\"\nversion = \"0.0.0\"\nedition = \"2024\"\n{lints}{extra}"
            ),
        )
        .unwrap();
        std::fs::write(krate.join("src/lib.rs"), "//! scratch\n").unwrap();
        dir
    }

    #[test]
    fn plugins_depend_only_on_the_core_crate_and_the_policy_kit() {
        let ws = workspace();
        let plugins: Vec<_> = ws
            .crates
            .iter()
            .filter(|c| c.dir.starts_with("plugins/") || c.dir.starts_with("examples/"))
            .collect();
        assert!(plugins.len() >= 20, "found {} plugin crates", plugins.len());
        for plugin in plugins {
            let ours: Vec<_> = plugin
                .deps
                .iter()
                .filter(|d| d.kind == super::layers::Kind::Normal)
                .map(|d| d.name.as_str())
                .collect();
            assert!(
                ours.contains(&"routerlab-core")
                    && ours
                        .iter()
                        .all(|d| *d == "routerlab-core" || *d == "routerlab-policy-kit"),
                "{}: plugins depend on routerlab-core (and routerlab-policy-kit) only, found {ours:?}",
                plugin.dir
            );
        }
    }

    /// Every plugin says where its defaults come from (`upstream.yaml`: the router, release
    /// and file, or `router: none`) and tests them against it.
    #[test]
    fn every_plugin_cites_its_defaults_and_tests_them() {
        let ws = workspace();
        let plugins: Vec<_> = ws
            .crates
            .iter()
            .filter(|c| c.dir.starts_with("plugins/"))
            .collect();
        assert!(plugins.len() >= 20, "found {} plugin crates", plugins.len());
        for plugin in plugins {
            let dir = super::root().join(&plugin.dir);
            assert!(
                dir.join("upstream.yaml").is_file(),
                "{}: no upstream.yaml saying where its defaults come from",
                plugin.dir
            );
            let lib = std::fs::read_to_string(dir.join("src/lib.rs")).unwrap();
            assert!(
                lib.contains("include_str!(\"../upstream.yaml\")") && lib.contains("_defaults::<"),
                "{}: no test checks its defaults against upstream.yaml",
                plugin.dir
            );
        }
    }

    /// A version as (major, minor, patch) from `X.Y` or `X.Y.Z`.
    fn version(text: &str) -> Option<(u32, u32, u32)> {
        let mut parts = text.split('.').map(|p| p.parse::<u32>().ok());
        let (major, minor) = (parts.next()??, parts.next()??);
        let patch = parts.next().flatten().unwrap_or(0);
        Some((major, minor, patch))
    }

    /// The versions `text` says things were added in (`added in X.Y`, and with
    /// `parenthesized` also `(X.Y`, as STABILITY.md writes them), each with its line.
    fn added_in(text: &str, parenthesized: bool) -> Vec<(usize, String)> {
        let markers: &[&str] = if parenthesized {
            &["added in ", "(0."]
        } else {
            &["added in "]
        };
        let mut found = Vec::new();
        for (n, line) in text.lines().enumerate() {
            for &marker in markers {
                for (at, _) in line.match_indices(marker) {
                    let start = at + marker.len() - if marker == "(0." { 2 } else { 0 };
                    let word: String = line[start..]
                        .chars()
                        .take_while(|c| c.is_ascii_digit() || *c == '.')
                        .collect();
                    let word = word.trim_end_matches('.').to_owned();
                    if version(&word).is_some() {
                        found.push((n + 1, word));
                    }
                }
            }
        }
        found
    }

    /// No document says a field, flag or key was added in a version later than the
    /// workspace's: a report stamped with the crate's version carries nothing newer.
    #[test]
    fn nothing_is_added_in_a_version_after_the_workspace() {
        let manifest = std::fs::read_to_string(super::root().join("Cargo.toml")).unwrap();
        let workspace = manifest
            .lines()
            .find_map(|l| l.strip_prefix("version = \""))
            .and_then(|v| v.strip_suffix('"'))
            .and_then(version)
            .expect("the workspace version");
        let mut later = Vec::new();
        for doc in ["README.md", "STABILITY.md", "ARCHITECTURE.md"] {
            let text = std::fs::read_to_string(super::root().join(doc)).unwrap();
            for (line, word) in added_in(&text, doc == "STABILITY.md") {
                if version(&word).is_some_and(|v| v > workspace) {
                    later.push(format!("{doc}:{line}: {word}"));
                }
            }
        }
        assert!(later.is_empty(), "newer than the workspace: {later:?}");
        assert_eq!(
            added_in("a ratio (0.9) added in 0.3", false),
            [(1, "0.3".to_owned())]
        );
        assert_eq!(
            added_in("x (added in 0.7; y) z (0.9: w) (0.1)", true),
            [
                (1, "0.7".to_owned()),
                (1, "0.9".to_owned()),
                (1, "0.1".to_owned())
            ]
        );
    }

    /// STABILITY.md heads the ABI with the minor `abi.rs` defines.
    #[test]
    fn stability_names_the_abi_minor_of_abi_rs() {
        let abi = std::fs::read_to_string(super::root().join("crates/core/src/abi.rs")).unwrap();
        let minor = abi
            .lines()
            .find_map(|l| l.strip_prefix("pub const RL_ABI_MINOR: u32 = "))
            .and_then(|v| v.strip_suffix(';'))
            .expect("RL_ABI_MINOR");
        let stability = std::fs::read_to_string(super::root().join("STABILITY.md")).unwrap();
        let heading = stability
            .lines()
            .find(|l| l.starts_with("### The plugin ABI"))
            .expect("the ABI's heading");
        assert!(
            heading.ends_with(&format!("major 1, minor {minor}")),
            "{heading} (abi.rs: minor {minor})"
        );
    }

    /// Every relative link in the documents names a file that exists.
    #[test]
    fn the_documents_link_to_files_that_exist() {
        let root = super::root();
        let mut docs = super::docs::user_docs(&root).unwrap();
        for top in [
            "STABILITY.md",
            "ARCHITECTURE.md",
            "CHANGELOG.md",
            "BENCHMARKS.md",
        ] {
            docs.push(root.join(top));
        }
        docs.push(root.join("docs/reference/cli.md"));
        docs.push(root.join("docs/FUZZING.md"));
        let mut broken = Vec::new();
        let mut seen = 0;
        for doc in &docs {
            let text = std::fs::read_to_string(doc).unwrap();
            for (at, _) in text.match_indices("](") {
                let target = &text[at + 2..];
                let Some(end) = target.find(')') else {
                    continue;
                };
                let target = target[..end].split('#').next().unwrap();
                if target.is_empty() || target.contains("://") || target.contains(' ') {
                    continue;
                }
                seen += 1;
                if !doc.parent().unwrap().join(target).exists() {
                    broken.push(format!("{}: {target}", doc.display()));
                }
            }
        }
        assert!(broken.is_empty(), "links to nothing: {broken:?}");
        assert!(seen >= 20, "{seen} links");
    }

    /// The guide's examples are the compiled files, verbatim.
    #[test]
    fn the_examples_shown_are_the_files_that_compile() {
        let mut markers = 0;
        for doc in super::docs::user_docs(&super::root()).unwrap() {
            let text = std::fs::read_to_string(&doc).unwrap();
            markers += text.matches("<!-- file: ").count();
            assert!(
                super::docs::with_fresh_examples(&super::root(), &doc).unwrap() == text,
                "{} examples differ from the files: run `cargo xtask codegen` and commit",
                doc.display()
            );
        }
        assert_eq!(
            markers, 5,
            "the Rust and the C example, the Rust example's snapshot test and its own Cargo.toml, and the recommend file"
        );
    }
}
