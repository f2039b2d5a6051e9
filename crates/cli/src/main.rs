//! The `routerlab` binary: glue only; everything lives in the `routerlab_cli` library.

fn main() -> std::process::ExitCode {
    routerlab_cli::main()
}
