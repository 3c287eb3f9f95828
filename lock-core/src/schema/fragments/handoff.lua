-- handoff.lua: a fragment, not a script. Prepended to acquire.lua, release.lua and abandon.lua
-- (see scripts.rs), which call its functions.
--
-- client_of(token): the client id in an owner token `<instance>:<client id>:<uuid>` (the
--   second field from the end), or nil.
-- clock(): the server time in epoch ms, read once per script run.
-- queue_up(queue, tickets, token, entry, ticket, me): the caller joins the queue of waiters
--   with a ticket of `ticket` ms (a new entry at the back), or refreshes the ticket it has.
-- hand_over(queue, tickets, me, own, publish, channel_prefix, grant, can_enter): passes what a
--   release or a free key makes available to the oldest waiter that can take it.
--
-- `queue` is a list of `<hand-off ms><mode>|<token>` entries, oldest first (`<mode>` is empty
-- for locks, semaphores and writers, `r` for readers); `tickets` a zset of token -> when its
-- ticket lapses (epoch ms), read a few entries at a time. A waiter is skipped (and dropped)
-- when its ticket lapsed, or when its client let a reservation lapse untaken: each hand-off
-- records `@<client id>` in `tickets`, scored with the reservation's deadline, and a record
-- whose deadline has passed means that client did not take what it was given (it died, or
-- stalled past its hand-off time), so its other tickets are not trusted with a reservation
-- either. A client proves itself alive again by queueing a new ticket or releasing (both clear
-- its record); the caller's own client `me` is never skipped. So a dead client costs one
-- hand-off time, however many of its tickets are queued. A record is scored negative once its
-- lapse has been counted. Records share the zset's expiry, which outlasts every ticket they
-- could concern.
--
-- `own`: the caller's own queue entry, if it waits (reaching it means the caller is next, if
-- `can_enter` lets it). `grant(waiter, ms, more, mode)` writes the reservation (the lock key set
-- to the waiter's token, a permit, a read or write hold) for `ms`; `can_enter(mode)` (nil:
-- always) says whether a waiter of that mode could be granted now: the scan stops at the first
-- live waiter that cannot. `publish` (PUBLISH or SPUBLISH) announces on
-- `channel_prefix .. <client id>`, the waiter's client's channel.
--
-- Returns outcome, ms, waiter, lapsed, more: outcome 'handed' (granted to `waiter` for `ms` and
-- announced), 'own' (the caller is the oldest live waiter, now out of the queue; nothing was
-- granted), 'blocked' (the oldest live waiter cannot enter yet; nothing was granted) or nil (no
-- live waiter); `lapsed`, the number of lapsed reservations first noticed here; `more`, whether
-- anyone is still queued.

local function client_of(token)
  return string.match(token, ':(%x+):[^:]+$')
end

local now
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end

local function queue_up(queue, tickets, token, entry, ticket, me)
  if redis.call('ZADD', tickets, clock() + ticket, token) == 1 then
    -- A list emptied by a hand-off is deleted while the tickets survive (a client's lapse
    -- record): recreated here, it needs an expiry of its own, at least the tickets'.
    if redis.call('RPUSH', queue, entry) == 1 then
      redis.call('PEXPIRE', queue, math.max(ticket, redis.call('PTTL', tickets)))
    end
    -- A new ticket proves the client alive: its lapsed hand-off record goes.
    if me then redis.call('ZREM', tickets, '@' .. me) end
  end
  -- Only ever lengthened: a waiter with a shorter ticket must not expire the others'. The list
  -- never outlives the tickets by less than this: both are set together, or the list longer.
  if redis.call('PTTL', tickets) < ticket then
    redis.call('PEXPIRE', queue, ticket)
    redis.call('PEXPIRE', tickets, ticket)
  end
end

local function hand_over(queue, tickets, me, own, publish, channel_prefix, grant, can_enter)
  local lapsed, counted = 0, {}
  -- The head is usually live: a small first read (a zset this small is a list that ZMSCORE
  -- scans). Bounded: a queue of more than 1000 dead entries is left for the next release.
  for round = 1, 34 do
    local size = round == 1 and 2 or 32
    local chunk = redis.call('LRANGE', queue, 0, size - 1)
    if #chunk == 0 then return nil, 0, nil, lapsed, false end
    local parsed, members = {}, {}
    for i, entry in ipairs(chunk) do
      local ms, mode, waiter = string.match(entry, '^(%d+)(%a*)|(.+)$')
      local client = waiter and client_of(waiter)
      parsed[i] = {ms, waiter, client, mode}
      members[2 * i - 1] = waiter or entry
      members[2 * i] = '@' .. (client or '-')
    end
    local scores = redis.call('ZMSCORE', tickets, unpack(members))
    local dropped = {}
    local chosen, blocked
    for i, entry in ipairs(chunk) do
      local waiter, client, mode = parsed[i][2], parsed[i][3], parsed[i][4]
      if entry == own then
        if can_enter and not can_enter(mode) then
          blocked = i
        else
          dropped[#dropped + 1] = waiter
          chosen = i
        end
        break
      end
      local until_ms, record = tonumber(scores[2 * i - 1]), tonumber(scores[2 * i])
      local gone = record and record <= clock() and client ~= me
      if gone and record > 0 and not counted[client] then
        -- First noticed: counted once, and kept (negative) so the client's other tickets are skipped.
        counted[client] = true
        lapsed = lapsed + 1
        redis.call('ZADD', tickets, -record, '@' .. client)
      end
      if until_ms and until_ms > clock() and not gone then
        if can_enter and not can_enter(mode) then
          blocked = i
        else
          dropped[#dropped + 1] = waiter
          chosen = i
        end
        break
      end
      if waiter then dropped[#dropped + 1] = waiter end
      -- A lapsed ticket of a live client: it may still be listening, and retries when told.
      if client and not gone then redis.call(publish, channel_prefix .. client, '') end
    end
    if blocked then
      -- The dead entries before it go; it keeps its place.
      if me then dropped[#dropped + 1] = '@' .. me end
      if blocked > 1 then redis.call('LTRIM', queue, blocked - 1, -1) end
      if #dropped > 0 then redis.call('ZREM', tickets, unpack(dropped)) end
      return 'blocked', 0, nil, lapsed, true
    end
    if chosen then
      local ms, waiter, client, mode = parsed[chosen][1], parsed[chosen][2], parsed[chosen][3], parsed[chosen][4]
      local mine = chunk[chosen] == own
      local more = chosen < #chunk or (#chunk == size and redis.call('LLEN', queue) > chosen)
      if not mine then
        grant(waiter, ms, more, mode)
        -- Recorded before the tokens leave the zset, so the zset (and its expiry) stays.
        if client then redis.call('ZADD', tickets, clock() + tonumber(ms), '@' .. client) end
      end
      -- The caller's client is alive: its record goes (unless it was just handed the key).
      if me and (mine or client ~= me) then dropped[#dropped + 1] = '@' .. me end
      redis.call('LTRIM', queue, chosen, -1)
      if #dropped > 0 then redis.call('ZREM', tickets, unpack(dropped)) end
      if mine then return 'own', 0, nil, lapsed, more end
      if client then redis.call(publish, channel_prefix .. client, waiter) end
      return 'handed', tonumber(ms), waiter, lapsed, more
    end
    redis.call('LTRIM', queue, #chunk, -1)
    if #dropped > 0 then redis.call('ZREM', tickets, unpack(dropped)) end
  end
  return nil, 0, nil, lapsed, redis.call('LLEN', queue) > 0
end
