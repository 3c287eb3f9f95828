-- release_own.lua: the holder's own release when nobody queued: a compare-and-delete on the
-- one key. The common release; a single key and argument keep it as cheap as the raw floor.
--
-- KEYS: [1] lock key.
-- ARGV: [1] token.
--
-- Reply: 1 when the key held the token (now deleted), 0 when it did not, -1 when it holds the
-- token with the `|w` mark (callers queue behind it): nothing changed, and the caller sends
-- release.lua, which hands the lock over and needs the queue's keys declared.

local value = redis.call('GET', KEYS[1])
if value == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
if value == ARGV[1] .. '|w' then
  return -1
end
return 0
