//! The Lua scripts of the lock protocol, each put together from its `.lua` file (beside the
//! operation that sends it: `acquire/`, `release/`, `renewal/`, `claim_ticks/`,
//! `release_own_many/`, `permit_count/`) and the fragments it calls (`fragments/`). Each file's
//! header states its KEYS, ARGV and reply. One round trip each, run by EVALSHA
//! ([`Eval`](super::eval::Eval) loads a script on NOSCRIPT, e.g. after a server restart). User
//! data reaches them only through KEYS and ARGV; every key a script touches is in KEYS and every
//! expiry in ARGV.

use std::sync::LazyLock;

use deadpool_redis::redis::Script;

/// The scripts' source text, for tools that send them themselves (the bench's raw baseline).
pub mod lua {
    use std::sync::LazyLock;

    /// `acquire.lua` with the fragments it calls.
    pub const ACQUIRE: &str = concat!(
        include_str!("fragments/handoff.lua"),
        include_str!("fragments/lock_grant.lua"),
        include_str!("acquire/acquire.lua")
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
            concat!(include_str!("fragments/handoff.lua"), include_str!("fragments/lock_grant.lua")),
            include_str!("release/release.lua"),
        )
    });
    /// `release_own.lua`: the holder's release when nobody queued (one key).
    pub const RELEASE_OWN: &str = include_str!("release/release_own.lua");
    /// `release_own_many.lua`: holders' releases of many locks when nobody queued.
    pub const RELEASE_OWN_MANY: &str = include_str!("release_own_many/release_own_many.lua");
    /// `abandon.lua` with the fragments it calls.
    pub const ABANDON: &str = concat!(
        include_str!("fragments/handoff.lua"),
        include_str!("fragments/lock_grant.lua"),
        include_str!("release/abandon.lua")
    );
    /// `extend.lua`.
    pub const EXTEND: &str = include_str!("renewal/extend.lua");
    /// `sem_acquire.lua` with the fragments it calls, placed at its `-- fragments --` line (the
    /// idle semaphore's permit is taken before).
    pub static SEM_ACQUIRE: LazyLock<String> = LazyLock::new(|| {
        placed(
            concat!(include_str!("fragments/handoff.lua"), include_str!("fragments/sem_grant.lua")),
            include_str!("acquire/sem_acquire.lua"),
        )
    });
    /// `sem_release.lua` with the fragments it calls, placed at its `-- fragments --` line (a
    /// release with nobody queued returns before).
    pub static SEM_RELEASE: LazyLock<String> = LazyLock::new(|| {
        placed(
            concat!(include_str!("fragments/handoff.lua"), include_str!("fragments/sem_grant.lua")),
            include_str!("release/sem_release.lua"),
        )
    });
    /// `sem_count.lua`.
    pub const SEM_COUNT: &str = include_str!("permit_count/sem_count.lua");
    /// `rw_acquire.lua` with the fragments it calls.
    pub const RW_ACQUIRE: &str = concat!(
        include_str!("fragments/handoff.lua"),
        include_str!("fragments/rw_grant.lua"),
        include_str!("acquire/rw_acquire.lua")
    );
    /// `rw_release.lua` with the fragments it calls.
    pub const RW_RELEASE: &str = concat!(
        include_str!("fragments/handoff.lua"),
        include_str!("fragments/rw_grant.lua"),
        include_str!("release/rw_release.lua")
    );
    /// `claim_ticks.lua`: a scheduler tick claimed for many locks at once.
    pub const CLAIM_TICKS: &str = include_str!("claim_ticks/claim_ticks.lua");
    /// `member_renew.lua`.
    pub const MEMBER_RENEW: &str = include_str!("renewal/member_renew.lua");
}

/// The scripted acquisition (`acquire/acquire.lua`).
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(lua::ACQUIRE));

/// Release = hand-off (`release/release.lua`).
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(&lua::RELEASE));

/// The holder's release when nobody queued (`release/release_own.lua`); replies -1 when
/// [`RELEASE`] is needed.
pub(crate) static RELEASE_OWN: LazyLock<Script> = LazyLock::new(|| Script::new(lua::RELEASE_OWN));

/// Many locks taken, each claiming a scheduler tick (`claim_ticks/claim_ticks.lua`).
pub(crate) static CLAIM_TICKS: LazyLock<Script> = LazyLock::new(|| Script::new(lua::CLAIM_TICKS));

/// [`RELEASE_OWN`] for many locks at once (`release_own_many/release_own_many.lua`).
pub(crate) static RELEASE_OWN_MANY: LazyLock<Script> = LazyLock::new(|| Script::new(lua::RELEASE_OWN_MANY));

/// A token given up, its reservation passed on (`release/abandon.lua`).
pub(crate) static ABANDON: LazyLock<Script> = LazyLock::new(|| Script::new(lua::ABANDON));

/// A renewal (`renewal/extend.lua`).
pub(crate) static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(lua::EXTEND));

/// Taking a semaphore's permit (`acquire/sem_acquire.lua`).
pub(crate) static SEM_ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(&lua::SEM_ACQUIRE));

/// Giving a permit back, or a token up (`release/sem_release.lua`).
pub(crate) static SEM_RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(&lua::SEM_RELEASE));

/// Counting a semaphore's taken permits (`permit_count/sem_count.lua`).
pub(crate) static SEM_COUNT: LazyLock<Script> = LazyLock::new(|| Script::new(lua::SEM_COUNT));

/// Taking a read or write hold (`acquire/rw_acquire.lua`).
pub(crate) static RW_ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(lua::RW_ACQUIRE));

/// Giving a read or write hold back, or a token up (`release/rw_release.lua`).
pub(crate) static RW_RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(lua::RW_RELEASE));

/// Renewing a permit or a read hold (`renewal/member_renew.lua`).
pub(crate) static MEMBER_RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(lua::MEMBER_RENEW));
