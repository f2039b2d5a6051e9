//! The `routerlab` binary: glue only; everything lives in the library.

fn main() -> std::process::ExitCode {
    routerlab_replay::cli::main()
}
