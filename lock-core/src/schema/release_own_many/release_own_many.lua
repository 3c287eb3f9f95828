-- release_own_many.lua: release_own.lua for many locks at once (the holders' releases of one
-- client, grouped while an earlier group was out: scheduler runs ending together).
--
-- KEYS: the lock keys.
-- ARGV: [i] the token of KEYS[i].
--
-- Reply: per key, as release_own.lua: 1 when the key held the token (now deleted), 0 when it
-- did not, -1 when it holds the token with the `|w` mark (callers queue behind it): nothing
-- changed for that key, and the caller sends release.lua for it.

local reply = {}
for i = 1, #KEYS do
  local value = redis.call('GET', KEYS[i])
  if value == ARGV[i] then
    redis.call('DEL', KEYS[i])
    reply[i] = 1
  elseif value == ARGV[i] .. '|w' then
    reply[i] = -1
  else
    reply[i] = 0
  end
end
return reply
