//! The Lua scripts behind acquire, release and extend: one round trip each, run by EVALSHA
//! (redis-rs loads a script on NOSCRIPT, e.g. after a server restart). User data reaches them
//! only through KEYS and ARGV.

use std::sync::LazyLock;

use deadpool_redis::redis::Script;

/// KEYS: lock key, waiter queue (list of tokens, oldest first), waiter expiries (zset: token ->
/// epoch ms), then the fence key (with fencing or a tick) and the tick key (with a tick).
/// ARGV: token, lease ms, fencing ("1"/"0"), tick ("" for none), waiter ticket ms ("0": the
/// caller does not wait). Returns `{1, fence}` when acquired (fence 0 without fencing),
/// `{0, ms}` when held by another owner (its PTTL) or owed to an older waiter (until that
/// waiter's ticket lapses), `{2, last_tick}` when the tick was already claimed.
///
/// A free lock goes to the oldest live waiter of any client: callers that find others queued
/// ahead of them do not barge, and a waiting caller that is refused joins the queue (or
/// refreshes its ticket). Tickets of waiters that died lapse after the ticket time.
///
/// `SET NX GET` (Redis 7.0+) makes acquisition idempotent per token: a retry after a lost reply
/// finds its own token and succeeds instead of locking itself out until the lease ends.
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local token, ticket = ARGV[1], tonumber(ARGV[5])
if ARGV[4] ~= '' then
  local last = redis.call('GET', KEYS[5])
  -- A retry of our own successful claim (reply lost) finds our token and goes on.
  if last and tonumber(last) >= tonumber(ARGV[4]) and redis.call('GET', KEYS[1]) ~= token then
    return {2, tonumber(last)}
  end
end
local now
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end
local function wait_in_line()
  if ticket > 0 then
    if not redis.call('ZSCORE', KEYS[3], token) then
      redis.call('RPUSH', KEYS[2], token)
    end
    redis.call('ZADD', KEYS[3], clock() + ticket, token)
    redis.call('PEXPIRE', KEYS[2], ticket)
    redis.call('PEXPIRE', KEYS[3], ticket)
  end
end
-- The oldest live waiter, dropping tickets that lapsed (bounded: a refusal is always safe).
local head = redis.call('LINDEX', KEYS[2], 0)
local head_until
for _ = 1, 16 do
  if not head or head == token then break end
  head_until = tonumber(redis.call('ZSCORE', KEYS[3], head))
  if head_until and head_until > clock() then break end
  redis.call('LPOP', KEYS[2])
  redis.call('ZREM', KEYS[3], head)
  head, head_until = redis.call('LINDEX', KEYS[2], 0), nil
end
if head and head ~= token then
  wait_in_line()
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl < 0 then
    pttl = (head_until or clock()) - clock()
  end
  return {0, pttl}
end
local prev = redis.call('SET', KEYS[1], token, 'NX', 'PX', ARGV[2], 'GET')
if prev and prev ~= token then
  wait_in_line()
  return {0, redis.call('PTTL', KEYS[1])}
end
if prev then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if head == token then
  redis.call('LPOP', KEYS[2])
  redis.call('ZREM', KEYS[3], token)
end
local fence = 0
if ARGV[3] == '1' then
  fence = redis.call('INCR', KEYS[4])
end
if ARGV[4] ~= '' then
  redis.call('SET', KEYS[5], ARGV[4])
end
return {1, fence}
",
    )
});

/// KEYS: waiter queue, waiter expiries. ARGV: token. Removes a waiter that stopped waiting
/// without the lock (timed out, cancelled, failed), so it does not hold up the queue until its
/// ticket lapses.
pub(crate) static LEAVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
redis.call('LREM', KEYS[1], 1, ARGV[1])
return redis.call('ZREM', KEYS[2], ARGV[1])
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
