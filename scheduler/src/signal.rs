//! Shutdown signals: SIGTERM (what Kubernetes sends a pod) and Ctrl-C / SIGINT.

use std::fmt;
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

impl fmt::Display for ShutdownSignal {
    /// `SIGTERM` or `Ctrl-C`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ShutdownSignal::Terminate => "SIGTERM",
            ShutdownSignal::Interrupt => "Ctrl-C",
        })
    }
}

/// Listeners for SIGTERM and Ctrl-C, registered when created so that a signal arriving before
/// [`recv`](Self::recv) is awaited is not lost. Each `recv` waits for the next signal, so the
/// first can start a graceful shutdown and the second force it (what
/// [`Scheduler::run_until_signal`](crate::scheduler::Scheduler::run_until_signal) does).
///
/// ```no_run
/// # async fn demo(scheduler: lock_scheduler::Scheduler) -> anyhow::Result<()> {
/// use lock_scheduler::ShutdownSignals;
///
/// let mut signals = ShutdownSignals::install()?;
/// let handle = scheduler.start().await?;
/// let signal = signals.recv().await;
/// println!("{signal} received: waiting for {} running job(s)", handle.running_jobs().len());
/// // A second signal cancels the running jobs (their locks are still released).
/// let report = handle.shutdown_forced_by(signals.recv()).await;
/// # let _ = report;
/// # Ok(()) }
/// ```
pub struct ShutdownSignals {
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    /// Registers the listeners (SIGTERM and SIGINT on Unix, Ctrl-C elsewhere). Must be called
    /// within a tokio runtime.
    pub fn install() -> io::Result<ShutdownSignals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(ShutdownSignals {
                terminate: signal(SignalKind::terminate())?,
                interrupt: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(ShutdownSignals {})
        }
    }

    /// The next SIGTERM or Ctrl-C. Signals that arrive between two calls are counted once.
    pub async fn recv(&mut self) -> ShutdownSignal {
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

impl fmt::Debug for ShutdownSignals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShutdownSignals").finish_non_exhaustive()
    }
}

/// Resolves at the first SIGTERM or Ctrl-C (Ctrl-C only on non-Unix platforms). The listeners
/// are registered when this is called, before it is first awaited.
///
/// Use it with [`Scheduler::run_until`](crate::scheduler::Scheduler::run_until) to combine it with your
/// own shutdown triggers; [`ShutdownSignals`] also sees a second signal, which
/// [`Scheduler::run_until_signal`](crate::scheduler::Scheduler::run_until_signal) uses to force the
/// shutdown.
pub fn shutdown_signal() -> io::Result<impl Future<Output = ShutdownSignal> + Send + 'static> {
    let mut signals = ShutdownSignals::install()?;
    Ok(async move { signals.recv().await })
}
