-- take_run.lua: one replica takes a pending run request (or a requester withdraws its own).
--
-- KEYS: [1] the group's run requests (`scheduler:{group:<name>}:runs`).
-- ARGV: [1] job name, [2] the request as read.
--
-- Reply: 1 when the request was still pending and is now taken (removed), else 0: another
-- replica took it, or it was withdrawn or lapsed. So each request is taken at most once.

if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 1
end
return 0
