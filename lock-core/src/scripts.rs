//! The Lua scripts behind acquire, release and extend: one round trip each, run by EVALSHA
//! ([`Eval`] loads a script on NOSCRIPT, e.g. after a server restart). User data reaches them
//! only through KEYS and ARGV.

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

/// The scripted acquisition: with a fence, a tick to claim, or for a waiting caller (the
/// uncontended fail-fast path is a plain `SET NX PX GET`, see `acquire.rs`).
///
/// KEYS: lock key, waiter queue (list of `<hand-off ms>|<token>` entries, oldest first), waiter
/// tickets (zset: token -> epoch ms), then the fence key (with fencing or a tick), and the tick
/// key and its claimant key (with a tick).
/// ARGV: token, lease ms, fencing ("1"/"0"), tick ("" for none), waiter ticket ms ("0": the
/// caller does not wait), the caller's hand-off ms (how long a lock handed to it stays
/// reserved: the waiter decides, since it is the one trusting the reservation), publish
/// command (`PUBLISH`, or `SPUBLISH` in a cluster: the channel is in the key's slot).
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
local entry = ARGV[6] .. '|' .. token
-- A holder's value ends in `|w` once someone queued behind it (see RELEASE).
local holder = redis.call('GET', KEYS[1])
local marked = holder and string.sub(holder, -2) == '|w'
if marked then holder = string.sub(holder, 1, -3) end
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
      redis.call('RPUSH', KEYS[2], entry)
    end
    -- Only ever lengthened: a waiter with a shorter ticket must not expire the others'.
    if redis.call('PTTL', KEYS[3]) < ticket then
      redis.call('PEXPIRE', KEYS[2], ticket)
      redis.call('PEXPIRE', KEYS[3], ticket)
    end
  end
end
-- The value to store for `owner`: marked while someone waits, so its release hands over.
local function value_for(owner)
  if redis.call('LLEN', KEYS[2]) > 0 then return owner .. '|w' end
  return owner
end
if holder and holder ~= token then
  wait_in_line()
  if ticket > 0 and not marked then
    redis.call('SET', KEYS[1], holder .. '|w', 'KEEPTTL')
  end
  return {0, redis.call('PTTL', KEYS[1]), holder}
end
if holder then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if redis.call('ZREM', KEYS[3], token) == 1 then
    redis.call('LREM', KEYS[2], 1, entry)
  end
else
  -- Free: the oldest live waiter first, dropping lapsed tickets (bounded).
  local queued = true
  for _ = 1, 16 do
    local head = redis.call('LINDEX', KEYS[2], 0)
    if not head then
      queued = false
      break
    end
    if head == entry then break end
    local ms, waiter = string.match(head, '^(%d+)|(.+)$')
    local until_ms = waiter and tonumber(redis.call('ZSCORE', KEYS[3], waiter))
    redis.call('LPOP', KEYS[2])
    if waiter then redis.call('ZREM', KEYS[3], waiter) end
    if until_ms and until_ms > clock() then
      wait_in_line()
      redis.call('SET', KEYS[1], value_for(waiter), 'PX', ms)
      -- Its client's channel (keys.rs): the queue's name with `released:<client id>` for
      -- `waiters`; the client id is the token's second field from the end.
      local client = string.match(waiter, ':(%x+):[^:]+$')
      if client then
        redis.call(ARGV[7], string.sub(KEYS[2], 1, -8) .. 'released:' .. client, waiter)
      end
      return {0, tonumber(ms), waiter}
    end
  end
  -- Only a waiting caller (with a ticket) can have queued this token.
  if ticket > 0 and redis.call('ZREM', KEYS[3], token) == 1 then
    redis.call('LREM', KEYS[2], 1, entry)
  end
  -- An empty queue (seen above) needs no LLEN: the common uncontended claim.
  redis.call('SET', KEYS[1], queued and value_for(token) or token, 'PX', ARGV[2])
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

