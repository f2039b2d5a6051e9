//! The plugin host's side: a `Router` answering `serve`'s calls, one at a time, until
//! `serve` closes the channel.

use std::io::{BufReader, Write as _};
use std::os::unix::net::UnixStream;
use std::path::Path;

use routerlab_host::PluginError;
use routerlab_route::{EndpointIndex, Router};

use super::by_index::{self, Notice};
use super::wire::{self, Call, Reply, WireError, WireRequest};
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
    let failed = |e: PluginError| Reply::Failed {
        message: e.to_string(),
    };
    let notify = |router: &mut Router, notice, request: WireRequest, index| match request
        .lend(None, |data| {
            by_index::notify(router, notice, data, EndpointIndex(index))
        }) {
        Ok(true) => Reply::Done,
        Ok(false) => Reply::Failed {
            message: format!("no endpoint with index {index} in the fleet"),
        },
        Err(e) => failed(e),
    };
    match call {
        Call::Decide { request, loads } => {
            let loads = loads
                .into_iter()
                .map(|(i, load)| (EndpointIndex(i), load.0));
            match request.lend(None, |data| by_index::decide(router, data, loads)) {
                Ok(decided) => Reply::Decided {
                    endpoint: decided.endpoint.map(|i| i.0),
                    constrained: decided.constrained,
                    flagged: decided.flagged.into_iter().map(|i| i.0).collect(),
                },
                Err(e) => failed(e),
            }
        }
        Call::Learn { request, index } => notify(router, Notice::Learn, request, index),
        Call::FirstToken { request, index } => notify(router, Notice::FirstToken, request, index),
        Call::Complete { request, index } => notify(router, Notice::Complete, request, index),
        Call::Add { name } => match router.add_endpoint(name) {
            Ok(index) => Reply::Added { index: index.0 },
            Err(e) => failed(e),
        },
        Call::Remove { index } => match router.remove_endpoint(EndpointIndex(index)) {
            Ok(()) => Reply::Done,
            Err(e) => failed(e),
        },
    }
}
