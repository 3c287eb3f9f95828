-- consolebench: one job's history as a replica would have written it, with its failure counts
-- and its entry in the job index.
--
-- KEYS: [1] the job's history stream, [2] its failure counts per hour, [3] the job index.
-- ARGV: [1] runs, [2] failures, [3] the hour they are counted in, [4] the index score,
--       [5] the job's name.
for i = 1, tonumber(ARGV[1]) do
  local outcome = 'ran'
  if i % 10 == 0 then outcome = 'failed' end
  redis.call('XADD', KEYS[1], '*', 'tick', tostring(i * 1000), 'instance', 'pod-1', 'outcome', outcome,
    'duration_ms', '12', 'error', 'boom')
end
redis.call('PEXPIRE', KEYS[1], 86400000)
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
redis.call('PEXPIRE', KEYS[2], 86400000)
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[5])
redis.call('PEXPIRE', KEYS[3], 86400000)
return 1
