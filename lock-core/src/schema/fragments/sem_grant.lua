-- sem_grant.lua: a fragment, not a script: the semaphore's holders and how a permit is granted.
-- Prepended (after handoff.lua) to sem_acquire.lua and sem_release.lua, whose KEYS[1] is the
-- holders zset: holder token -> when its permit lapses (epoch ms), and the member `#permits`
-- scored with minus the number of permits (negative, so a range over times never touches it).
--
-- prune(): drops the holders whose permit lapsed (a holder whose client died without releasing
--   stops being renewed; a reservation nobody took).
-- holders(): how many permits are taken.
-- keep_for(ms): makes the holders zset outlive a permit valid `ms` from now.
-- grant_permit(waiter, ms): reserves a permit for a waiter for `ms`.

local function prune()
  redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, clock())
end

local function holders()
  -- Holders are scored with lapse times (positive), `#permits` negative: one count. Called
  -- after prune(), so every holder counted is valid.
  return redis.call('ZCOUNT', KEYS[1], 0, '+inf')
end

local function keep_for(ms)
  if redis.call('PTTL', KEYS[1]) < tonumber(ms) then redis.call('PEXPIRE', KEYS[1], ms) end
end

local function grant_permit(waiter, ms)
  redis.call('ZADD', KEYS[1], clock() + tonumber(ms), waiter)
  keep_for(ms)
end

-- Hands free permits (up to `n` taken) to the oldest live waiters. `own`: the caller's queue
-- entry, if it waits. Returns the outcome ('own' if the caller's turn came, 'full', or nil: no
-- live waiter), the lapsed hand-offs noticed, the permits taken now, and whether anyone is
-- still queued.
local function grant_free(n, me, own, publish, channel_prefix)
  local lapsed = 0
  while true do
    local taken = holders()
    if taken >= n then return 'full', lapsed, taken, true end
    local outcome, _, _, noticed, more = hand_over(KEYS[2], KEYS[3], me, own, publish, channel_prefix, grant_permit)
    lapsed = lapsed + noticed
    if outcome ~= 'handed' then return outcome, lapsed, taken, more end
  end
end
