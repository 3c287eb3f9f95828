-- announce.lua: a replica announces itself to its scheduler group.
--
-- KEYS: [1] the group's member set (`scheduler:{group:<name>}:members`), [2] the group's job
--       registry (`scheduler:{group:<name>}:jobs`), kept as long as the members.
-- ARGV: [1] instance id, [2] announcement TTL, ms.
--
-- Reply: the live members (instance ids), after dropping the lapsed ones.
--
-- Scores are lapse times on the Redis server's clock, so replicas with skewed clocks agree on
-- who is alive. The set expires a TTL after the last announcement: a group that stops running
-- leaves nothing behind.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return redis.call('ZRANGE', KEYS[1], 0, -1)
