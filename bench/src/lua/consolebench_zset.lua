-- consolebench: members ARGV[1] .. ARGV[2] - 1 of the large sorted set KEYS[1], scored by number.
for i = tonumber(ARGV[1]), tonumber(ARGV[2]) - 1 do
  redis.call('ZADD', KEYS[1], i, 'member:' .. i)
end
