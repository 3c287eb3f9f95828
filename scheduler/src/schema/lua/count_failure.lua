-- count_failure.lua: count a job's slot that failed for good (its last attempt failed), and
-- pause the job on every replica once it has failed this many times in a row.
--
-- KEYS: [1] the job's consecutive-failure count (`scheduler:{job:<name>}:failure_streak`), [2] its
--       pause flag (`scheduler:{job:<name>}:paused`).
-- ARGV: [1] how many failed slots in a row pause the job, [2] the count's TTL, ms, [3] the
--       pause record to write (when, who, why).
--
-- Reply: {count, paused}: the failures in a row now, and 1 when this call paused the job (0
-- when it is below the limit, or was paused already, by an operator or another replica).
-- A successful run deletes the count; resuming the job deletes it too.

local count = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if count >= tonumber(ARGV[1]) and redis.call('SET', KEYS[2], ARGV[3], 'NX') then
  return {count, 1}
end
return {count, 0}
