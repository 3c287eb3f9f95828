-- sem_count.lua: how many permits of a semaphore are taken now (read only).
--
-- KEYS: [1] holders.
-- ARGV: none.
--
-- Reply: {declared, taken}: the declared number of permits (-1 if the semaphore is idle and so
-- declares none) and how many permits are held and not lapsed.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local declared = tonumber(redis.call('ZSCORE', KEYS[1], '#permits'))
return {declared and -declared or -1, redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')}
