-- request_run.lua: ask a scheduler group to run a job once, now ("run now").
--
-- KEYS: [1] the group's member set, [2] the group's job registry, [3] the group's run requests
--       (`scheduler:{group:<name>}:members`, `:jobs`, `:runs`).
-- ARGV: [1] job name, [2] the request (`<id>\t<requested by>\t<requested at, ms>`),
--       [3] how long an unclaimed request lasts, ms, [4] the publish command (PUBLISH, or
--       SPUBLISH in a cluster), [5] the group's channel (`scheduler:{group:<name>}:changed`,
--       same slot), told of the request after it is stored so that a replica hearing it finds it.
--
-- Reply: 1 requested; 0 a request for the job is already pending (nothing changed);
-- -1 no live replica in the group; -2 no replica of the group has the job.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then return -2 end
if redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf') == 0 then return -1 end
if redis.call('HSETNX', KEYS[3], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('PEXPIRE', KEYS[3], ARGV[3])
redis.call(ARGV[4], ARGV[5], 'run')
return 1
