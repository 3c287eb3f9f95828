-- extend.lua: a renewal (the watchdog's batches, and confirming a lock taken by hand-off).
--
-- KEYS: [1] lock key.
-- ARGV: [1] token, [2] lease ms.
--
-- Reply: 1 when the key held the token (with or without the queue mark `|w`) and its expiry was
-- reset to the lease, else 0. Never creates the key, so a renewal cannot resurrect a released
-- or expired lock.

local value = redis.call('GET', KEYS[1])
if value == ARGV[1] or value == ARGV[1] .. '|w' then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
