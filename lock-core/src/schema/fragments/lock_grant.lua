-- lock_grant.lua: a fragment, not a script: how a lock is granted to a waiter. Prepended (after
-- handoff.lua) to acquire.lua, release.lua and abandon.lua, whose KEYS[1] is the lock key.
--
-- set_key(waiter, ms, more): the key holds the waiter's token for `ms` (its reservation), with
-- the queue mark `|w` while others still wait, so that the waiter's release hands over too.

local function set_key(waiter, ms, more)
  redis.call('SET', KEYS[1], more and (waiter .. '|w') or waiter, 'PX', ms)
end
