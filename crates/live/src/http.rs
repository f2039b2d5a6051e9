//! The HTTP plumbing the three commands share: one body type (whole, streamed from a
//! channel, or passed through from upstream), an accept loop, JSON and error responses.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::Frame;
use http_body_util::BodyExt as _;
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::LiveError;

/// Any error a body can end with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body of every response the commands send.
pub type Body = BoxBody<Bytes, BoxError>;

/// The most bytes a request body may have (a prompt of about a million tokens).
pub const MAX_REQUEST_BYTES: usize = 4 << 20;

/// A whole body.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    http_body_util::Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed()
}

/// A JSON response.
pub fn json(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(full(value.to_string()))
        .expect("a valid response")
}

/// An OpenMetrics text response (`/metrics`, as `prometheus-client` writes it).
pub fn openmetrics(text: String) -> Response<Body> {
    Response::builder()
        .header(
            "content-type",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )
        .body(full(text))
        .expect("a valid response")
}

/// An OpenAI-style error response: `{"error": {"message", "type"}}`.
pub fn error(status: StatusCode, message: &str) -> Response<Body> {
    json(
        status,
        &serde_json::json!({"error": {"message": message, "type": status.canonical_reason()}}),
    )
}

/// A body fed from a channel, chunk by chunk, as the sender produces them: ends when the
/// sender is dropped.
pub struct ChannelBody {
    chunks: mpsc::Receiver<Bytes>,
}

impl ChannelBody {
    /// A body and the sender that feeds it (`capacity` chunks buffered).
    pub fn channel(capacity: usize) -> (mpsc::Sender<Bytes>, Body) {
        let (tx, rx) = mpsc::channel(capacity);
        (tx, ChannelBody { chunks: rx }.boxed())
    }
}

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.get_mut()
            .chunks
            .poll_recv(cx)
            .map(|chunk| chunk.map(|bytes| Ok(Frame::data(bytes))))
    }
}

/// Reads a request body whole, refusing more than [`MAX_REQUEST_BYTES`]; the refusal is the
/// response to send (boxed: a response is large, and the body the common case).
pub async fn read_body(request: Request<Incoming>) -> Result<Bytes, Box<Response<Body>>> {
    let limited = http_body_util::Limited::new(request.into_body(), MAX_REQUEST_BYTES);
    match limited.collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(Box::new(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("request body over {MAX_REQUEST_BYTES} bytes"),
        ))),
        Err(e) => Err(Box::new(error(
            StatusCode::BAD_REQUEST,
            &format!("reading the body: {e}"),
        ))),
    }
}

/// A listener bound by the caller (so a taken port fails before anything starts), handed
/// to the runtime.
pub fn from_std(listener: std::net::TcpListener) -> Result<TcpListener, LiveError> {
    listener
        .set_nonblocking(true)
        .and_then(|()| TcpListener::from_std(listener))
        .map_err(LiveError::Listen)
}

/// How long a client may take to send a request's headers, and how long a kept-alive
/// connection may sit idle before its next request: after that the connection is closed,
/// so a client that connects and says nothing holds no task or descriptor for long.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the accept loop waits after an error that is not one connection's own (out of
/// descriptors, out of memory): the condition lasts, and retrying at once would spin.
pub const ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// How often, out of descriptors with none in reserve, the accept loop tries to take its
/// reserve back: rarely enough not to spin, often enough that a waiting client is answered
/// well within a second.
pub const RESERVE_RETRY: Duration = Duration::from_millis(100);

