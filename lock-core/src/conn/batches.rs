//! What batched script calls share (the tick claims of `acquire::claims`, the grouped releases
//! of `held::release::group`): items cut into calls, and a pipeline of calls sent once, again after
//! NOSCRIPT.

use std::ops::Range;

use deadpool_redis::redis::{self, ErrorKind, Script, ServerErrorKind, Value};

use crate::conn::deploy::slots::{self, Node};
use crate::conn::{Conn, Sent};

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

/// Sends `pipe` (script calls of `script`, one reply each, errors kept per reply) to `node`
/// once, recording the connection in `sent`; then, if the server had lost the script (a
/// restart, `SCRIPT FLUSH`), loads it and sends again the calls that replied NOSCRIPT, and
/// only those: NOSCRIPT means that call did nothing, but the pipeline's other calls may have
/// run (another client can load the script while the pipeline is being executed), and running
/// a claim or a release twice would misreport it.
pub(crate) async fn send(
    conn: &Conn,
    pipe: &redis::Pipeline,
    node: Option<Node>,
    script: &Script,
    sent: &Sent,
) -> Result<Vec<redis::RedisResult<Value>>, redis::RedisError> {
    let mut replies =
        conn.query_pipeline_once::<Vec<redis::RedisResult<Value>>>(pipe, node.clone(), sent).await?;
    let lost: Vec<usize> = (0..replies.len()).filter(|&i| is_noscript(&replies[i])).collect();
    if lost.is_empty() || replies.len() != pipe.len() || conn.load_script(script).await.is_err() {
        return Ok(replies);
    }
    let mut again = redis::pipe();
    again.ignore_errors();
    let mut lost_calls = lost.iter().peekable();
    for (i, cmd) in pipe.cmd_iter().enumerate() {
        if lost_calls.next_if(|&&l| l == i).is_some() {
            again.add_command(cmd.clone());
        }
    }
    let resent = conn.query_pipeline_once::<Vec<redis::RedisResult<Value>>>(&again, node, sent).await?;
    for (i, reply) in lost.into_iter().zip(resent) {
        replies[i] = reply;
    }
    Ok(replies)
}

fn is_noscript(reply: &redis::RedisResult<Value>) -> bool {
    reply.as_ref().is_err_and(|e| e.kind() == ErrorKind::Server(ServerErrorKind::NoScript))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use deadpool_redis::redis::{self, Value};
    use redis_fixture::RedisServer;

    use crate::conn::deploy::Deployment;
    use crate::conn::{Conn, Sent};
    use crate::schema::scripts::{RELEASE_OWN_MANY, lua};

    /// A pipeline whose first call finds no script and whose later call finds it (another
    /// client loaded it meanwhile: here a `SCRIPT LOAD` inside the pipeline stands for it):
    /// only the first call is sent again. Sent twice, the second release would find its lock
    /// already gone and report it not held (0).
    #[tokio::test]
    async fn after_noscript_only_the_calls_that_did_not_run_are_sent_again() {
        let server = RedisServer::start();
        let timeout = Duration::from_secs(5);
        let deployment = Deployment::single(&server.url(), None, None, None, 2, timeout).expect("deployment");
        let conn = Conn::new(deployment, timeout, crate::conn::eviction::EvictionCheck::Off);
        server.cli(&["SCRIPT", "FLUSH"]);
        server.cli(&["SET", "lock:first", "token-1"]);
        server.cli(&["SET", "lock:second", "token-2"]);
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.cmd("EVALSHA").arg(RELEASE_OWN_MANY.get_hash()).arg(1).arg("lock:first").arg("token-1");
        pipe.cmd("SCRIPT").arg("LOAD").arg(lua::RELEASE_OWN_MANY);
        pipe.cmd("EVALSHA").arg(RELEASE_OWN_MANY.get_hash()).arg(1).arg("lock:second").arg("token-2");
        let replies =
            super::send(&conn, &pipe, None, &RELEASE_OWN_MANY, &Sent::default()).await.expect("sent");
        let released = |reply: &redis::RedisResult<Value>| matches!(reply, Ok(Value::Array(v)) if v.as_slice() == [Value::Int(1)]);
        assert!(released(&replies[0]), "the first call, sent again, released: {replies:?}");
        assert!(released(&replies[2]), "the second call ran once and released: {replies:?}");
        assert_eq!(server.cli(&["EXISTS", "lock:first", "lock:second"]), "0");
    }
}
