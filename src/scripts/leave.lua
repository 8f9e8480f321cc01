-- Give up on taking the lock (the wait ran out, a signal arrived, or an error): nothing of ours
-- stays behind.
--
-- A: token, claim_ms, quiet ('quiet': a quorum's queue node: do not wake the next waiter yet), to
--      (a quorum's other nodes: reserve what we give back for this waiter, chosen by the queue
--      node; see release.lua), tombstone_ms (> 0: we are not sure that every attempt we sent with
--      this token has reached the server; see below), log_max, meta_idle_ms (see `event` in
--      common.lua: a waiter that leaves is told as `left`; a lock given back as `released`),
--      watch_all (see `listened` in common.lua), for_good ('1': the waiter gives up for good, see
--      below; '' for the undo of one failed attempt)
--
-- Returns the waiter the lock was passed on to, or false.
-- If the lock was just reserved for us, we will not claim it: pass it on to the next waiter at
-- once instead of making the queue wait for the reservation to expire. If it is held with our
-- token, an attempt whose reply we never read (a timeout, a dropped connection) took it: nobody
-- knows that token, so give the lock back rather than leave it held for its whole TTL, and
-- forget the holder record (the fence counter stays: it never goes back).
--
-- A quorum's waiter tries each time with a fresh token, and its tokens share their first
-- WAITER_ID characters (acquire.lua, acquire.rs's `next_token`): a release that crossed its
-- attempts may have reserved a node for one of its earlier tokens, which acquire.lua hands to the
-- waiter. A waiter that gives up for good (waiter = '1': its wait ran out, a signal) passes on
-- such a reservation too, not only one for the token it gives up, or the node would stay
-- reserved for nobody for the claim window. The undo of one failed attempt (waiter = '') leaves
-- it: the waiter goes on and claims it.
--
-- A tombstone: an attempt whose reply we never read (a frozen server, a timeout) may still be on
-- its way, on another connection, and run after this script: it would take a free lock for a
-- token nobody knows. With tombstone_ms, `LOCK:gone:TOKEN` (the lock's hash tag, so the same
-- slot) tells acquire.lua to do nothing for that token; it expires by itself. Written only when
-- the client is unsure, so a normal give-up leaves nothing behind.
local A = {
  token = ARGV[1], claim_ms = ARGV[2], quiet = ARGV[3], to = ARGV[4], tombstone_ms = ARGV[5],
  log_max = ARGV[6], meta_idle_ms = ARGV[7], watch_all = ARGV[8], for_good = ARGV[9],
}
watch_all = A.watch_all or ''
local gone = tonumber(A.tombstone_ms) or 0
if gone > 0 then
  redis.call('SET', gone_key(A.token), '1', 'PX', gone)
end
local queued = drop_waiter(A.token)
redis.call('DEL', wake_key(A.token))
local current = redis.call('GET', LOCK)
local WAITER_ID = 16
local reserved = current == '~' .. A.token
if not reserved and A.for_good == '1' and current and string.sub(current, 1, 1) == '~' then
  local held = string.sub(current, 2)
  if #held == #A.token and string.sub(held, 1, WAITER_ID) == string.sub(A.token, 1, WAITER_ID) then
    reserved = true
    redis.call('DEL', wake_key(held))
  end
end
-- Read, and told, before the lock is passed on: a grant (see grant_to in common.lua) writes the
-- next holder's record over ours, and its `acquired` comes after our end.
local mine = redis.call('HMGET', META, 'token', 'acquired_ms', 'fence', 'told')
local ours = mine[1] == A.token
if queued or reserved or ours then
  local at = now_ms()
  if current == A.token and ours and mine[4] == A.token then
    -- Taken by an attempt whose reply we never read, and given back: its history closes.
    event('released', A.token, {'fence', mine[3] or '',
      'held_ms', math.max(at - (tonumber(mine[2]) or at), 0)}, A.log_max, tonumber(A.meta_idle_ms) or 0, at)
  else
    event('left', A.token, {}, A.log_max, 0, at)
  end
end
local next, granted = false, false
if reserved or current == A.token then
  next, granted = pass_on(A.claim_ms, A.quiet == 'quiet', A.to,
    {log_max = A.log_max, meta_idle_ms = A.meta_idle_ms, ended = ours})
end
-- A lock with more than one holder (see slots_common.lua): a place reserved for us, or taken by
-- an attempt whose reply we never read, goes to the waiter whose turn it is; and a writer that
-- leaves a shared lock's queue lets in the readers that waited behind it.
local gave = 0
if current and string.sub(current, 1, 1) == '#' then
  gave = redis.call('HDEL', SLOTS, '~' .. A.token, A.token)
  if gave > 0 or (queued and current == '#shared') then
    local now = now_ms()
    local view = live_slots(now, {A.log_max, tonumber(A.meta_idle_ms) or 0})
    local shared = current == '#shared'
    admit(view, shared and math.huge or limit_of(redis.call('HGET', META, 'slots')), shared,
      A.claim_ms, now)
    keep_marker(view, current, now)
  end
  if gave > 0 and not (queued or reserved or ours) then
    event('left', A.token, {}, A.log_max, 0, now_ms())
  end
end
if ours and not granted then
  redis.call('HDEL', META, 'token', 'host', 'pid', 'user', 'note', 'acquired_ms', 'ttl_ms',
    'expires_ms', 'released_ms')
end
return next
