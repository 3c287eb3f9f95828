//! [`Eval`]: one EVALSHA of a script, built in a single buffer.

use deadpool_redis::redis::{
    self, Cmd, ErrorKind, FromRedisValue, RedisResult, Script, ServerErrorKind, ToRedisArgs,
};

/// One EVALSHA of a script, built in a single buffer. redis-rs's `ScriptInvocation` allocates
/// each key and argument on its own and copies them into the command when it is sent; on the
/// acquire and release paths that cost more than the rest of the command's encoding.
pub(crate) struct Eval {
    script: &'static Script,
    cmd: Cmd,
}

impl Eval {
    /// EVALSHA of `script` with `keys`; the arguments follow with [`arg`](Self::arg).
    pub(crate) fn new<K: AsRef<str>>(script: &'static Script, keys: &[K]) -> Self {
        let hash = script.get_hash();
        let data = keys.iter().map(|k| k.as_ref().len() + 16).sum::<usize>() + hash.len() + 128;
        let mut cmd = Cmd::with_capacity(3 + keys.len() + 8, data);
        cmd.arg("EVALSHA").arg(hash).arg(keys.len());
        for key in keys {
            cmd.arg(key.as_ref());
        }
        Eval { script, cmd }
    }

    /// Appends an argument (ARGV).
    pub(crate) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        self.cmd.arg(arg);
        self
    }

    /// Runs it on `conn`, loading the script first if the server does not have it (a restart,
    /// `SCRIPT FLUSH`, a failover to a node that never ran it): NOSCRIPT means it did not run,
    /// so sending it again is safe.
    pub(crate) async fn run<T: FromRedisValue>(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
    ) -> RedisResult<T> {
        match self.cmd.query_async(conn).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.script.load_async(conn).await?;
                self.cmd.query_async(conn).await
            }
            result => result,
        }
    }
}
