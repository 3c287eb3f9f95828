-- rw_grant.lua: a fragment, not a script: a read-write lock's state and how a hold is granted.
-- Prepended (after handoff.lua) to rw_acquire.lua and rw_release.lua, whose KEYS are [1] the
-- writer key (the lock's name: the writer's token, with a PX expiry) and [2] the readers
-- (zset: reader token -> when its hold lapses, epoch ms), then [3] queue and [4] tickets.
--
-- prune(): drops the readers whose hold lapsed.
-- can_enter(mode): whether a hold of `mode` ('r' a reader, '' a writer) fits now: a reader
--   when no writer holds it, a writer when nobody does.
-- grant_hold(waiter, ms, more, mode): reserves a hold for a waiter for `ms`.
-- grant_all(me, own, publish, channel_prefix): grants the oldest live waiters in order while
--   they fit (a writer alone, or a run of readers); returns hand_over's last outcome and the
--   lapsed hand-offs noticed.

local function prune()
  redis.call('ZREMRANGEBYSCORE', KEYS[2], 0, clock())
end

local function can_enter(mode)
  if redis.call('EXISTS', KEYS[1]) == 1 then return false end
  return mode == 'r' or redis.call('ZCARD', KEYS[2]) == 0
end

local function add_reader(token, ms)
  redis.call('ZADD', KEYS[2], clock() + tonumber(ms), token)
  if redis.call('PTTL', KEYS[2]) < tonumber(ms) then redis.call('PEXPIRE', KEYS[2], ms) end
end

local function grant_hold(waiter, ms, _, mode)
  if mode == 'r' then
    add_reader(waiter, ms)
  else
    redis.call('SET', KEYS[1], waiter, 'PX', ms)
  end
end

local function grant_all(me, own, publish, channel_prefix)
  local lapsed = 0
  while true do
    local outcome, _, _, noticed = hand_over(KEYS[3], KEYS[4], me, own, publish, channel_prefix, grant_hold, can_enter)
    lapsed = lapsed + noticed
    if outcome ~= 'handed' then return outcome, lapsed end
  end
end
