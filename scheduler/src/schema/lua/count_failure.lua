-- count_failure.lua: record a job's slot that failed for good (its last attempt failed), and
-- pause the job on every replica once that many slots in a row, in slot order, failed for good.
--
-- KEYS: [1] the job's final outcomes by slot (`scheduler:{job:<name>}:slot_outcomes`), [2] its
--       pause flag (`scheduler:{job:<name>}:paused`).
-- ARGV: [1] how many failed slots in a row pause the job, [2] the outcomes' TTL, ms, [3] the
--       pause record to write (when, who, why), [4] the slot (epoch ms), [5] how many outcomes
--       are kept.
--
-- KEYS[1] holds one member per slot (its epoch ms) scored `2 * slot + 1` when it failed for
-- good and `2 * slot` when it succeeded (a success is added by the history write's pipeline),
-- so the scores sort by slot and their parity is the outcome. The streak through this slot is
-- the run of failed slots around it in slot order: a later slot's success that completed
-- first does not hide two consecutive failed slots, and a slot whose retries are still pending
-- is not yet in the line. Only the latest ARGV[5] outcomes are kept: a slot older than all of
-- them when its outcome comes is counted alone (what lay around it was dropped).
--
-- Reply: {streak, paused}: the failed slots in a row through this one, and 1 when this call
-- paused the job (0 when it is below the limit, or was paused already, by an operator or
-- another replica). Resuming the job deletes KEYS[1].

local limit, slot, keep = tonumber(ARGV[1]), tonumber(ARGV[4]), tonumber(ARGV[5])
local score = 2 * slot + 1
redis.call('ZADD', KEYS[1], score, ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local streak = 1
local count = redis.call('ZCARD', KEYS[1])
if count > keep then
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, count - keep - 1)
end
if redis.call('ZSCORE', KEYS[1], ARGV[4]) then
  local function failed_run(range)
    local n = 0
    for i = 2, #range, 2 do
      if tonumber(range[i]) % 2 == 1 then n = n + 1 else break end
    end
    return n
  end
  local below = string.format('(%d', score - 1)
  local above = string.format('(%d', score)
  streak = streak
    + failed_run(redis.call('ZREVRANGEBYSCORE', KEYS[1], below, '-inf', 'WITHSCORES', 'LIMIT', 0, limit))
    + failed_run(redis.call('ZRANGEBYSCORE', KEYS[1], above, '+inf', 'WITHSCORES', 'LIMIT', 0, limit))
end
if streak >= limit and redis.call('SET', KEYS[2], ARGV[3], 'NX') then
  return {streak, 1}
end
return {streak, 0}
