//! routerlab-os: the process-level `unsafe` code, kept out of the crates that use it.
//!
//! Two things need the operating system directly: [`crash`], the fatal-signal handler that
//! says which plugin, call and trace line were running when the process died, and
//! [`mapped`], the read-only file map the trace reader streams from (a truncated map faults
//! with SIGBUS, and the crash handler names the file). The plugin loader and the trace
//! reader both depend on this crate; neither depends on the other. [`watchdog`] watches
//! the same plugin calls for one that never returns; [`process`] ties a helper process's
//! life to its parent's.
//!
//! `unsafe` is allowed in this crate, and each block says why it is sound.

#![allow(unsafe_code)]

pub mod crash;
pub mod mapped;
pub mod process;
pub mod watchdog;

pub use mapped::MappedFile;
