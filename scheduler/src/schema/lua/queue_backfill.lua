-- queue_backfill.lua: queue slots of a job to be backfilled by the group's replicas, each slot
-- once however many requests ask for it at the same time.
--
-- KEYS: [1] the group's pending retries (`scheduler:{group:<name>}:retries`), [2] its backfill
--       requests (`scheduler:{group:<name>}:backfilled`: `<job>\t<slot ms>` -> when queued).
-- ARGV: [1] now (epoch ms, the requester's clock, as the due time), [2] how long a request is
--       remembered, ms, [3] '1' to queue even a slot queued before (force), then per slot i
--       [2 + 2i] its pending entry (`<job>\t<slot ms>\t0`), [3 + 2i] its request member.
--
-- Reply: per slot, 1 queued, 0 refused: a backfill of it was queued within ARGV[2] (by this
-- request's twin, or earlier) and force is off. The check and the write are one step, so two
-- concurrent requests cannot both queue a slot.

local now, keep = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('(%d', now - keep))
local reply = {}
for i = 4, #ARGV, 2 do
  local entry, request = ARGV[i], ARGV[i + 1]
  if ARGV[3] ~= '1' and redis.call('ZSCORE', KEYS[2], request) then
    reply[#reply + 1] = 0
  else
    redis.call('ZADD', KEYS[1], now, entry)
    redis.call('ZADD', KEYS[2], now, request)
    reply[#reply + 1] = 1
  end
end
redis.call('PEXPIRE', KEYS[1], keep, 'NX')
redis.call('PEXPIRE', KEYS[1], keep, 'GT')
redis.call('PEXPIRE', KEYS[2], keep)
return reply
