-- rw_release.lua: giving a read or write hold back (a release, a take-over of a dead holder's,
-- a force-release), or giving a token up (a waiter that stopped waiting, an acquisition whose
-- outcome is unknown). Runs after handoff.lua and rw_grant.lua.
--
-- KEYS: [1] writer key, [2] readers, [3] queue, [4] tickets.
-- ARGV: [1] token, [2] mode ('r'/'w', or '?': whichever the token holds, for a caller that
--       gives back another client's hold: a take-over, a force-release), [3] ms to keep the hold ('0': none; a minimum hold),
--       [4] publish command, [5] release channel prefix, [6] '1' when the caller is not the
--       holder, else '0', [7] the token's queue entry to leave ('' for a release).
--
-- Reply: {held, lapsed}: held = 1 when the token held the lock in that mode (it was given back,
-- and the oldest live waiters that fit now were granted theirs), else 0.

local token, keep = ARGV[1], ARGV[3] ~= '0' and ARGV[3] or nil
local mode = ARGV[2]
if mode == '?' then mode = redis.call('GET', KEYS[1]) == token and 'w' or 'r' end
if ARGV[7] ~= '' then
  redis.call('ZREM', KEYS[4], token)
  redis.call('LREM', KEYS[3], 1, ARGV[7])
end
if mode == 'w' then
  if redis.call('GET', KEYS[1]) ~= token then return {0, 0} end
  if keep then
    redis.call('SET', KEYS[1], token .. ':released', 'PX', keep)
    return {1, 0}
  end
  redis.call('DEL', KEYS[1])
else
  if redis.call('ZREM', KEYS[2], token) == 0 then return {0, 0} end
  if keep then
    add_reader(token .. ':released', keep)
    return {1, 0}
  end
end
prune()
local me = ARGV[6] ~= '1' and client_of(token) or nil
local _, lapsed = grant_all(me, nil, ARGV[4], ARGV[5])
return {1, lapsed}
