-- Locks with more than one holder: counting semaphores (`--slots N`), pools (`--pool A,B,C`) and
-- shared locks (`--shared`). Prepended, after common.lua, to the scripts that take, release,
-- renew and leave them (see scripts.rs). They keep the queue, the leases, the wake lists, the
-- tombstones, the fence counter and the history of every lock (common.lua); what differs:
--
-- KEYS[1] lock   '#slots' (a semaphore or a pool) or '#shared' while the lock has holders or
--                places reserved, with a PX expiry at the latest of theirs: a plain (exclusive)
--                request finds the lock busy, and the key expires by itself with the last holder.
--                A shared lock's exclusive holder (a writer) is a plain holder: its token there.
-- LOCK:slots     hash: TOKEN -> 'EXPIRES\tSLOT\tFENCE\tACQUIRED\tTTL\tPID\tUSER\tHOST\tPIDNS\tNOTE'
--                for each holder (server ms; the note last, so nothing in it can shift the other
--                fields), and '~' .. TOKEN -> 'EXPIRES' for each waiter whose turn came (a place
--                held for it until it claims it, or until EXPIRES). An entry whose EXPIRES has
--                passed is dead, and every script drops the dead ones before it counts: a holder
--                that crashed frees its place within its TTL, by the server's clock, with nobody
--                releasing it.
-- META `slots`   what the lock is while it has holders or waiters: 'n:N' (N slots), 'p:A,B,C'
--                (a pool: slot i is the i-th name) or 's' (shared); '' or absent for a plain
--                lock. `slots_by` says who made it so. Set by a holder that found the lock with
--                no holders and no waiters; a plain acquisition clears it.
-- LEASES TOKEN:f has 's' for a waiter that asked for a shared hold (a plain waiter in the same
--                queue is a writer); it goes with the waiter's lease (drop_waiter).
local SLOTS = LOCK .. ':slots'

-- How many holders `spec` admits at once (a shared lock: any number; unknown: one).
local function limit_of(spec)
  local kind, rest = string.match(spec or '', '^(%a):?(.*)$')
  if kind == 'n' then
    return tonumber(rest) or 1
  elseif kind == 'p' then
    local n = 1
    for _ in string.gmatch(rest, ',') do
      n = n + 1
    end
    return n
  elseif kind == 's' then
    return math.huge
  end
  return 1
end

-- Deletes `fields` of LOCK:slots, a bounded number per command (Lua's stack is not endless).
local function drop_fields(fields)
  for i = 1, #fields, 500 do
    redis.call('HDEL', SLOTS, unpack(fields, i, math.min(i + 499, #fields)))
  end
end

-- The live entries of LOCK:slots at `now`, the dead ones dropped (a holder that died is told as
-- `expired` when `log` is given: {log_max, keep_ms}): holders (token -> {expires, slot, fence,
-- acquired, value}), reserved (token -> expires), their count, and the latest and earliest
-- expiry among them.
local function live_slots(now, log)
  local all = redis.call('HGETALL', SLOTS)
  local view = {holders = {}, reserved = {}, count = 0, latest = 0, earliest = nil}
  local dead = {}
  for i = 1, #all, 2 do
    local field, value = all[i], all[i + 1]
    local expires = tonumber(string.match(value, '^(%d+)')) or 0
    local reservation = string.sub(field, 1, 1) == '~'
    if expires <= now then
      dead[#dead + 1] = field
      if log and not reservation then
        local _, slot, fence, acquired, _, pid, user, host = string.match(value,
          '^(%d*)\t(%d*)\t(%d*)\t(%d*)\t(%d*)\t([^\t]*)\t([^\t]*)\t([^\t]*)')
        local from = tonumber(acquired) or expires
        event('expired', field, {'fence', fence or '', 'slot', slot or '', 'user', user or '',
          'host', host or '', 'pid', pid or '', 'held_ms', math.max(expires - from, 0),
          'expires_ms', expires}, log[1], log[2], now)
      end
    else
      view.count = view.count + 1
      view.latest = math.max(view.latest, expires)
      view.earliest = math.min(view.earliest or expires, expires)
      if reservation then
        view.reserved[string.sub(field, 2)] = expires
      else
        local slot, fence, acquired = string.match(value, '^%d+\t(%d+)\t(%d+)\t(%d+)')
        view.holders[field] = {expires = expires, slot = tonumber(slot), fence = fence,
          acquired = tonumber(acquired), value = value}
      end
    end
  end
  if #dead > 0 then
    drop_fields(dead)
  end
  return view
end

-- After a change: the lock key is `marker`, and LOCK:slots kept, until the latest entry left in
-- `view` expires (counted again here: a release or a shorter renewal can bring it closer), or,
-- with none left, the lock is free (unless it was just handed to a writer: then the key is the
-- writer's reservation, see admit). Nothing of it outlives its last holder.
local function keep_marker(view, marker, now)
  if view.handed then
    redis.call('DEL', SLOTS)
    return
  end
  local latest = 0
  for _, h in pairs(view.holders) do
    latest = math.max(latest, h.expires)
  end
  for _, expires in pairs(view.reserved) do
    latest = math.max(latest, expires)
  end
  view.latest = latest
  if latest <= now then
    redis.call('DEL', LOCK, SLOTS)
  else
    local px = int(latest - now)
    redis.call('SET', LOCK, marker, 'PX', px)
    redis.call('PEXPIRE', SLOTS, px)
  end
end

-- Gives free places to the waiters at the head of the queue, one reservation and one wake-up
-- each (no herd), while there is room. In a shared lock, a writer (a plain waiter) at the head
-- stops it: nobody behind the writer gets in (writers are not starved), and once no holder and
-- no reservation is left, the lock is handed to the writer as a plain release would (the key
-- becomes '~' .. writer; view.handed). Bounded: a script never runs long (a forced release that
-- frees more than 64 places wakes 64; the others look again within their block, 3 s at most).
local function admit(view, limit, shared, claim_ms, now)
  for _ = 1, 64 do
    if view.count >= limit then
      return
    end
    local waiter = first_live_waiter()
    if not waiter then
      return
    end
    local flags = shared and redis.call('HGET', LEASES, waiter .. ':f') or ''
    if shared and not string.find(flags, 's', 1, true) then
      if view.count == 0 and hand_over(waiter, claim_ms) then
        view.handed = waiter
      end
      return
    end
    drop_waiter(waiter)
    local expires = now + tonumber(claim_ms)
    redis.call('HSET', SLOTS, '~' .. waiter, int(expires))
    view.reserved[waiter] = expires
    view.count = view.count + 1
    view.latest = math.max(view.latest, expires)
    redis.pcall('LPUSH', wake_key(waiter), '1')
    redis.call('PEXPIRE', wake_key(waiter), claim_ms)
  end
end
