-- compare_and_delete.lua: the raw baseline's release, the least a Redis lock needs.
--
-- KEYS: [1] lock key.
-- ARGV: [1] token.
--
-- Reply: 1 when the key held the token (deleted), else 0.

if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
