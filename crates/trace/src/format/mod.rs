//! One module per trace format, each adding its line parser to the shared
//! `Linker` of the reader.

pub mod chat;
pub(crate) mod csv;
pub mod mooncake;
pub(crate) mod token_ids;

pub use chat::{Message, flatten_messages};
