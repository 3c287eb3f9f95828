-- member_renew.lua: renewing a hold kept as a member of a zset (a semaphore's permit, a
-- read-write lock's read hold): the watchdog's batches, and confirming one taken by hand-off.
--
-- KEYS: [1] the zset (a semaphore's holders, a read-write lock's readers).
-- ARGV: [1] token, [2] lease ms.
--
-- Reply: 1 when the token was a member and its lapse time was reset to the lease, else 0. Never
-- adds the member, so a renewal cannot resurrect a released or lapsed hold.

if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
