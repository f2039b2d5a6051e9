//! The tests' `routerlab` server processes: `routerlab_testkit`'s, started from this
//! build's binary (`ROUTERLAB.start(&[...])`).

// Every test binary includes `support`; not every one starts a server.
#![allow(dead_code, unused_imports)]

pub use routerlab_testkit::Server;

/// This build's `routerlab`.
pub const ROUTERLAB: routerlab_testkit::Program =
    routerlab_testkit::Program(env!("CARGO_BIN_EXE_routerlab"));
