-- record_missed.lua: which replica records a run of missed slots in a job's history.
--
-- KEYS: [1] the job's missed-slots marker (`scheduler:{job:<name>}:missed`).
-- ARGV: [1] the latest missed tick (epoch ms), [2] the marker's TTL, ms.
--
-- Reply: 1 when the marker was set (the caller records the missed slots), 0 when it already
-- held this tick or a later one (another replica records them).

local seen = redis.call('GET', KEYS[1])
if seen and tonumber(seen) >= tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
