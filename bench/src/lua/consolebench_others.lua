-- consolebench: unrelated string keys `other:<from>` .. `other:<to>`.
--
-- ARGV: [1] from, [2] to.
for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
  redis.call('SET', 'other:' .. i, 'x')
end
return 1
