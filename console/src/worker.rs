//! The console's own worker thread: every request the console serves runs there (a runtime of
//! one thread the console owns), so that rendering a large page or reading a large history
//! never holds up the tasks of the service the console is embedded in (its scheduler's timer,
//! its lock renewals), which keep their own runtime's threads. The console's Redis client is
//! first used, and so driven, from this thread too.

use std::future::Future;
use std::sync::Mutex;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// A runtime of one worker thread, shut down in the background when dropped (a runtime may not
/// be dropped, blocking, inside another).
pub(crate) struct Worker {
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    handle: Option<tokio::runtime::Handle>,
}

impl Worker {
    /// The console's worker thread; `None` inside if it could not be started (the requests then
    /// run where they arrive).
    pub(crate) fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("lock-console")
            .enable_all()
            .build();
        match runtime {
            Ok(runtime) => {
                let handle = Some(runtime.handle().clone());
                Worker { runtime: Mutex::new(Some(runtime)), handle }
            }
            Err(e) => {
                tracing::warn!(error = %e, "the console could not start its worker thread: it serves on the caller's runtime");
                Worker { runtime: Mutex::new(None), handle: None }
            }
        }
    }

    /// Runs `work` on the worker thread and waits for its response.
    pub(crate) async fn run<F>(&self, work: F) -> Response
    where
        F: Future<Output = Response> + Send + 'static,
    {
        let Some(handle) = &self.handle else { return work.await };
        match handle.spawn(work).await {
            Ok(response) => response,
            Err(e) => {
                tracing::error!(error = %e, "a console request failed on the worker thread");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "the request failed")
                    .into_response()
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let runtime = self.runtime.get_mut().map_or_else(|p| p.into_inner().take(), Option::take);
        if let Some(runtime) = runtime {
            runtime.shutdown_background();
        }
    }
}
