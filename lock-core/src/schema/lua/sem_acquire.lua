-- sem_acquire.lua: taking a permit of a semaphore. Runs after handoff.lua and sem_grant.lua.
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
local entry = ARGV[6] .. '|' .. token
local me = client_of(token)
local declared = tonumber(redis.call('ZSCORE', KEYS[1], '#permits'))
if declared and -declared ~= n then return {-1, -declared} end
prune()
local function take()
  redis.call('ZADD', KEYS[1], clock() + tonumber(ARGV[2]), token)
  if not declared then redis.call('ZADD', KEYS[1], -n, '#permits') end
  keep_for(ARGV[2])
  local fence = 0
  if ARGV[4] == '1' then
    local t = redis.call('TIME')
    local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
    fence = math.max((tonumber(redis.call('GET', KEYS[4])) or 0) + 1, floor)
    redis.call('SET', KEYS[4], string.format('%d', fence), 'PX', ARGV[2])
  end
  return fence
end
if redis.call('ZSCORE', KEYS[1], token) then
  if redis.call('ZREM', KEYS[3], token) == 1 then redis.call('LREM', KEYS[2], 1, entry) end
  return {1, take(), 0}
end
local outcome, lapsed, taken = grant_free(n, me, ticket > 0 and entry or nil, ARGV[7], ARGV[8])
if outcome == 'own' or (outcome == nil and taken < n) then
  return {1, take(), lapsed}
end
if ticket > 0 then
  if redis.call('ZADD', KEYS[3], clock() + ticket, token) == 1 then
    redis.call('RPUSH', KEYS[2], entry)
    if me then redis.call('ZREM', KEYS[3], '@' .. me) end
  end
  if redis.call('PTTL', KEYS[3]) < ticket then
    redis.call('PEXPIRE', KEYS[2], ticket)
    redis.call('PEXPIRE', KEYS[3], ticket)
  end
  if not declared then redis.call('ZADD', KEYS[1], -n, '#permits') end
  keep_for(ticket)
end
local reply = {0, 0, lapsed}
local soonest = redis.call('ZRANGEBYSCORE', KEYS[1], 0, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if soonest[2] then reply[2] = math.max(0, tonumber(soonest[2]) - clock()) end
for _, holder in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], 0, '+inf')) do
  reply[#reply + 1] = holder
end
return reply
