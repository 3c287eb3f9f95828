-- sem_acquire.lua: taking a permit of a semaphore. Runs with handoff.lua and sem_grant.lua,
-- which scripts.rs places at the `-- fragments --` line: the common case (an idle semaphore)
-- returns before their functions are even defined.
--
-- KEYS: [1] holders (the semaphore's name), [2] queue, [3] tickets, [4] fence (with fencing).
-- ARGV: [1] token, [2] lease ms, [3] permits (the caller's count), [4] fencing ('1'/'0'),
--       [5] waiter ticket ms ('0': the caller does not wait), [6] the caller's hand-off ms,
--       [7] publish command, [8] release channel prefix.
--
-- Reply: {1, fence, lapsed} acquired (fence 0 without fencing); {0, ms, lapsed, holder...} all
-- permits taken (`ms` until the soonest holder's permit lapses, then every holder's token, for
-- the caller to take over those of dead clients); {-1, permits} the semaphore was declared with
-- another number of permits (nothing was changed).
--
-- A permit already held with the caller's token is the caller's (a hand-off reserved it, or a
-- try whose reply was lost took it): its lapse time is reset to the full lease. Free permits go
-- to the oldest live waiters first: a caller that is not at the head of the queue hands them on
-- instead of barging, and queues (when it waits).

local token, n, ticket = ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[5])
local lease = tonumber(ARGV[2])
-- The holders zset exists exactly when it holds `#permits` (every write below adds it first).
local declared = tonumber(redis.call('ZSCORE', KEYS[1], '#permits'))
if declared and -declared ~= n then return {-1, -declared} end
-- Takes a permit for the lease from `now` (epoch ms); returns its fence (0 without fencing).
local function take(now)
  if declared then
    redis.call('ZADD', KEYS[1], now + lease, token)
    if redis.call('PTTL', KEYS[1]) < lease then redis.call('PEXPIRE', KEYS[1], lease) end
  else
    -- A new zset: nothing to compare its expiry with.
    redis.call('ZADD', KEYS[1], now + lease, token, -n, '#permits')
    redis.call('PEXPIRE', KEYS[1], lease)
  end
  if ARGV[4] ~= '1' then return 0 end
  local t = redis.call('TIME')
  local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local fence = math.max((tonumber(redis.call('GET', KEYS[4])) or 0) + 1, floor)
  redis.call('SET', KEYS[4], string.format('%d', fence), 'PX', lease)
  return fence
end
-- The uncontended case: an idle semaphore (nothing held, nobody queued) is simply taken.
if not declared and redis.call('EXISTS', KEYS[2]) == 0 then
  local t = redis.call('TIME')
  return {1, take(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)), 0}
end
-- fragments --
local entry = ARGV[6] .. '|' .. token
local me = client_of(token)
if not declared then
  -- Queued waiters outlived the holders zset (it expired): declare before granting to them.
  redis.call('ZADD', KEYS[1], -n, '#permits')
  declared = -n
end
prune()
if redis.call('ZSCORE', KEYS[1], token) then
  if redis.call('ZREM', KEYS[3], token) == 1 then redis.call('LREM', KEYS[2], 1, entry) end
  return {1, take(clock()), 0}
end
local outcome, lapsed, taken = grant_free(n, me, ticket > 0 and entry or nil, ARGV[7], ARGV[8])
if outcome == 'own' or (outcome == nil and taken < n) then
  return {1, take(clock()), lapsed}
end
if ticket > 0 then
  queue_up(KEYS[2], KEYS[3], token, entry, ticket, me)
  keep_for(ticket)
end
local reply = {0, 0, lapsed}
local soonest = redis.call('ZRANGEBYSCORE', KEYS[1], 0, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if soonest[2] then reply[2] = math.max(0, tonumber(soonest[2]) - clock()) end
for _, holder in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], 0, '+inf')) do
  reply[#reply + 1] = holder
end
return reply
