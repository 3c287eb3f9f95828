//! Sending the scheduler's own Redis commands (pause flags, history, member sets, tick reads)
//! through the lock client's connection, with a deadline.

use std::time::Duration;

use lock_core::redis::{self, FromRedisValue, Script, ScriptInvocation};
use lock_core::{LockClient, LockError};

use crate::error::ControlError;

/// How long one command (or pipeline) may take.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(5);

/// Runs `pipe` within `timeout`. Through the lock client's own connection: it works on a single
/// node, Sentinel and Cluster alike (every pipeline here touches the keys of one slot, or reads
/// single keys).
pub(crate) async fn query_within<T: FromRedisValue>(
    client: &LockClient,
    action: &'static str,
    pipe: &redis::Pipeline,
    timeout: Duration,
) -> Result<T, ControlError> {
    let run =
        async { client.query_pipeline(pipe).await.map_err(|source| ControlError::Redis { action, source }) };
    tokio::time::timeout(timeout, run).await.map_err(|_| ControlError::Unavailable(action))?
}

/// Runs `pipe` within [`TIMEOUT`].
pub(crate) async fn query<T: FromRedisValue>(
    client: &LockClient,
    action: &'static str,
    pipe: &redis::Pipeline,
) -> Result<T, ControlError> {
    query_within(client, action, pipe, TIMEOUT).await
}

/// Runs `script` as `invocation` within `timeout`: `EVALSHA` alone, and only if Redis does not
/// know the script (a restart, `SCRIPT FLUSH`, another node) the script loaded and run again in
/// one pipeline (a pipeline's `EVALSHA` is not retried after `NOSCRIPT` by redis-rs). Loading it
/// with every call would cost an idle replica a command per announcement.
pub(crate) async fn run_script<T: FromRedisValue>(
    client: &LockClient,
    action: &'static str,
    script: &Script,
    invocation: &ScriptInvocation<'_>,
    timeout: Duration,
) -> Result<T, ControlError> {
    let mut pipe = redis::pipe();
    pipe.invoke_script(invocation);
    match query_within::<(T,)>(client, action, &pipe, timeout).await {
        Ok((reply,)) => return Ok(reply),
        Err(e) if !is_noscript(&e) => return Err(e),
        Err(_) => {}
    }
    let mut pipe = redis::pipe();
    pipe.load_script(script).ignore().invoke_script(invocation);
    let (reply,): (T,) = query_within(client, action, &pipe, timeout).await?;
    Ok(reply)
}

/// Whether `e` is Redis saying it does not know the script.
fn is_noscript(e: &ControlError) -> bool {
    match e {
        ControlError::Redis { source: LockError::Redis { source, .. }, .. } => {
            source.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
        }
        _ => false,
    }
}

/// The string values of `keys` ([`LockClient::get_many`]: one read per Redis node), within
/// [`TIMEOUT`]; `None` if Redis did not answer, logged as `what` could not be read. A refusal
/// by the ACL (a user without `MGET`) is a configuration error, and logged as a warning.
pub(crate) async fn read_keys(
    client: &LockClient,
    what: &str,
    keys: &[String],
) -> Option<Vec<Option<String>>> {
    match tokio::time::timeout(TIMEOUT, client.get_many(keys)).await {
        Ok(Ok(values)) => Some(values),
        Ok(Err(e @ LockError::Auth { .. })) => {
            tracing::warn!(error = %lock_core::ErrorChain(&e), "may not read {what}; running the slots");
            None
        }
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "could not read {what}; running the slots");
            None
        }
        Err(_) => {
            tracing::debug!("{what} were not read in time; running the slots");
            None
        }
    }
}
