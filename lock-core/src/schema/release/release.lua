-- release.lua: release = hand-off. Runs with handoff.lua and lock_grant.lua, which scripts.rs
-- places after this file's first part (the `-- fragments --` line): the common case returns
-- before their functions are even defined.
--
-- KEYS: [1] lock key, [2] queue, [3] tickets.
-- ARGV: [1] token, [2] release channel prefix (`{<key>}:released:`), then optional (absent
--       in the common case, since each argument measurably slows EVALSHA): [3] ms to keep
--       ('0' or absent: none), [4] publish command (PUBLISH, the default, or SPUBLISH in a
--       cluster), [5] '1' when the caller is not the holder (a take-over of a dead holder's
--       lock or a force-release: the holder's client is then not known to be alive), else '0'
--       (the default).
--
-- Reply: 1 when the key held the token, 2 when it did and was handed to a waiter, else 0;
-- {1 or 2, lapsed} when hand-offs were noticed to have lapsed untaken on the way (see
-- handoff.lua). The 2 tells the client that callers queue here: its next release of the key
-- comes straight to this script rather than trying release_own.lua first.
--
-- With a minimum hold left (ARGV[3]), the key is kept for it as `<token>:released` (still
-- taken, no longer ours: a renewal in flight cannot stretch it). Otherwise, if someone waits,
-- the key is handed to the oldest live waiter (handoff.lua). With nobody waiting it is deleted.
--
-- Whether someone waits is read from the value itself: a caller that queues behind a holder
-- appends `|w` to the holder's value (acquire.lua), and a value stored while the queue is not
-- empty carries it. So the common case (nobody ever queued) is a bare compare-and-delete.

local key, token = KEYS[1], ARGV[1]
local value = redis.call('GET', key)
local keep = ARGV[3] and ARGV[3] ~= '0' and ARGV[3] or nil
if value == token and not keep then
  redis.call('DEL', key)
  return 1
end
if value ~= token and value ~= token .. '|w' then
  return 0
end
if keep then
  redis.call('SET', key, token .. ':released', 'PX', keep)
  return 1
end
-- fragments --
local me = ARGV[5] ~= '1' and client_of(token) or nil
local publish = ARGV[4] or 'PUBLISH'
local outcome, _, _, lapsed = hand_over(KEYS[2], KEYS[3], me, nil, publish, ARGV[2], set_key)
local owned = 2
if not outcome then
  redis.call('DEL', key)
  owned = 1
end
if lapsed > 0 then return {owned, lapsed} end
return owned
