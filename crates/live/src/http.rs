//! The HTTP plumbing the three commands share: one body type (whole, streamed from a
//! channel, or passed through from upstream), an accept loop, JSON and error responses.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::Frame;
use http_body_util::BodyExt as _;
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

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

/// A Prometheus text-format response (`/metrics`).
pub fn prometheus(text: String) -> Response<Body> {
    Response::builder()
        .header("content-type", "text/plain; version=0.0.4")
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

/// Reads a request body whole, refusing more than [`MAX_REQUEST_BYTES`].
pub async fn read_body(request: Request<Incoming>) -> Result<Bytes, Response<Body>> {
    let limited = http_body_util::Limited::new(request.into_body(), MAX_REQUEST_BYTES);
    match limited.collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("request body over {MAX_REQUEST_BYTES} bytes"),
        )),
        Err(e) => Err(error(
            StatusCode::BAD_REQUEST,
            &format!("reading the body: {e}"),
        )),
    }
}

/// A listener bound by the caller (so a taken port fails before anything starts), handed
/// to the runtime.
pub fn from_std(listener: std::net::TcpListener) -> Result<TcpListener, String> {
    listener
        .set_nonblocking(true)
        .and_then(|()| TcpListener::from_std(listener))
        .map_err(|e| format!("cannot listen: {e}"))
}

/// Serves HTTP/1.1 connections from `listener` with `handler`, each connection on its own
/// task, until the process ends.
pub async fn serve<H, F>(listener: TcpListener, handler: H)
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let handler = handler.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let handler = handler.clone();
                async move { Ok::<_, Infallible>(handler(request).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
