-- take_retries.lua: one replica takes each due pending retry (or backfill slot), once; a call
-- sent again after its reply was lost gets the same answer.
--
-- KEYS: [1] the group's pending retries (`scheduler:{group:<name>}:retries`), then per member
--       i (1-based), [1 + i] its taken marker (`scheduler:{group:<name>}:retries:taken:<member>`).
-- ARGV: [1] the taker (the replica's instance id), [2] how long a taken marker is kept, ms;
--       then per member i, [2 + i] the member as read.
--
-- Reply: per member, 1 when the caller has it: removed from the pending set now (the marker
-- then names the caller), or by an earlier call of the same caller whose reply was lost (the
-- marker names it); else 0 (another replica took it, or it is gone).
--
-- The removal and the marker are one atomic step: a replica whose reply is lost takes its
-- entries again with its next look, so a taken entry is never left to nobody.

local reply = {}
for i = 3, #ARGV do
  local member, marker = ARGV[i], KEYS[i - 1]
  if redis.call('ZREM', KEYS[1], member) == 1 then
    redis.call('SET', marker, ARGV[1], 'PX', ARGV[2])
    reply[#reply + 1] = 1
  elseif redis.call('GET', marker) == ARGV[1] then
    reply[#reply + 1] = 1
  else
    reply[#reply + 1] = 0
  end
end
return reply
