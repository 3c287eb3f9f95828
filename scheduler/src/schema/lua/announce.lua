-- announce.lua: a replica announces itself to its scheduler group.
--
-- KEYS: [1] the group's member set (`scheduler:{group:<name>}:members`), [2] the group's job
--       registry (`scheduler:{group:<name>}:jobs`), kept as long as the members, [3] what the
--       replicas say about themselves (`scheduler:{group:<name>}:replicas`).
-- ARGV: [1] instance id, [2] announcement TTL, ms, [3] (optional) what this replica says about
--       itself, sent when it changed: written to KEYS[3], whose TTL it renews.
--
-- Reply: the live members after dropping the lapsed ones, each followed by how long its
--        announcement still counts (ms, >= 1): {id1, left1, id2, left2, ...}. Relative times,
--        so that a replica can drop a member locally the moment it lapses, whatever the skew
--        between its clock and the server's.
--
-- Scores are lapse times on the Redis server's clock, so replicas with skewed clocks agree on
-- who is alive. The set expires a TTL after the last announcement: a group that stops running
-- leaves nothing behind.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
-- The lapsed members, read before they are dropped so that what they said goes with them.
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for i = 1, #lapsed do
  redis.call('ZREM', KEYS[1], lapsed[i])
  redis.call('HDEL', KEYS[3], lapsed[i])
end
if ARGV[3] then
  redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
local reply = {}
local live = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #live, 2 do
  reply[#reply + 1] = live[i]
  reply[#reply + 1] = math.max(1, tonumber(live[i + 1]) - now)
end
return reply
