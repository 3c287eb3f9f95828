//! The Lua scripts behind acquire, release and extend: one round trip each, run by EVALSHA
//! (redis-rs loads a script on NOSCRIPT, e.g. after a server restart). User data reaches them
//! only through KEYS and ARGV.

use std::sync::LazyLock;

use deadpool_redis::redis::Script;

/// The scripted acquisition: with a fence, a tick to claim, or for a waiting caller (the
/// uncontended fail-fast path is a plain `SET NX PX GET`, see `acquire.rs`).
///
/// KEYS: lock key, waiter queue (list of tokens, oldest first), waiter tickets (zset: token ->
/// epoch ms), then the fence key (with fencing or a tick), and the tick key and its claimant
/// key (with a tick).
/// ARGV: token, lease ms, fencing ("1"/"0"), tick ("" for none), waiter ticket ms ("0": the
/// caller does not wait), hand-off ms.
///
/// Returns `{1, fence}` when acquired (fence 0 without fencing), `{0, ms, holder}` when held
/// (the holder's PTTL and token), `{2, last_tick, ours}` when the tick was already claimed
/// (`ours` = 1: the key holds the caller's token, which the caller must release).
///
/// The key holding the caller's token means it is the caller's: handed over by a release, or
/// taken by an earlier send of the same token whose reply was lost; its expiry is reset to the
/// full lease here. A free key goes to the oldest live waiter: a caller that is not that waiter
/// hands it over (and announces it) instead of barging. A refused waiting caller joins the
/// queue, or refreshes its ticket.
///
/// Fences are `max(counter + 1, server time in µs)`, so the counter may expire with the lock
/// (no counter per key is kept forever) and still strictly increases.
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local token, ticket = ARGV[1], tonumber(ARGV[5])
local holder = redis.call('GET', KEYS[1])
local own_claim = false
if ARGV[4] ~= '' then
  local last = redis.call('GET', KEYS[5])
  if last and tonumber(last) >= tonumber(ARGV[4]) then
    -- An earlier send of this very token claimed it (its reply was lost): ours.
    own_claim = holder == token and last == ARGV[4] and redis.call('GET', KEYS[6]) == token
    if not own_claim then
      -- The third element says the key holds our token (handed over): the caller passes it on.
      return {2, tonumber(last), holder == token and 1 or 0}
    end
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
    if redis.call('ZADD', KEYS[3], clock() + ticket, token) == 1 then
      redis.call('RPUSH', KEYS[2], token)
    end
    -- Only ever lengthened: a waiter with a shorter ticket must not expire the others'.
    if redis.call('PTTL', KEYS[3]) < ticket then
      redis.call('PEXPIRE', KEYS[2], ticket)
      redis.call('PEXPIRE', KEYS[3], ticket)
    end
  end
end
if holder and holder ~= token then
  wait_in_line()
  return {0, redis.call('PTTL', KEYS[1]), holder}
end
if holder then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if redis.call('ZREM', KEYS[3], token) == 1 then
    redis.call('LREM', KEYS[2], 1, token)
  end
else
  -- Free: the oldest live waiter first, dropping lapsed tickets (bounded).
  for _ = 1, 16 do
    local head = redis.call('LINDEX', KEYS[2], 0)
    if not head or head == token then break end
    local head_until = tonumber(redis.call('ZSCORE', KEYS[3], head))
    redis.call('LPOP', KEYS[2])
    redis.call('ZREM', KEYS[3], head)
    if head_until and head_until > clock() then
      redis.call('SET', KEYS[1], head, 'PX', ARGV[6])
      redis.call('PUBLISH', KEYS[1] .. ':released', head)
      wait_in_line()
      return {0, tonumber(ARGV[6]), head}
    end
  end
  redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
  if redis.call('ZREM', KEYS[3], token) == 1 then
    redis.call('LREM', KEYS[2], 1, token)
  end
end
local fence = 0
if ARGV[3] == '1' then
  local t = redis.call('TIME')
  local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
  fence = math.max((tonumber(redis.call('GET', KEYS[4])) or 0) + 1, floor)
  redis.call('SET', KEYS[4], string.format('%d', fence), 'PX', ARGV[2])
end
if ARGV[4] ~= '' and not own_claim then
  -- Expires (tick::TICK_TTL, 7 days): a replica never claims a slot older than that.
  redis.call('SET', KEYS[5], ARGV[4], 'PX', 604800000)
  -- Who claimed it, for a retry of this send whose reply is lost.
  redis.call('SET', KEYS[6], token, 'PX', ARGV[2])
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

/// Release = hand-off. KEYS: lock key, waiter queue, waiter tickets. ARGV: token, ms to keep
/// (0: release now), hand-off ms.
///
/// Returns 1 when the key held our token, else 0. With a minimum hold left, the key is kept
/// for it as `<token>:released` (still taken, no longer ours: a renewal in flight cannot
/// stretch it). Otherwise the key is handed to the oldest live waiter: set to its token for the
/// hand-off time, the waiter popped, and its token published on `<key>:released`, so exactly
/// that waiter wakes and confirms with the scripted acquisition. With nobody waiting the key is
/// deleted, and an empty message is published only if lapsed tickets were found (someone may
/// still be listening).
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if ARGV[2] ~= '0' then
  redis.call('SET', KEYS[1], ARGV[1] .. ':released', 'PX', ARGV[2])
  return 1
end
-- The common case first: nobody waits.
if not redis.call('LINDEX', KEYS[2], 0) then
  redis.call('DEL', KEYS[1])
  return 1
end
local lapsed = false
local now
for _ = 1, 16 do
  local head = redis.call('LINDEX', KEYS[2], 0)
  if not head then break end
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local head_until = tonumber(redis.call('ZSCORE', KEYS[3], head))
  redis.call('LPOP', KEYS[2])
  redis.call('ZREM', KEYS[3], head)
  if head_until and head_until > now then
    redis.call('SET', KEYS[1], head, 'PX', ARGV[3])
    redis.call('PUBLISH', KEYS[1] .. ':released', head)
    return 1
  end
  lapsed = true
end
redis.call('DEL', KEYS[1])
if lapsed then
  redis.call('PUBLISH', KEYS[1] .. ':released', '')
end
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
