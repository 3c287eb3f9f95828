-- The raw semaphore floor: drop lapsed holders, take a permit if one is free.
-- KEYS: [1] holders (zset: token -> lapse time, ms). ARGV: [1] token, [2] permits, [3] lease ms.
-- Reply: 1 taken, 0 full.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
