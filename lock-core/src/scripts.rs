//! The Lua scripts behind acquire, release and extend: one round trip each, run by EVALSHA
//! (redis-rs loads a script on NOSCRIPT, e.g. after a server restart). User data reaches them
//! only through KEYS and ARGV.

use std::sync::LazyLock;

use deadpool_redis::redis::Script;

/// KEYS: lock key, then the fence key (with fencing or a tick) and the tick key (with a tick).
/// ARGV: token, lease ms, fencing ("1"/"0"), tick ("" for none). Returns `{1, fence}` when acquired (fence 0 without fencing), `{0, pttl}` when held by
/// another owner, `{2, last_tick}` when the tick was already claimed.
///
/// `SET NX GET` (Redis 7.0+) makes acquisition idempotent per token: a retry after a lost reply
/// finds its own token and succeeds instead of locking itself out until the lease ends.
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if ARGV[4] ~= '' then
  local last = redis.call('GET', KEYS[3])
  -- A retry of our own successful claim (reply lost) finds our token and goes on.
  if last and tonumber(last) >= tonumber(ARGV[4]) and redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return {2, tonumber(last)}
  end
end
local prev = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')
if prev and prev ~= ARGV[1] then
  return {0, redis.call('PTTL', KEYS[1])}
end
if prev then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
local fence = 0
if ARGV[3] == '1' then
  fence = redis.call('INCR', KEYS[2])
end
if ARGV[4] ~= '' then
  redis.call('SET', KEYS[3], ARGV[4])
end
return {1, fence}
",
    )
});

/// KEYS: lock key. ARGV: token, ms to keep (0: delete); the release channel is
/// `<key>:released` (see `keys::release_channel`). Returns 1 when the key
/// held our token (and is now deleted, or kept for the rest of the minimum hold as
/// `<token>:released`), else 0.
/// Only a deletion is announced: a kept lock is still taken.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local keep = tonumber(ARGV[2])
if keep > 0 then
  -- Still taken for the rest of the minimum hold, but no longer ours: a renewal in flight
  -- cannot match the token and stretch it back to a full lease.
  redis.call('SET', KEYS[1], ARGV[1] .. ':released', 'PX', keep)
  return 1
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[1] .. ':released', ARGV[1])
return 1
",
    )
});

/// KEYS: lock key. ARGV: token, lease ms. Returns 1 when the key held our token and its expiry
/// was reset to the lease, else 0. Never creates the key, so a renewal cannot resurrect a
/// released or expired lock.
pub(crate) static EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
",
    )
});
