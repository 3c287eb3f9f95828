//! Shutdown signals: SIGTERM (what Kubernetes sends a pod) and Ctrl-C / SIGINT.

use std::io;

/// Which signal asked for the shutdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShutdownSignal {
    /// SIGTERM.
    Terminate,
    /// Ctrl-C (SIGINT).
    Interrupt,
}

/// Signal listeners, registered when created so that a signal arriving before they are
/// awaited is not lost.
pub(crate) struct Signals {
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    pub(crate) fn install() -> io::Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Signals {
                terminate: signal(SignalKind::terminate())?,
                interrupt: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(Signals {})
        }
    }

    pub(crate) async fn recv(&mut self) -> ShutdownSignal {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.terminate.recv() => ShutdownSignal::Terminate,
                _ = self.interrupt.recv() => ShutdownSignal::Interrupt,
            }
        }
        #[cfg(not(unix))]
        {
            match tokio::signal::ctrl_c().await {
                Ok(()) => ShutdownSignal::Interrupt,
                Err(_) => std::future::pending().await,
            }
        }
    }
}

/// Resolves at the first SIGTERM or Ctrl-C (Ctrl-C only on non-Unix platforms). The listeners
/// are registered when this is called, before it is first awaited.
///
/// [`Scheduler::run_until_signal`](crate::Scheduler::run_until_signal) is built on it; use it
/// directly with [`Scheduler::run_until`](crate::Scheduler::run_until) to combine it with
/// your own shutdown triggers.
pub fn shutdown_signal() -> io::Result<impl Future<Output = ShutdownSignal> + Send + 'static> {
    let mut signals = Signals::install()?;
    Ok(async move { signals.recv().await })
}
