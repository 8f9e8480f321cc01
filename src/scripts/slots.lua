-- Take a place in a lock with more than one holder (`--slots N`, `--pool`, `--shared`; see
-- slots_common.lua), or join the queue of waiters.
--
-- A as acquire.lua's (want_run_id and previous token unused: a quorum is refused before it
--      gets here; who asks is also recorded as `slots_by` when this call sets what the lock is;
--      preemptible and preempt unused: refused for these locks before they get here; kept
--      ('1': a keeper keeps the place alive, see kept_place in common.lua); grant unused: a
--      place is reserved, never granted, and queue_up records no grant for a reader ('s')),
--      then the spec: 'n:N', 'p:A,B,C' or 's' (see META `slots`).
--
-- Returns {1, fence, acquired_ms, false, slot} when taken (slot: the lowest index from 0 that no
-- other holder has; in a pool, the index of the name), {0, pttl, queued, reserved[, state]} when
-- busy (as acquire.lua; pttl: until the earliest place may free itself), or {-2, spec, by} when
-- the lock is something else now ('' for a plain lock, and `by` then names its holder, if any):
-- nothing is written then.
--
-- Atomic together, as for a plain lock: the count of live holders, the test that it is our turn
-- (no live waiter ahead of us: strict first come, first served, so a waiter that needs a place
-- blocks the ones behind it and nobody starves), the record, the fence and the marker; joining
-- the queue is in the same step as the failed attempt (no lost wake-ups). A shared lock is
-- writer-preferring: a reader that finds any waiter ahead of it (a writer) queues behind it.
-- A reader that takes a shared lock lets in the readers queued right behind it (admit), so
-- consecutive readers at the head of the queue are woken together.
--
-- Told (see `event` in common.lua): `acquired` (with the slot), `expired` for each holder found
-- dead, `queued`.
local A = {
  token = ARGV[1], ttl_ms = ARGV[2], host = ARGV[3], pid = ARGV[4], user = ARGV[5], note = ARGV[6],
  join = ARGV[7], claim_ms = ARGV[8], block_cap_ms = ARGV[9], lease_margin_ms = ARGV[10],
  want_run_id = ARGV[11], prev = ARGV[12], meta_idle_ms = ARGV[13], wait_ms = ARGV[14],
  pidns = ARGV[15], waited_ms = ARGV[16], log_max = ARGV[17], tell = ARGV[18],
  watch_all = ARGV[19], supersede_ms = ARGV[20], who = ARGV[21], preemptible = ARGV[22],
  kept = ARGV[23], preempt = ARGV[24], grant = ARGV[25], spec = ARGV[26],
}
-- A place is never granted by a release (see above): no waiter of ours records a grant.
A.grant = nil
local token, ttl, spec = A.token, A.ttl_ms, A.spec
watch_all = A.watch_all or ''
local log_max = A.log_max
local shared = spec == 's'
local marker = shared and '#shared' or '#slots'
local limit = limit_of(spec)
local meta_idle = tonumber(A.meta_idle_ms) or 0

local ended = given_up(token)
if ended then
  return ended
end

local now = now_ms()
local current = redis.call('GET', LOCK)
local first_char = current and string.sub(current, 1, 1)
-- A plain holder: a writer of a shared lock (readers wait for it), or a plain lock.
local plain_held = current and first_char ~= '#' and first_char ~= '~'
if plain_held and not shared then
  local h = redis.call('HMGET', META, 'token', 'user', 'host', 'pid')
  local who = ''
  if h[1] == current then
    who = who_is(h[2], h[3], h[4])
  end
  return {-2, '', who}
end
local view = live_slots(now, {log_max, tonumber(ttl) + meta_idle})

-- Taken already by this token: an attempt re-sent after its reply was lost. Report it again.
local mine = view.holders[token]
if mine then
  return {1, tonumber(mine.fence) or 0, mine.acquired or now, false, mine.slot or 0}
end

local first = first_live_waiter()
local recorded = redis.call('HMGET', META, 'slots', 'slots_by')
local ours = current == '~' .. token or view.reserved[token] ~= nil
-- No holder, no place reserved, no waiter but us: whatever the lock was, it may become ours.
local idle = view.count == 0 and not plain_held and (not current or ours or first_char == '#')
  and (not first or first == token)
local agrees
if shared then
  agrees = not recorded[1] or recorded[1] == '' or recorded[1] == 's'
else
  agrees = recorded[1] == spec
end
if not idle and not agrees then
  return {-2, recorded[1] or '', recorded[2] or ''}
end

local function take(queued)
  local used = {}
  for _, h in pairs(view.holders) do
    if h.slot then
      used[h.slot] = true
    end
  end
  local slot = 0
  while used[slot] do
    slot = slot + 1
  end
  local waited = math.max(tonumber(A.waited_ms) or 0, 0)
  local before = redis.call('HMGET', META, 'fence', 'acquisitions', 'waited_ms')
  local set = {'acquisitions', int((tonumber(before[2]) or 0) + 1),
    'waited_ms', int((tonumber(before[3]) or 0) + waited)}
  local fence, write = next_fence(before[1])
  if write then
    set[#set + 1] = 'fence'
    set[#set + 1] = int(fence)
  end
  if recorded[1] ~= spec then
    set[#set + 1] = 'slots'
    set[#set + 1] = spec
    set[#set + 1] = 'slots_by'
    set[#set + 1] = A.who or ''
  end
  redis.call('HSET', META, unpack(set))
  local expires = now + tonumber(ttl)
  redis.call('HSET', SLOTS, token, table.concat({int(expires), slot, int(fence), int(now), ttl,
    A.pid, A.user, A.host, A.pidns or '', A.note}, '\t'))
  if A.kept == '1' then
    kept_place(token, ttl)
  end
  if view.reserved[token] then
    redis.call('HDEL', SLOTS, '~' .. token)
    view.reserved[token] = nil
  else
    view.count = view.count + 1
  end
  view.holders[token] = {expires = expires, slot = slot}
  view.latest = math.max(view.latest, expires)
  if queued then
    drop_waiter(token)
  end
  redis.call('DEL', wake_key(token))
  if shared then
    admit(view, limit, true, A.claim_ms, now)
  end
  keep_marker(view, marker, now)
  keep_meta(A.meta_idle_ms, view.latest - now)
  event('acquired', token, {'fence', int(fence), 'slot', slot, 'user', A.user, 'host', A.host,
    'pid', A.pid, 'note', A.note, 'waited_ms', waited, 'ttl_ms', tonumber(ttl)}, log_max,
    tonumber(ttl) + meta_idle, now)
  return {1, fence, now, false, slot}
end

-- Our turn came: a place reserved for us here, or the whole lock handed to us as a plain
-- release hands it over (the key '~' .. token).
if ours then
  return take(first == token)
end
local room = view.count < limit and not plain_held and (not current or first_char == '#')
if room and (not first or first == token) then
  return take(first == token)
end
if room then
  -- Free places, but others' turn: give them their places now rather than at the next release.
  admit(view, limit, shared, A.claim_ms, now)
  keep_marker(view, marker, now)
  if view.reserved[token] then
    -- We were among them (queued behind waiters that had left or died).
    return take(false)
  end
  current = redis.call('GET', LOCK)
end

local pttl = redis.call('PTTL', LOCK)
if view.earliest and not plain_held then
  pttl = math.max(view.earliest - now, 0)
end
local reserved = (current and string.sub(current, 1, 1) == '~') and 1 or 0
return queue_up(A, token, now, pttl, redis.call('PTTL', LOCK), reserved, shared and 's' or '',
  log_max)