/// The answer a connection gets when the process is out of descriptors: it is closed at
/// once rather than left waiting in the backlog until a descriptor frees.
const OUT_OF_DESCRIPTORS: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: 82\r\n\r\n{\"error\": {\"message\": \"the router is out of file descriptors; try again shortly\"}}";

/// Serves HTTP/1.1 connections from `listener` with `handler`, each connection on its own
/// task, until the process ends; headers must arrive within `header_read_timeout` (also the
/// idle limit of a kept-alive connection).
///
/// hyper's connection builder, on hyper-util's tokio timer, does the protocol and the
/// timeouts. The loop around it follows the rule axum's `serve` uses: an error that
/// belongs to one connection (refused, aborted or reset before it was accepted) is skipped.
/// Out of descriptors (`EMFILE`, `ENFILE`), it gives up the one it keeps in reserve,
/// answers the waiting connections 503 and closes them, one after another, then takes its
/// reserve back: a client learns at once that the router is full (it waited for seconds).
/// It accepts nothing until it holds its reserve again, trying every [`RESERVE_RETRY`];
/// any other error waits [`ACCEPT_BACKOFF`] before the next try.
pub async fn serve<H, F>(listener: TcpListener, header_read_timeout: Duration, handler: H)
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let mut reserve = None;
    loop {
        // The reserve is taken back before anything is accepted: a connection accepted
        // without it would hold the descriptor, and the next client would wait in the
        // backlog, unanswered, until some connection closed (seconds).
        if reserve.is_none() {
            match std::fs::File::open("/dev/null") {
                Ok(file) => reserve = Some(file),
                // Another part of the process (a health probe, an engine connection) holds
                // the last descriptor: such a hold is brief, so it is tried again soon.
                Err(e) if routerlab_os::process::out_of_descriptors(&e) => {
                    tokio::time::sleep(RESERVE_RETRY).await;
                    continue;
                }
                // No /dev/null to hold: serve without a reserve.
                Err(_) => {}
            }
        }
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) if is_connection_error(&e) => continue,
            Err(e) if routerlab_os::process::out_of_descriptors(&e) => {
                match reserve.take() {
                    // The reserve's descriptor is the one the connections are answered with.
                    Some(freed) => {
                        drop(freed);
                        shed(&listener).await;
                    }
                    None => tokio::time::sleep(RESERVE_RETRY).await,
                }
                continue;
            }
            Err(_) => {
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let handler = handler.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let handler = handler.clone();
                async move { Ok::<_, Infallible>(handler(request).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_read_timeout)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Answers 503 to the connections waiting now and closes each, with the one descriptor
/// the caller freed, until none waits (or accepting fails again).
async fn shed(listener: &TcpListener) {
    loop {
        let accepted = tokio::time::timeout(Duration::from_millis(1), listener.accept()).await;
        let Ok(Ok((stream, _))) = accepted else {
            return;
        };
        // The request is read before the connection is closed: closing over unread bytes,
        // or with bytes still on their way, resets the connection, and a reset can discard
        // the answer before the client reads it. A client sends its request as soon as it
        // has connected, so the wait is short; one that says nothing costs that much only.
        let _ = tokio::time::timeout(SHED_REQUEST_WAIT, stream.readable()).await;
        drain(&stream);
        // A best effort: a full send buffer or a peer already gone loses nothing here.
        let _ = stream.try_write(OUT_OF_DESCRIPTORS);
        drain(&stream);
    }
}

/// How long a connection answered 503 for want of descriptors is given to send its request
/// before the answer and the close.
const SHED_REQUEST_WAIT: Duration = Duration::from_millis(10);

/// Reads and discards what a connection has sent so far (up to 64 KiB).
fn drain(stream: &tokio::net::TcpStream) {
    let mut sink = [0u8; 4096];
    for _ in 0..16 {
        if !matches!(stream.try_read(&mut sink), Ok(1..)) {
            break;
        }
    }
}

/// An accept error that concerns one connection only (the next accept may well succeed).
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};
    use std::time::Instant;

    use super::*;

    /// A server whose handler answers `ok`, with a 300 ms header timeout, on a free port.
    fn server() -> (std::net::SocketAddr, tokio::runtime::Runtime) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = std_listener.local_addr().unwrap();
        runtime.spawn(async move {
            let listener = from_std(std_listener).unwrap();
            serve(listener, Duration::from_millis(300), |_req| async {
                Response::new(full("ok"))
            })
            .await;
        });
        (addr, runtime)
    }

    /// Reads until the server closes the connection, or 5 s pass; returns what came and
    /// how long it took.
    fn read_to_close(stream: &mut std::net::TcpStream) -> (String, Duration) {
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let started = Instant::now();
        let mut got = Vec::new();
        let _ = stream.read_to_end(&mut got);
        (
            String::from_utf8_lossy(&got).into_owned(),
            started.elapsed(),
        )
    }

    #[test]
    fn a_client_that_sends_nothing_is_closed_after_the_header_timeout() {
        let (addr, _runtime) = server();
        let mut silent = std::net::TcpStream::connect(addr).unwrap();
        let (got, took) = read_to_close(&mut silent);
        assert!(took < Duration::from_secs(3), "closed after {took:?}");
        assert!(!got.contains("200 OK"), "{got}");
        // Half a request line, then silence: closed too.
        let mut slow = std::net::TcpStream::connect(addr).unwrap();
        slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
        let (_, took) = read_to_close(&mut slow);
        assert!(took < Duration::from_secs(3), "closed after {took:?}");
    }

    #[test]
    fn a_kept_alive_connection_idle_past_the_timeout_is_closed() {
        let (addr, _runtime) = server();
        let mut client = std::net::TcpStream::connect(addr).unwrap();
        client
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let (got, took) = read_to_close(&mut client);
        assert!(got.starts_with("HTTP/1.1 200 OK"), "{got}");
        assert!(got.ends_with("ok"), "{got}");
        assert!(
            took < Duration::from_secs(3),
            "idle connection kept {took:?}"
        );
    }

    #[test]
    fn per_connection_accept_errors_are_told_apart_from_lasting_ones() {
        use std::io::{Error, ErrorKind};
        assert!(is_connection_error(&Error::from(
            ErrorKind::ConnectionAborted
        )));
        // EMFILE: the process is out of descriptors; retrying at once would spin.
        assert!(!is_connection_error(&Error::from_raw_os_error(24)));
    }
}
