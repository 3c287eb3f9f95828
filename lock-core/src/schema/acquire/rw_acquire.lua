-- rw_acquire.lua: taking a read or a write hold of a read-write lock. Runs after handoff.lua
-- and rw_grant.lua.
--
-- KEYS: [1] writer key (the lock's name), [2] readers, [3] queue, [4] tickets, [5] fence (with
--       fencing).
-- ARGV: [1] token, [2] lease ms, [3] mode ('r' read, 'w' write), [4] fencing ('1'/'0'),
--       [5] waiter ticket ms ('0': the caller does not wait), [6] the caller's hand-off ms,
--       [7] publish command, [8] release channel prefix.
--
-- Reply: {1, fence, lapsed} acquired; {0, ms, lapsed, holder...} refused (`ms` until the writer's
-- hold or the soonest reader's lapses, then the writer's token or every reader's, for the caller
-- to take over those of dead clients).
--
-- Arrival order holds across readers and writers: holds are granted to the oldest live waiters
-- first, and a caller that finds waiters ahead of it queues, so a waiting writer stops new
-- readers from entering (no writer starvation) and a writer waits for the readers ahead of it.
-- A hold already kept with the caller's token is the caller's (handed over, or taken by a try
-- whose reply was lost): its lapse time is reset to the full lease.

local token, ticket = ARGV[1], tonumber(ARGV[5])
local mode = ARGV[3] == 'r' and 'r' or ''
local entry = ARGV[6] .. mode .. '|' .. token
local me = client_of(token)
prune()
local function take()
  if mode == 'r' then
    add_reader(token, ARGV[2])
  else
    redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
  end
  local fence = 0
  if ARGV[4] == '1' then
    local t = redis.call('TIME')
    local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
    fence = math.max((tonumber(redis.call('GET', KEYS[5])) or 0) + 1, floor)
    redis.call('SET', KEYS[5], string.format('%d', fence), 'PX', ARGV[2])
  end
  return fence
end
local mine
if mode == 'r' then
  mine = redis.call('ZSCORE', KEYS[2], token)
else
  mine = redis.call('GET', KEYS[1]) == token
end
if mine then
  if redis.call('ZREM', KEYS[4], token) == 1 then redis.call('LREM', KEYS[3], 1, entry) end
  return {1, take(), 0}
end
local outcome, lapsed = grant_all(me, ticket > 0 and entry or nil, ARGV[7], ARGV[8])
if outcome == 'own' or (outcome == nil and can_enter(mode)) then
  return {1, take(), lapsed}
end
if ticket > 0 then queue_up(KEYS[3], KEYS[4], token, entry, ticket, me) end
local reply = {0, 0, lapsed}
local writer = redis.call('GET', KEYS[1])
if writer then
  reply[2] = math.max(0, redis.call('PTTL', KEYS[1]))
  reply[4] = writer
else
  local soonest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if soonest[2] then reply[2] = math.max(0, tonumber(soonest[2]) - clock()) end
  for _, reader in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
    reply[#reply + 1] = reader
  end
end
return reply
