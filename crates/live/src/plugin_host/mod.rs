//! Plugins in a process of their own, for `serve --plugin-isolation process`.
//!
//! A native plugin shares the address space of whatever loads it: its segfault or
//! `abort()` ends the process. In a replay that ends one run, and the crash report names
//! the plugin; in `serve` it would end every client's connection. So `serve` can keep the
//! plugins in a child process (`routerlab plugin-host`, the same binary) and talk to it
//! over a Unix socket in a directory only this user may enter (`wire` is the protocol):
//! one call at a time, each with a deadline. A host that dies, breaks the protocol or
//! misses the deadline is killed and another is started in the background ([`Host`]);
//! until it is up, calls fail at once and `serve` answers them as `--on-plugin-error`
//! says. A restarted host has the plugins' state of a fresh start.

pub(crate) mod by_index;
mod child;
mod parent;
pub mod wire;

pub use child::run;
pub use parent::{Host, HostCommand, HostFailure, STARTUP_TIMEOUT};
