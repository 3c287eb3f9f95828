-- sem_release.lua: giving a permit back (a release, a take-over of a dead holder's permit, a
-- force-release), or giving a token up (a waiter that stopped waiting, an acquisition whose
-- outcome is unknown). Runs with handoff.lua and sem_grant.lua, which scripts.rs places at the
-- `-- fragments --` line: the common case (nobody queued) returns before their functions are
-- even defined.
--
-- KEYS: [1] holders, [2] queue, [3] tickets.
-- ARGV: [1] token, [2] ms to keep the permit taken ('0': none; a minimum hold), [3] publish
--       command, [4] release channel prefix, [5] '1' when the caller is not the holder (its
--       client is not known to be alive), else '0', [6] the token's queue entry to leave (''
--       for a release).
--
-- Reply: {held, lapsed}: held = 1 when the token held a permit (it was given back, and the
-- freed permit handed to the oldest live waiter), 2 when it did and callers were queued (the
-- client's next release then knows contention started), else 0.

local token = ARGV[1]
if ARGV[6] ~= '' then
  redis.call('ZREM', KEYS[3], token)
  redis.call('LREM', KEYS[2], 1, ARGV[6])
end
if redis.call('ZREM', KEYS[1], token) == 0 then return {0, 0} end
local queued = redis.call('EXISTS', KEYS[2]) == 1
if ARGV[2] ~= '0' then
  -- Still taken for the rest of the minimum hold, no longer anyone's to renew.
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), token .. ':released')
  return {queued and 2 or 1, 0}
end
if not queued then
  -- Nobody to hand the permit to. The last holder out (only `#permits` is left) leaves the
  -- semaphore idle, its declared count with it, so it may change. Lapsed permits of others
  -- stay until the next acquirer prunes them, or the zset's expiry.
  if redis.call('ZCARD', KEYS[1]) == 1 then redis.call('DEL', KEYS[1]) end
  return {1, 0}
end
-- fragments --
prune()
local declared = tonumber(redis.call('ZSCORE', KEYS[1], '#permits'))
local outcome, lapsed, taken, more
if declared then
  local me = ARGV[5] ~= '1' and client_of(token) or nil
  outcome, lapsed, taken, more = grant_free(-declared, me, nil, ARGV[3], ARGV[4])
else
  lapsed, taken, more = 0, holders(), true
end
-- Idle: nothing held, nobody queued. The declared count goes too, so it may change.
if outcome == nil and taken == 0 and not more then redis.call('DEL', KEYS[1]) end
return {2, lapsed}
