//! The Lua scripts of the lock protocol, from `lua/*.lua` (each file's header states its KEYS,
//! ARGV and reply): one round trip each, run by EVALSHA ([`Eval`] loads a script on NOSCRIPT,
//! e.g. after a server restart). User data reaches them only through KEYS and ARGV; every key a
//! script touches is in KEYS and every expiry in ARGV.

use std::sync::LazyLock;

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

/// The scripts' source text, for tools that send them themselves (the bench's raw baseline).
pub mod lua {
    use std::sync::LazyLock;

    /// `acquire.lua` with the fragments it calls.
    pub const ACQUIRE: &str = concat!(
        include_str!("lua/handoff.lua"),
        include_str!("lua/lock_grant.lua"),
        include_str!("lua/acquire.lua")
    );
    /// `script` with `fragments` placed at its `-- fragments --` line, so that its common case
    /// returns before their functions are even defined (or ahead of it, without the line).
    fn placed(fragments: &str, script: &str) -> String {
        match script.split_once("-- fragments --\n") {
            Some((head, tail)) => format!("{head}{fragments}{tail}"),
            None => format!("{fragments}{script}"),
        }
    }
    /// `release.lua` with the fragments it calls, placed at its `-- fragments --` line: the
    /// common case (a compare-and-delete) returns before their functions are defined.
    pub static RELEASE: LazyLock<String> = LazyLock::new(|| {
        placed(
            concat!(include_str!("lua/handoff.lua"), include_str!("lua/lock_grant.lua")),
            include_str!("lua/release.lua"),
        )
    });
    /// `release_own.lua`: the holder's release when nobody queued (one key).
    pub const RELEASE_OWN: &str = include_str!("lua/release_own.lua");
    /// `release_own_many.lua`: holders' releases of many locks when nobody queued.
    pub const RELEASE_OWN_MANY: &str = include_str!("lua/release_own_many.lua");
    /// `abandon.lua` with the fragments it calls.
    pub const ABANDON: &str = concat!(
        include_str!("lua/handoff.lua"),
        include_str!("lua/lock_grant.lua"),
        include_str!("lua/abandon.lua")
    );
    /// `extend.lua`.
    pub const EXTEND: &str = include_str!("lua/extend.lua");
    /// `sem_acquire.lua` with the fragments it calls, placed at its `-- fragments --` line (the
    /// idle semaphore's permit is taken before).
    pub static SEM_ACQUIRE: LazyLock<String> = LazyLock::new(|| {
        placed(
            concat!(include_str!("lua/handoff.lua"), include_str!("lua/sem_grant.lua")),
            include_str!("lua/sem_acquire.lua"),
        )
    });
    /// `sem_release.lua` with the fragments it calls, placed at its `-- fragments --` line (a
    /// release with nobody queued returns before).
    pub static SEM_RELEASE: LazyLock<String> = LazyLock::new(|| {
        placed(
            concat!(include_str!("lua/handoff.lua"), include_str!("lua/sem_grant.lua")),
            include_str!("lua/sem_release.lua"),
        )
    });
    /// `sem_count.lua`.
    pub const SEM_COUNT: &str = include_str!("lua/sem_count.lua");
    /// `rw_acquire.lua` with the fragments it calls.
    pub const RW_ACQUIRE: &str = concat!(
        include_str!("lua/handoff.lua"),
        include_str!("lua/rw_grant.lua"),
        include_str!("lua/rw_acquire.lua")
    );
    /// `rw_release.lua` with the fragments it calls.
    pub const RW_RELEASE: &str = concat!(
        include_str!("lua/handoff.lua"),
        include_str!("lua/rw_grant.lua"),
        include_str!("lua/rw_release.lua")
    );
    /// `claim_ticks.lua`: a scheduler tick claimed for many locks at once.
    pub const CLAIM_TICKS: &str = include_str!("lua/claim_ticks.lua");
    /// `member_renew.lua`.
    pub const MEMBER_RENEW: &str = include_str!("lua/member_renew.lua");
}

/// The scripted acquisition (`lua/acquire.lua`).
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(lua::ACQUIRE));

/// Release = hand-off (`lua/release.lua`).
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(&lua::RELEASE));

/// The holder's release when nobody queued (`lua/release_own.lua`); replies -1 when
/// [`RELEASE`] is needed.
pub(crate) static RELEASE_OWN: LazyLock<Script> = LazyLock::new(|| Script::new(lua::RELEASE_OWN));

/// Many locks taken, each claiming a scheduler tick (`lua/claim_ticks.lua`).
pub(crate) static CLAIM_TICKS: LazyLock<Script> = LazyLock::new(|| Script::new(lua::CLAIM_TICKS));

/// [`RELEASE_OWN`] for many locks at once (`lua/release_own_many.lua`).
pub(crate) static RELEASE_OWN_MANY: LazyLock<Script> = LazyLock::new(|| Script::new(lua::RELEASE_OWN_MANY));

/// A token given up, its reservation passed on (`lua/abandon.lua`).
pub(crate) static ABANDON: LazyLock<Script> = LazyLock::new(|| Script::new(lua::ABANDON));

/// A renewal (`lua/extend.lua`).
pub(crate) static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(lua::EXTEND));

/// Taking a semaphore's permit (`lua/sem_acquire.lua`).
pub(crate) static SEM_ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(&lua::SEM_ACQUIRE));

/// Giving a permit back, or a token up (`lua/sem_release.lua`).
pub(crate) static SEM_RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(&lua::SEM_RELEASE));

/// Counting a semaphore's taken permits (`lua/sem_count.lua`).
pub(crate) static SEM_COUNT: LazyLock<Script> = LazyLock::new(|| Script::new(lua::SEM_COUNT));

/// Taking a read or write hold (`lua/rw_acquire.lua`).
pub(crate) static RW_ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(lua::RW_ACQUIRE));

/// Giving a read or write hold back, or a token up (`lua/rw_release.lua`).
pub(crate) static RW_RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(lua::RW_RELEASE));

/// Renewing a permit or a read hold (`lua/member_renew.lua`).
pub(crate) static MEMBER_RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(lua::MEMBER_RENEW));
