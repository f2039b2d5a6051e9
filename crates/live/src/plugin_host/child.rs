//! The plugin host's side: a `Router` answering `serve`'s calls, one at a time, until
//! `serve` closes the channel.

use std::io::{BufReader, Write as _};
use std::os::unix::net::UnixStream;
use std::path::Path;

use routerlab_route::{EndpointIndex, ListPos, Router};

use super::wire::{self, Call, Reply, WireError};
use crate::LiveError;

/// Connects to the `serve` listening at `socket` and runs `router`'s plugins for it until
/// it closes the channel (then `Ok`), or sends something this build never writes.
pub fn run(mut router: Router, socket: &Path) -> Result<(), LiveError> {
    let mut stream = UnixStream::connect(socket)
        .map_err(|e| LiveError::Run(format!("{}: {e}", socket.display())))?;
    let mut reader = BufReader::new(
        stream
            .try_clone()
            .map_err(|e| LiveError::Run(format!("{}: {e}", socket.display())))?,
    );
    let table = router.table();
    let hello = Reply::Hello {
        matcher: router.matcher_name().to_owned(),
        endpoints: (0..table.len())
            .map(|pos| (table.name(pos).to_owned(), table.index(pos)))
            .collect(),
    };
    let lost = |e: std::io::Error| LiveError::Run(format!("the router went away: {e}"));
    send(&mut stream, &hello).map_err(lost)?;
    let mut buf = Vec::new();
    loop {
        let call = match wire::read_call(&mut reader, &mut buf) {
            Ok(call) => call,
            Err(WireError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Ok(());
            }
            Err(e) => return Err(LiveError::Run(format!("the router's call: {e}"))),
        };
        let reply = answer(&mut router, call);
        send(&mut stream, &reply).map_err(lost)?;
    }
}

fn send(stream: &mut UnixStream, reply: &Reply) -> std::io::Result<()> {
    wire::write_reply(stream, reply)?;
    stream.flush()
}

/// One call, made on the router.
fn answer(router: &mut Router, call: Call) -> Reply {
    let failed = |message: String| Reply::Failed { message };
    let done = |result: Result<(), routerlab_host::PluginError>| match result {
        Ok(()) => Reply::Done,
        Err(e) => failed(e.to_string()),
    };
    match call {
        Call::Decide { request, loads } => {
            for (index, load) in loads {
                if let Some(pos) = router.table().position(index) {
                    router.table_mut().set_load(pos, load);
                }
            }
            match router.decide(&request.data(), false) {
                Ok(decision) => Reply::Decided {
                    endpoint: decision.endpoint.map(|pos| router.index_of(pos).0),
                    constrained: decision.constrained,
                    flagged: router
                        .unavailable()
                        .iter()
                        .enumerate()
                        .filter(|(_, flagged)| **flagged)
                        .map(|(pos, _)| router.table().index(pos))
                        .collect(),
                },
                Err(e) => failed(e.to_string()),
            }
        }
        Call::Learn { request, index } => match position(router, index) {
            Ok(pos) => done(router.learn(&request.data(), pos)),
            Err(reply) => reply,
        },
        Call::FirstToken { request, index } => match position(router, index) {
            Ok(pos) => done(router.first_token(&request.data(), pos)),
            Err(reply) => reply,
        },
        Call::Complete { request, index } => match position(router, index) {
            Ok(pos) => done(router.complete(&request.data(), pos)),
            Err(reply) => reply,
        },
        Call::Add { name } => match router.add_endpoint(name) {
            Ok(index) => Reply::Added { index: index.0 },
            Err(e) => failed(e.to_string()),
        },
        Call::Remove { index } => done(router.remove_endpoint(EndpointIndex(index))),
    }
}

/// Where the endpoint with stable index `index` is in the table, or the failure to send.
fn position(router: &Router, index: u32) -> Result<ListPos, Reply> {
    router
        .position_of(EndpointIndex(index))
        .ok_or_else(|| Reply::Failed {
            message: format!("no endpoint with index {index} in the fleet"),
        })
}
