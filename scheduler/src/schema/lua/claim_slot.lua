-- claim_slot.lua: claim a scheduler tick without taking the job's lock, for a job whose slots
-- may run alongside each other (`Overlap::Allow`): each slot still runs once across the
-- replicas. The same tick key, value and expiry as lock-core's claims, so everything that
-- reads the last claimed tick (catch-up, deferred slots, the console) reads it as usual.
--
-- KEYS: [1] the tick key (`{<lock key>}:tick`).
-- ARGV: [1] the tick (epoch ms), [2] how long a claimed tick is kept, ms.
--
-- Reply: 0 when claimed; else the last claimed tick, this one or a later one (nothing changed).

local last = redis.call('GET', KEYS[1])
if last and tonumber(last) and tonumber(last) >= tonumber(ARGV[1]) then
  return tonumber(last)
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 0
