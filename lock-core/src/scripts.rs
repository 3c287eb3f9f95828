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

/// Lua shared by ACQUIRE, RELEASE and ABANDON: the client id of a token, the server clock, and
/// `hand_over`, which passes a free (or freed) key to the oldest waiter that can take it.
///
/// The queue (`{<key>}:waiters`, a list of `<hand-off ms>|<token>`, oldest first) and the tickets
/// (`{<key>}:waiters:until`, a zset) are read a few entries at a time. A waiter is skipped (and
/// dropped) when its ticket lapsed, or when its client let a reservation lapse untaken: each
/// hand-off records `@<client id>` in the tickets zset, scored with the reservation's deadline,
/// and a record whose deadline has passed means that client did not take the lock it was given
/// (it died, or stalled past the hand-off time), so its other tickets are not trusted with a
/// reservation either. A client proves itself alive again by queueing a new ticket or releasing
/// (both clear its record); the caller's own client (`me`) is never skipped. So a dead client
/// costs one hand-off time, however many of its tickets are queued. A record is scored negative
/// once it has been counted as lapsed. The record shares the zset's expiry, which outlasts every
/// ticket it could concern; a record has no `:` (every token has two), so it cannot be taken
/// for a ticket.
///
/// `hand_over(key, queue, tickets, me, own, publish, prefix)`: `own` is the caller's own queue
/// entry, if it waits (reaching it means the caller is next); `publish` announces on
/// `prefix .. 'released:' .. <client id>` (the waiter's client's channel, see `keys.rs`).
/// Returns `outcome, ms, waiter, lapsed, more`: outcome `'handed'` (the key now holds `waiter`'s
/// token for `ms`, announced), `'own'` (the caller is the oldest live waiter, now out of the
/// queue; nothing was set) or nil (nobody can take it; nothing was set), the number of lapsed
/// reservations noticed, and whether anyone is still queued.
const HANDOFF_LUA: &str = r"
local function client_of(token)
  return string.match(token, ':(%x+):[^:]+$')
