-- claim_ticks.lua: claim one scheduler tick for many locks at once, each with its lock (a
-- scheduler's due jobs of one slot). The batched form of acquire.lua's tick claim for callers
-- that neither wait nor fence: two Redis calls per claim, where acquire.lua makes six.
--
-- KEYS: per lock i (1-based), [2i-1] the lock key, [2i] its tick key (`{<key>}:tick`).
-- ARGV: [1] the tick (epoch ms), [2] the lease ms of every lock of the call, [3] how long a
--       claimed tick is kept, ms; then per lock i, [3+i] a fresh owner token.
--
-- Reply: per lock i, two entries: {1, 0} claimed (the lock is the token's for the lease, the
-- tick recorded); {2, last tick} the tick, or a later one, was already claimed (nothing
-- changed); {0, holder} the lock is held (its value, the `|w` mark included; nothing changed).
--
-- A free lock is taken with SET NX like the plain acquisition: a lock with callers queued is
-- never free (its release hands it over), so nobody barges. The tick is written with SET GET
-- and put back, with the lock, when it held this tick or a later one: atomic within the
-- script, so no reader ever sees it move back. No claimant key is written: a call whose reply
-- was lost is sent again once with the same tokens, and a lock found holding its own token
-- ({0, token}) proves the lost call claimed the tick (it keeps the lock only then); past that
-- one try the caller gives the tokens up.

local tick = tonumber(ARGV[1])
local reply = {}
for i = 1, #KEYS / 2 do
  local key, tick_key, token = KEYS[2 * i - 1], KEYS[2 * i], ARGV[3 + i]
  local holder = redis.call('SET', key, token, 'NX', 'PX', ARGV[2], 'GET')
  if holder then
    reply[2 * i - 1], reply[2 * i] = 0, holder
  else
    local last = redis.call('SET', tick_key, ARGV[1], 'PX', ARGV[3], 'GET')
    if last and tonumber(last) and tonumber(last) >= tick then
      redis.call('SET', tick_key, last, 'PX', ARGV[3])
      redis.call('DEL', key)
      reply[2 * i - 1], reply[2 * i] = 2, tonumber(last)
    else
      reply[2 * i - 1], reply[2 * i] = 1, 0
    end
  end
end
return reply
