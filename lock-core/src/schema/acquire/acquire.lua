-- acquire.lua: the scripted acquisition, for a fenced caller, one claiming a scheduler tick,
-- or a waiting caller (the uncontended fail-fast path is a plain `SET key token NX PX lease
-- GET`). Runs after handoff.lua.
--
-- KEYS: [1] lock key, [2] queue, [3] tickets; then [4] fence (with fencing or a tick), and
--       [5] tick, [6] tick claimant (with a tick). Only the keys it was given are touched.
-- ARGV: [1] token, [2] lease ms, [3] fencing ('1'/'0'), [4] tick ('' for none), [5] waiter
--       ticket ms ('0': the caller does not wait), [6] the caller's hand-off ms (how long a
--       lock handed to it stays reserved: the waiter decides, since it trusts the
--       reservation), [7] publish command (PUBLISH, or SPUBLISH in a cluster), [8] release
--       channel prefix (`{<key>}:released:`), [9] tick ms to keep a claimed tick.
--
-- Reply: {1, fence, lapsed} acquired (fence 0 without fencing); {0, ms, holder, lapsed} held
-- (the holder's PTTL and token, or the waiter the free lock was just handed to); {2, last_tick,
-- ours} the tick was already claimed (ours = 1: the key holds the caller's token, which the
-- caller must pass on). `lapsed`: hand-offs first noticed here to have lapsed untaken.
--
-- The key holding the caller's token means it is the caller's: handed over by a release, or
-- taken by an earlier send of the same token whose reply was lost; its expiry is reset to the
-- full lease. A free key goes to the oldest live waiter: a caller that is not that waiter hands
-- it over (and announces it) instead of barging. A refused waiting caller joins the queue, or
-- refreshes its ticket, and marks the holder's value (`|w`) so that its release hands over:
-- the holder it finds, or the waiter it just handed the free key to.
--
-- Fences are max(counter + 1, server time in µs), so the counter may expire with the lock (no
-- counter per key is kept forever) and still strictly increases.

local token, ticket = ARGV[1], tonumber(ARGV[5])
local entry = ARGV[6] .. '|' .. token
local me = client_of(token)
local holder = redis.call('GET', KEYS[1])
local marked = holder and string.sub(holder, -2) == '|w'
if marked then holder = string.sub(holder, 1, -3) end
local own_claim = false
if ARGV[4] ~= '' then
  local last = redis.call('GET', KEYS[5])
  if last and tonumber(last) >= tonumber(ARGV[4]) then
    -- An earlier send of this very token claimed it (its reply was lost): ours.
    own_claim = holder == token and last == ARGV[4] and redis.call('GET', KEYS[6]) == token
    if not own_claim then
      return {2, tonumber(last), holder == token and 1 or 0}
    end
  end
end
local function wait_in_line()
  if ticket > 0 then queue_up(KEYS[2], KEYS[3], token, entry, ticket, me) end
end
if holder and holder ~= token then
  wait_in_line()
  if ticket > 0 and not marked then
    redis.call('SET', KEYS[1], holder .. '|w', 'KEEPTTL')
  end
  return {0, redis.call('PTTL', KEYS[1]), holder, 0}
end
local lapsed = 0
if holder then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if redis.call('ZREM', KEYS[3], token) == 1 then
    redis.call('LREM', KEYS[2], 1, entry)
  end
else
  -- Free: the oldest live waiter first.
  local outcome, ms, waiter, more
  outcome, ms, waiter, lapsed, more =
    hand_over(KEYS[2], KEYS[3], me, ticket > 0 and entry or nil, ARGV[7], ARGV[8], set_key)
  if outcome == 'handed' then
    wait_in_line()
    -- Handed to an older waiter while the caller was not queued yet: now it is, so the
    -- waiter's release must hand over (and not free the key with a bare delete).
    if ticket > 0 and not more then redis.call('SET', KEYS[1], waiter .. '|w', 'KEEPTTL') end
    return {0, ms, waiter, lapsed}
  end
  if not outcome and more and ticket > 0 then
    -- Past the bound of dead entries: this token may still be queued further back.
    redis.call('ZREM', KEYS[3], token)
    redis.call('LREM', KEYS[2], 1, entry)
  end
  redis.call('SET', KEYS[1], more and (token .. '|w') or token, 'PX', ARGV[2])
end
local fence = 0
if ARGV[3] == '1' then
  local t = redis.call('TIME')
  local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
  fence = math.max((tonumber(redis.call('GET', KEYS[4])) or 0) + 1, floor)
  redis.call('SET', KEYS[4], string.format('%d', fence), 'PX', ARGV[2])
end
if ARGV[4] ~= '' and not own_claim then
  redis.call('SET', KEYS[5], ARGV[4], 'PX', ARGV[9])
  -- Who claimed it, for a retry of this send whose reply is lost.
  redis.call('SET', KEYS[6], token, 'PX', ARGV[2])
end
return {1, fence, lapsed}