end
local now
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end
local function hand_over(key, queue, tickets, me, own, publish, prefix)
  local lapsed, counted = 0, {}
  -- The head is usually live: a small first read (a zset this small is a list that ZMSCORE
  -- scans). Bounded: a queue of more than 1000 dead entries is left for the next release.
  for round = 1, 34 do
    local size = round == 1 and 2 or 32
    local chunk = redis.call('LRANGE', queue, 0, size - 1)
    if #chunk == 0 then return nil, 0, nil, lapsed, false end
    local parsed, members = {}, {}
    for i, entry in ipairs(chunk) do
      local ms, waiter = string.match(entry, '^(%d+)|(.+)$')
      local client = waiter and client_of(waiter)
      parsed[i] = {ms, waiter, client}
      members[2 * i - 1] = waiter or entry
      members[2 * i] = '@' .. (client or '-')
    end
    local scores = redis.call('ZMSCORE', tickets, unpack(members))
    local dropped = {}
    local chosen
    for i, entry in ipairs(chunk) do
      local ms, waiter, client = parsed[i][1], parsed[i][2], parsed[i][3]
      if waiter then dropped[#dropped + 1] = waiter end
      if entry == own then
        chosen = i
        break
      end
      local until_ms, record = tonumber(scores[2 * i - 1]), tonumber(scores[2 * i])
      local gone = record and record <= clock() and client ~= me
      if gone and record > 0 and not counted[client] then
        -- First noticed: counted once, and kept (negative) so the client's other tickets are skipped.
        counted[client] = true
        lapsed = lapsed + 1
        redis.call('ZADD', tickets, -record, '@' .. client)
      end
      if until_ms and until_ms > clock() and not gone then
        chosen = i
        break
      end
      -- A lapsed ticket of a live client: it may still be listening, and retries when told.
      if client and not gone then redis.call(publish, prefix .. 'released:' .. client, '') end
    end
    if chosen then
      local ms, waiter, client = parsed[chosen][1], parsed[chosen][2], parsed[chosen][3]
      local more = chosen < #chunk or (#chunk == size and redis.call('LLEN', queue) > chosen)
      if chunk[chosen] ~= own then
        redis.call('SET', key, more and (waiter .. '|w') or waiter, 'PX', ms)
        -- Recorded before the tokens leave the zset, so the zset (and its expiry) stays.
        if client then redis.call('ZADD', tickets, clock() + tonumber(ms), '@' .. client) end
      end
      -- The caller's client is alive: its record goes (unless it was just handed the key).
      if me and (chunk[chosen] == own or client ~= me) then dropped[#dropped + 1] = '@' .. me end
      redis.call('LTRIM', queue, chosen, -1)
      if #dropped > 0 then redis.call('ZREM', tickets, unpack(dropped)) end
      if chunk[chosen] == own then return 'own', 0, nil, lapsed, more end
      if client then redis.call(publish, prefix .. 'released:' .. client, waiter) end
      return 'handed', tonumber(ms), waiter, lapsed, more
    end
    redis.call('LTRIM', queue, #chunk, -1)
    if #dropped > 0 then redis.call('ZREM', tickets, unpack(dropped)) end
  end
  return nil, 0, nil, lapsed, redis.call('LLEN', queue) > 0
end
";

/// The scripted acquisition: with a fence, a tick to claim, or for a waiting caller (the
/// uncontended fail-fast path is a plain `SET NX PX GET`, see `acquire.rs`).
///
/// KEYS: lock key, waiter queue, waiter tickets (zset: token -> epoch ms, and the hand-off
/// records of [`HANDOFF_LUA`]), then the fence key (with fencing or a tick), and the tick key
/// and its claimant key (with a tick).
/// ARGV: token, lease ms, fencing ("1"/"0"), tick ("" for none), waiter ticket ms ("0": the
/// caller does not wait), the caller's hand-off ms (how long a lock handed to it stays
/// reserved: the waiter decides, since it is the one trusting the reservation), publish
/// command (`PUBLISH`, or `SPUBLISH` in a cluster: the channel is in the key's slot).
///
/// Returns `{1, fence, lapsed}` when acquired (fence 0 without fencing), `{0, ms, holder,
/// lapsed}` when held (the holder's PTTL and token), `{2, last_tick, ours}` when the tick was
/// already claimed (`ours` = 1: the key holds the caller's token, which the caller must
/// release). `lapsed`: hand-offs noticed to have lapsed untaken (see [`HANDOFF_LUA`]).
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
    Script::new(&format!(
        "{HANDOFF_LUA}{}",
        r"
local token, ticket = ARGV[1], tonumber(ARGV[5])
local entry = ARGV[6] .. '|' .. token
local me = client_of(token)
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
local function wait_in_line()
  if ticket > 0 then
    if redis.call('ZADD', KEYS[3], clock() + ticket, token) == 1 then
      redis.call('RPUSH', KEYS[2], entry)
      -- A new ticket proves the client alive: its lapsed hand-off record goes.
      if me then redis.call('ZREM', KEYS[3], '@' .. me) end
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
  if ticket > 0 and not marked then
    redis.call('SET', KEYS[1], holder .. '|w', 'KEEPTTL')
  end
  return {0, redis.call('PTTL', KEYS[1]), holder, 0}
end
local lapsed = 0
if holder then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if redis.call('ZREM', KEYS[3], token) == 1 then
    redis.call('LREM', KEYS[2], 1, entry)
  end
else
  -- Free: the oldest live waiter first.
  local outcome, ms, waiter, more
  outcome, ms, waiter, lapsed, more = hand_over(KEYS[1], KEYS[2], KEYS[3], me, ticket > 0 and entry or nil,
    ARGV[7], string.sub(KEYS[2], 1, -8))
  if outcome == 'handed' then
    wait_in_line()
    return {0, ms, waiter, lapsed}
  end
  if not outcome and more and ticket > 0 then
    -- Past the bound of dead entries: this token may still be queued further back.
    redis.call('ZREM', KEYS[3], token)
    redis.call('LREM', KEYS[2], 1, entry)
  end
  redis.call('SET', KEYS[1], more and (token .. '|w') or token, 'PX', ARGV[2])
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
return {1, fence, lapsed}
"
    ))
});

/// How RELEASE and ABANDON find the queue, tickets and channel names from the lock key, exactly
/// as `keys.rs` derives them (they share its hash slot, which is what Redis Cluster checks for
/// the keys a script touches): a key with a non-empty hash tag keeps it, any other is wrapped in
/// one.
const AUX_NAMES_LUA: &str = r"
local function aux_of(key)
  local open = string.find(key, '{', 1, true)
  local close = open and string.find(key, '}', open + 1, true)
  return (close and close > open + 1) and (key .. ':') or ('{' .. key .. '}:')
end
";

/// Release = hand-off. KEYS: lock key. ARGV: token; then, only when needed, ms to keep
/// ("0": none), the publish command (default `PUBLISH`; `SPUBLISH` in a cluster, where the
/// channel is in the key's slot) and "1" when the caller is not the holder (a take-over or a
/// force-release: the holder's client is then not known to be alive).
///
/// Returns 1 when the key held our token, else 0; `{1, lapsed}` when hand-offs were noticed to
/// have lapsed untaken on the way (see [`HANDOFF_LUA`]). With a minimum hold left, the key is
/// kept for it as `<token>:released` (still taken, no longer ours: a renewal in flight cannot
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
/// release cost more than the compare-and-delete itself.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{HANDOFF_LUA}{AUX_NAMES_LUA}{}",
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
local aux = aux_of(key)
local me = ARGV[4] ~= '1' and client_of(token) or nil
local outcome, _, _, lapsed = hand_over(key, aux .. 'waiters', aux .. 'waiters:until', me, nil,
  ARGV[3] or 'PUBLISH', aux)
if not outcome then redis.call('DEL', key) end
if lapsed > 0 then return {1, lapsed} end
return 1
"
    ))
});

/// A waiter, or an acquisition whose outcome is unknown, giving its token up. KEYS: lock key.
/// ARGV: token, its queue entry (`<hand-off ms>|<token>`), publish command.
///
/// The token leaves the queue and its ticket goes; if the key holds the token (a release handed
/// it over just now, or a try whose reply was lost took it), it is passed on to the oldest live
/// waiter, or deleted, at once, in the same round trip. Returns `{held, lapsed}`: held = 1 when
/// the key held the token.
pub(crate) static ABANDON: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{HANDOFF_LUA}{AUX_NAMES_LUA}{}",
        r"
local key, token = KEYS[1], ARGV[1]
local aux = aux_of(key)
local queue, tickets = aux .. 'waiters', aux .. 'waiters:until'
redis.call('ZREM', tickets, token)
redis.call('LREM', queue, 1, ARGV[2])
local value = redis.call('GET', key)
if value ~= token and value ~= token .. '|w' then
  return {0, 0}
end
local outcome, _, _, lapsed = hand_over(key, queue, tickets, client_of(token), nil, ARGV[3], aux)
if not outcome then redis.call('DEL', key) end
return {1, lapsed}
"
    ))
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
