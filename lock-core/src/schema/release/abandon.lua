-- abandon.lua: a token given up. A waiter that stopped waiting without the lock (its future
-- dropped, its wait bound reached, an error), or an acquisition whose outcome is unknown (its
-- reply was lost, its future dropped while the command was out). Runs after handoff.lua.
--
-- KEYS: [1] lock key, [2] queue, [3] tickets.
-- ARGV: [1] token, [2] its queue entry (`<hand-off ms>|<token>`), [3] publish command,
--       [4] release channel prefix.
--
-- Reply: {held, lapsed}: held = 1 when the key held the token (a release had just handed it
-- over, or a try whose reply was lost took it); it was then passed on to the oldest live waiter,
-- or deleted, in the same round trip. `lapsed` as in handoff.lua.

local key, token = KEYS[1], ARGV[1]
redis.call('ZREM', KEYS[3], token)
redis.call('LREM', KEYS[2], 1, ARGV[2])
local value = redis.call('GET', key)
if value ~= token and value ~= token .. '|w' then
  return {0, 0}
end
local outcome, _, _, lapsed = hand_over(KEYS[2], KEYS[3], client_of(token), nil, ARGV[3], ARGV[4], set_key)
if not outcome then redis.call('DEL', key) end
return {1, lapsed}