/// KEYS: waiter queue, waiter tickets. ARGV: token, its queue entry (`<hand-off ms>|<token>`).
/// Removes a waiter that stopped waiting without the lock (timed out, cancelled, failed), so
/// it does not hold up the queue until its ticket lapses.
pub(crate) static LEAVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
redis.call('LREM', KEYS[1], 1, ARGV[2])
return redis.call('ZREM', KEYS[2], ARGV[1])
",
    )
});

/// Release = hand-off. KEYS: lock key. ARGV: token; then, only when needed, ms to keep
/// ("0": none) and the publish command (default `PUBLISH`; `SPUBLISH` in a cluster, where the
/// channel is in the key's slot).
///
/// Returns 1 when the key held our token, else 0. With a minimum hold left, the key is kept
/// for it as `<token>:released` (still taken, no longer ours: a renewal in flight cannot
/// stretch it). Otherwise, if someone waits, the key is handed to the oldest live waiter: set
/// to its token for the hand-off time that waiter asked for, the waiter popped, and its token
/// published on its client's release channel (`{<key>}:released:<client id>`), so exactly that
/// waiter's client hears it and only that waiter wakes. With nobody waiting the key is deleted;
/// an empty message goes to the clients of lapsed tickets found on the way (they may still be
/// listening).
///
/// Whether someone waits is read from the value itself: a caller that joins the queue behind a
/// holder appends `|w` to the holder's value (ACQUIRE), and a value stored while the queue is
/// not empty carries it. So the common case (nobody ever queued) is exactly a bare
/// compare-and-delete: one key, one argument, GET and DEL; looking the queue up on every
/// release cost more than the compare-and-delete itself. The queue, tickets and channel names
/// are derived here from the lock key exactly as `keys.rs` derives them; they share its hash
/// slot, which is what Redis Cluster checks for keys a script touches.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local key, token, keep = KEYS[1], ARGV[1], ARGV[2]
local value = redis.call('GET', key)
if keep == '0' then keep = nil end
if value == token and not keep then
  redis.call('DEL', key)
  return 1
end
if value ~= token and value ~= token .. '|w' then
  return 0
end
if keep then
  redis.call('SET', key, token .. ':released', 'PX', keep)
  return 1
end
local publish = ARGV[3] or 'PUBLISH'
-- keys.rs's aux(): a key with a non-empty hash tag keeps it, any other is wrapped in one.
local open = string.find(key, '{', 1, true)
local close = open and string.find(key, '}', open + 1, true)
local aux = (close and close > open + 1) and (key .. ':') or ('{' .. key .. '}:')
local queue, tickets = aux .. 'waiters', aux .. 'waiters:until'
-- The client id is the token's second field from the end (`<instance>:<client>:<uuid>`).
local function announce(waiter, message)
  local client = string.match(waiter, ':(%x+):[^:]+$')
  if client then redis.call(publish, aux .. 'released:' .. client, message) end
end
local now
for _ = 1, 16 do
  local head = redis.call('LINDEX', queue, 0)
  if not head then break end
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local ms, waiter = string.match(head, '^(%d+)|(.+)$')
  local until_ms = waiter and tonumber(redis.call('ZSCORE', tickets, waiter))
  redis.call('LPOP', queue)
  if waiter then redis.call('ZREM', tickets, waiter) end
  if until_ms and until_ms > now then
    if redis.call('LLEN', queue) > 0 then
      redis.call('SET', key, waiter .. '|w', 'PX', ms)
    else
      redis.call('SET', key, waiter, 'PX', ms)
    end
    announce(waiter, waiter)
    return 1
  end
  -- A lapsed ticket: its client may still be listening, and retries when told.
  if waiter then announce(waiter, '') end
end
redis.call('DEL', key)
return 1
",
    )
});

/// KEYS: lock key. ARGV: token, lease ms. Returns 1 when the key held our token (marked or
/// not, see RELEASE) and its expiry was reset to the lease, else 0. Never creates the key, so
/// a renewal cannot resurrect a released or expired lock.
pub(crate) static EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local value = redis.call('GET', KEYS[1])
if value == ARGV[1] or value == ARGV[1] .. '|w' then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
",
    )
});
