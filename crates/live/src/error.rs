//! Why a live command stopped. Each variant has one exit code in the CLI: bad settings or
//! input are 2 (nothing ran); a listener that cannot be served, or a run that started and
//! could not go on, is 1. (Outputs are written by the CLI, which reports them as 3.)

/// Why `serve`, `engine` or `drive` stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LiveError {
    /// The settings cannot work (a URL, a speed, an engine config, no endpoints).
    #[error("{0}")]
    Settings(String),
    /// The trace cannot be driven as asked (no arrival times for `--speedup`, say).
    #[error("{0}")]
    Trace(String),
    /// The listener bound by the caller could not be handed to the runtime.
    #[error("cannot listen: {0}")]
    Listen(std::io::Error),
    /// The plugin host of `serve --plugin-isolation process` did not start: its plugins
    /// could not be loaded (its own error is on stderr above), or it died first.
    #[error("the plugin host did not start: {0}")]
    PluginHost(String),
    /// The run started and could not go on (a request task panicked, say).
    #[error("{0}")]
    Run(String),
    /// A flag that needs the `kv-events` feature, in a build without it.
    #[error(
        "{0} needs routerlab built with the `kv-events` feature (ZeroMQ and tokenizers): `cargo xtask install --prefix DIR`, or `cargo build --release --workspace --features routerlab-cli/kv-events`"
    )]
    WithoutKvEvents(&'static str),
}
