//! What a connection is doing, as the accept loop needs to know it when it must close one: is
//! a request being served on it (from its complete head until the last byte of its response),
//! has it ever sent a whole request, and since when has it been idle.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};

use axum::body::Body;
use hyper::body::{Body as HttpBody, Bytes, Frame, SizeHint};
use hyper::{Request, Response};
use tokio::time::Instant;

/// One connection's activity, shared by its service (which writes it) and the accept loop.
#[derive(Debug)]
pub(crate) struct Activity {
    /// When the connection was accepted: the origin of `idle_since_ms`.
    opened: Instant,
    /// Requests whose response is not fully written yet.
    in_flight: AtomicU32,
    /// Requests whose head arrived whole.
    started: AtomicU32,
    /// When the last response was fully written, in milliseconds since `opened`.
    idle_since_ms: AtomicU64,
}

impl Activity {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Activity {
            opened: Instant::now(),
            in_flight: AtomicU32::new(0),
            started: AtomicU32::new(0),
            idle_since_ms: AtomicU64::new(0),
        })
    }

    /// Whether a request is being served on it now.
    pub(crate) fn serving(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) > 0
    }

    /// Whether it has sent at least one whole request.
    pub(crate) fn ever_served(&self) -> bool {
        self.started.load(Ordering::Acquire) > 0
    }

    /// Since when it has been waiting for a request: its opening, or its last response.
    pub(crate) fn idle_since(&self) -> Instant {
        self.opened + std::time::Duration::from_millis(self.idle_since_ms.load(Ordering::Acquire))
    }

    fn begin(self: &Arc<Self>) -> Serving {
        self.started.fetch_add(1, Ordering::AcqRel);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        Serving(self.clone())
    }
}

/// A request being served: dropped with the last byte of its response (or if the response is
/// abandoned).
struct Serving(Arc<Activity>);

impl Drop for Serving {
    fn drop(&mut self) {
        let ms = u64::try_from(self.0.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.0.idle_since_ms.store(ms, Ordering::Release);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A hyper service that records the activity of the service it wraps.
#[derive(Clone)]
pub(crate) struct Tracked<S> {
    pub(crate) inner: S,
    pub(crate) activity: Arc<Activity>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> hyper::service::Service<Request<B>> for Tracked<S>
where
    S: hyper::service::Service<Request<B>, Response = Response<Body>>,
    S::Future: Send + 'static,
    S::Error: 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Response<Body>, S::Error>>;

    fn call(&self, request: Request<B>) -> Self::Future {
        let serving = self.activity.begin();
        let call = self.inner.call(request);
        Box::pin(async move {
            let response = call.await?;
            Ok(response.map(|body| Body::new(TrackedBody { body, _serving: serving })))
        })
    }
}

/// A response body that keeps its request counted as served until it is written whole.
struct TrackedBody {
    body: Body,
    _serving: Serving,
}

impl HttpBody for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
