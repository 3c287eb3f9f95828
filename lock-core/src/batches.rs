//! What batched script calls share (the tick claims of `claims`, the grouped releases of
//! `release_group`): items cut into calls, and a pipeline of calls sent once, again after
//! NOSCRIPT.

use std::ops::Range;

use deadpool_redis::redis::{self, ErrorKind, Script, ServerErrorKind, Value};

use crate::conn::{Conn, Sent};
use crate::deploy::slots::{self, Node};

/// Items per script call: large enough that the call's own cost is spread thin, small enough
/// that one call never keeps Redis busy for long (each item is a few µs of its time).
pub(crate) const CHUNK: usize = 200;

/// Sorts `items` by what their call must share (`call_of`; in a cluster the hash slot of
/// `key_of` too, since a script's keys must share a slot) and cuts them into calls of at most
/// [`CHUNK`] items: the ranges of `items` each call takes.
pub(crate) fn calls<T, K: Ord>(
    items: &mut [T],
    cluster: bool,
    key_of: impl Fn(&T) -> &str,
    call_of: impl Fn(&T) -> K,
) -> Vec<Range<usize>> {
    let of = |item: &T| (if cluster { slots::slot(key_of(item).as_bytes()) } else { 0 }, call_of(item));
    items.sort_by_key(&of);
    let mut calls = Vec::new();
    let mut start = 0;
    for end in 1..=items.len() {
        if end == items.len() || end - start == CHUNK || of(&items[end]) != of(&items[start]) {
            calls.push(start..end);
            start = end;
        }
    }
    calls
}

/// Sends `pipe` (script calls of `script`, errors kept per reply) to `node` once, recording
/// the connection in `sent`; again once if the server had lost the script (a restart, `SCRIPT
/// FLUSH`: NOSCRIPT means nothing ran).
pub(crate) async fn send(
    conn: &Conn,
    pipe: &redis::Pipeline,
    node: Option<Node>,
    script: &Script,
    sent: &Sent,
) -> Result<Vec<redis::RedisResult<Value>>, redis::RedisError> {
    let result = conn.query_pipeline_once::<Vec<redis::RedisResult<Value>>>(pipe, node.clone(), sent).await;
    if result.as_ref().is_ok_and(|replies| replies.iter().any(is_noscript))
        && conn.load_script(script).await.is_ok()
    {
        return conn.query_pipeline_once(pipe, node, sent).await;
    }
    result
}

fn is_noscript(reply: &redis::RedisResult<Value>) -> bool {
    reply.as_ref().is_err_and(|e| e.kind() == ErrorKind::Server(ServerErrorKind::NoScript))
}

/// Whether a call's error means it did not run here (a cluster redirection).
pub(crate) fn redirected(e: &redis::RedisError) -> bool {
    matches!(e.kind(), ErrorKind::Server(ServerErrorKind::Moved | ServerErrorKind::Ask))
}
