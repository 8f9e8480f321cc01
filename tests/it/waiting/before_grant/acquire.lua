-- Take the lock, or join the queue of waiters.
--
-- A: token, ttl_ms, host, pid, user, note, join ('1': queue up when busy), claim_ms,
--      block_cap_ms, lease_margin_ms, want_run_id ('1': return this server's run_id),
--      previous token (a quorum's waiter tries each time with a fresh token, so that a late
--      undo of an earlier attempt can never delete a later one: it keeps the earlier token's
--      place in the queue and a reservation made for it or for any earlier token of the same
--      waiter, see WAITER_ID below), meta_idle_ms (how long meta outlives
--      the lock and the queue; see keep_meta), wait_ms (what is left of the client's wait; ''
--      when it waits forever: recorded with the waiter, see KEYS[4] in common.lua), pidns (the
--      holder's pid namespace, recorded so that `status` judges its pid only in that namespace),
--      waited_ms (how long the client has waited so far: told with `acquired`, and summed in meta
--      `waited_ms` beside the count `acquisitions`, for metrics), log_max (how many entries the
--      lock's history keeps; see `event` in common.lua),
--      tell ('1': a queued waiter's status line is due; the busy reply adds the lock's state),
--      watch_all (see `listened` in common.lua), supersede (--supersede: how long the mark of a
--      waiter superseded lasts, ms; '' otherwise: see supersede_earlier in common.lua), who asks
--      ('user@host (pid N)': named to the waiters it supersedes), preemptible ('1': a later
--      --preempt may ask this holder to stop; recorded in META `preemptible`), kept ('1': a
--      keeper keeps the lock alive for the holder's pid, `acquire --while-pid`; META `kept`),
--      preempt ('1': --preempt, see below)
--
-- Returns {1, fence, acquired_ms, run_id} when taken, {-2, spec, by} for a lock with more than
-- one holder (see other_kind), {-3, at_ms, by} when a later --supersede waiter superseded this
-- one (see given_up), {0, pttl, queued, reserved} when busy (queued: 1 if we are in
-- the queue now, 0 if not; reserved: 1 if the lock is some waiter's turn rather than held, see
-- below; with tell, once queued, a fifth item: the lock's state as `status` reads it, see
-- snapshot in common.lua), and busy, not queued, for a token that has a tombstone (see leave.lua). Who holds the lock is for `status` to tell, and for a waiter's status line (tell).
--
-- A quorum (want_run_id) also marks, in meta `turn`/`turn_until`, a waiter that takes the lock
-- from the queue: until it has a majority on the other nodes too, this node's grant is only its
-- turn, and a majority elsewhere must not count (a later waiter or a newcomer would overtake
-- it), so busy answers call it reserved while the mark lasts (the claim window plus the longest
-- wait before the waiter looks again: a waiter that died there holds up the queue that long).
--
-- The fence: max(counter in meta + 1, this server's clock in microseconds), stored back as the
-- counter. The counter keeps fences strictly increasing while meta lives, even if the clock steps
-- back. The clock keeps them increasing when meta is lost (evicted, expired after its idle time,
-- FLUSHALL, a restart without persistence) or stale (a replica promoted before it had the last
-- increments): as long as the clock never stepped back, a fence is at most the clock of the
-- acquisition that handed it out (one acquisition takes more than a microsecond), so a later
-- clock is above every earlier fence. The one assumption left: the clock does not step back
-- around the time meta is lost.
--
-- Atomic together: the test that the lock is free and that it is our turn (no live waiter ahead
-- of us), SET PX, the fence and the owner record. So a fence is never burned by a failed attempt,
-- no reader sees a lock without its record, and a newcomer never overtakes the queue. Joining the
-- queue in the same script as the failed attempt means a release that comes before we block on
-- our wake list still finds us (and pushes to the list): no lost wake-ups.
--
-- --preempt: a waiter that asks for it queues ahead of every waiter that did not (behind earlier
-- preemptors: see queue_up in common.lua) and, when the holder took the lock --preemptible,
-- asks it to stop, in the same step: META `preempted` = 'TOKEN:AT:BY' (the holder's token, so
-- that a later holder never reads it as its own), published on LOCK:events as
-- 'preempted:TOKEN:AT:BY' and told as `preempted`. The lock stays the holder's: it stops its
-- command, then releases, and the release hands the lock to the queue's head, the preemptor.
-- A holder that did not opt in is left alone; the preemptor waits for it, first in line.
--
-- Told (see `event` in common.lua): `acquired`; before it, `expired` when the previous holder's
-- record was never dated by a release (its TTL ran out: nobody else deletes a lock key);
-- `queued` when a waiter joins the queue; `preempted` (above).
local A = {
  token = ARGV[1], ttl_ms = ARGV[2], host = ARGV[3], pid = ARGV[4], user = ARGV[5], note = ARGV[6],
  join = ARGV[7], claim_ms = ARGV[8], block_cap_ms = ARGV[9], lease_margin_ms = ARGV[10],
  want_run_id = ARGV[11], prev = ARGV[12], meta_idle_ms = ARGV[13], wait_ms = ARGV[14],
  pidns = ARGV[15], waited_ms = ARGV[16], log_max = ARGV[17], tell = ARGV[18],
  watch_all = ARGV[19], supersede_ms = ARGV[20], who = ARGV[21], preemptible = ARGV[22],
  kept = ARGV[23], preempt = ARGV[24],
}
local token, ttl = A.token, A.ttl_ms
watch_all = A.watch_all or ''
local log_max = A.log_max
-- A quorum's node grants only its part of an attempt that may not win a majority: the
-- acquisition is told, and counted, by fence.lua once the quorum holds the lock.
local quorum = A.want_run_id == '1'

-- Given up already (leave.lua left a tombstone): this is an attempt that arrived after its
-- client gave up on it. Do nothing: busy, not queued. Or superseded: say by whom (see
-- given_up). One GET per attempt.
local ended = given_up(token)
if ended then
  return ended
end

-- Asks `holder` to stop for `by` ('user@host (pid N)'), at `now` (ms): recorded in META
-- `preempted`, announced on LOCK:events and told as `preempted` (the history kept `keep` ms).
local function ask_to_stop(holder, by, keep, now)
  local at = int(now)
  redis.call('HSET', META, 'preempted', holder .. ':' .. at .. ':' .. by)
  redis.pcall('PUBLISH', LOCK .. ':events', 'preempted:' .. holder .. ':' .. at .. ':' .. by)
  event('preempted', holder, {'by', by}, log_max, keep, now)
end

-- A --preemptible holder that takes the lock while a --preempt waiter is at the head of the
-- queue (it queued while the lock was being handed to this one) is asked to stop at once, as if
-- that waiter had asked it (see below): its ticket is below 0, ahead of every plain one.
local function ask_if_preempted(holder, keep, now)
  local head = redis.call('ZRANGE', QUEUE, 0, 0, 'WITHSCORES')
  if not head[1] or tonumber(head[2]) >= 0 then
    return
  end
  local who = redis.call('HGET', LEASES, who_field(head[1]))
  local by = '?'
  if who then
    local f = {}
    for field in string.gmatch(who, '([^\t]*)\t?') do
      f[#f + 1] = field
    end
    by = who_is(f[4], f[5], f[3])
  end
  ask_to_stop(holder, by, keep, now)
end

-- `queued`: we may be in the queue (drop us from it); `woken`: the lock was reserved for us,
-- which took us out of the queue already (hand_over), but our wake list may still hold its push.
local function take(queued, woken)
  redis.call('SET', LOCK, token, 'PX', ttl)
  if queued then
    drop_waiter(token)
  end
  if queued or woken then
    redis.call('DEL', wake_key(token))
  end
  local us = now_us()
  local now = math.floor(us / 1000)
  local waited = math.max(tonumber(A.waited_ms) or 0, 0)
  local before = redis.call('HMGET', META, 'fence', 'acquisitions', 'waited_ms', 'token',
    'released_ms', 'told', 'slots')
  -- released_ms '' (not deleted: one command less): the new holder has not released yet.
  local record = {'token', token, 'host', A.host, 'pid', A.pid, 'user', A.user,
    'note', A.note, 'acquired_ms', int(now), 'ttl_ms', ttl, 'expires_ms', int(now + ttl),
    'pidns', A.pidns or '', 'released_ms', '', 'preemptible', A.preemptible or '',
    'kept', A.kept or ''}
  if before[7] and before[7] ~= '' then
    -- It was a lock with more than one holder, idle now: a plain lock from here on.
    table.insert(record, 'slots')
    table.insert(record, '')
  end
  if not quorum then
    -- `told`: the acquisition of this token is in the history, so its end will be too.
    table.insert(record, 'told')
    table.insert(record, token)
    table.insert(record, 'acquisitions')
    table.insert(record, int((tonumber(before[2]) or 0) + 1))
    table.insert(record, 'waited_ms')
    table.insert(record, int((tonumber(before[3]) or 0) + waited))
  end
  local keep = tonumber(ttl) + (tonumber(A.meta_idle_ms) or 0)
  if before[4] and before[4] == before[6] and before[4] ~= token and (before[5] or '') == '' then
    -- The rest of the previous holder's record, read only when it is told (an expiry is rare).
    local was = redis.call('HMGET', META, 'acquired_ms', 'expires_ms', 'user', 'host', 'pid')
    local from, to = tonumber(was[1]) or now, tonumber(was[2]) or now
    event('expired', before[4], {'fence', before[1] or '', 'user', was[3] or '',
      'host', was[4] or '', 'pid', was[5] or '', 'held_ms', math.max(to - from, 0),
      'expires_ms', to}, log_max, keep, now)
  end
  local fence, write = next_fence(before[1])
  if write then
    table.insert(record, 'fence')
    table.insert(record, int(fence))
  end
  redis.call('HSET', META, unpack(record))
  if queued and A.want_run_id == '1' then
    redis.call('HSET', META, 'turn', token,
      'turn_until', int(now + tonumber(A.claim_ms) + tonumber(A.block_cap_ms)))
  end
  keep_meta(A.meta_idle_ms, tonumber(ttl))
  if A.preemptible == '1' then
    ask_if_preempted(token, keep, now)
  end
  if not quorum then
    event('acquired', token, {'fence', int(fence), 'user', A.user, 'host', A.host,
      'pid', A.pid, 'note', A.note, 'waited_ms', waited, 'ttl_ms', tonumber(ttl)}, log_max,
      keep, now)
  end
  return {1, fence, now, run_id(A.want_run_id)}
end

-- A lock with more than one holder (see slots_common.lua) is not for a plain request, except a
-- shared lock, whose writers queue here: {-2, spec, by} says what it is (META `slots`), and
-- nothing is written. Read only where such a lock can show: its marker in the lock key, or a
-- queue with no holder (its holders gone, its waiters not).
local function other_kind(marked)
  local kind = redis.call('HMGET', META, 'slots', 'slots_by')
  if marked or (kind[1] and kind[1] ~= '' and kind[1] ~= 's') then
    return {-2, kind[1] or '', kind[2] or ''}
  end
end

-- A quorum's waiter (prev given) tries each time with a fresh token, and all its tokens share
-- their first WAITER_ID characters: the waiter's id (acquire.rs's `next_token`). A reservation
-- or a grant for any earlier token of the waiter is the waiter's, not only one for the token just
-- before: a release whose reservation reached this node after the waiter's next attempt had
-- passed here (it took the queue node, then retried with yet another token) reserved it for a
-- token the waiter no longer uses, and the waiter would wait for that reservation to expire (the
-- claim window) while it held the queue node, which held up the whole queue.
local WAITER_ID = 16
local current = redis.call('GET', LOCK)
local prev = A.prev
local function earlier_of_ours(held)
  return held == prev or (#held == #token and string.sub(prev, 1, WAITER_ID) ==
    string.sub(token, 1, WAITER_ID) and string.sub(held, 1, WAITER_ID) ==
    string.sub(token, 1, WAITER_ID))
end
if prev and prev ~= '' and prev ~= token then
  local ticket = redis.call('ZSCORE', QUEUE, prev)
  if ticket then
    local was = redis.call('HMGET', LEASES, prev, who_field(prev))
    drop_waiter(prev)
    redis.call('ZADD', QUEUE, ticket, token)
    if was[1] then
      redis.call('HSET', LEASES, token, was[1])
    end
    if was[2] then
      redis.call('HSET', LEASES, who_field(token), was[2])
    end
  end
  redis.call('DEL', wake_key(prev))
  -- A reservation for an earlier attempt is ours; so is a grant to one whose undo has not
  -- arrived yet (when it does, it no longer matches).
  if current and current ~= token and current ~= '~' .. token then
    local reserved = string.sub(current, 1, 1) == '~'
    local held = reserved and string.sub(current, 2) or current
    if earlier_of_ours(held) then
      if reserved and held ~= prev then
        redis.call('DEL', wake_key(held))
      end
      current = '~' .. token
    end
  end
end
if current and string.sub(current, 1, 1) == '#' and current ~= '#shared' then
  return other_kind(true)
end
if current == token then
  -- Taken already by this token: an attempt re-sent after its reply was lost (a Cluster client
  -- retries). Report it again, with the TTL counted from now, and burn no fence.
  redis.call('PEXPIRE', LOCK, ttl)
  redis.call('HSET', META, 'expires_ms', int(now_ms() + ttl))
  keep_meta(A.meta_idle_ms)
  local m = redis.call('HMGET', META, 'fence', 'acquired_ms')
  return {1, tonumber(m[1]) or 0, tonumber(m[2]) or now_ms(), run_id(A.want_run_id)}
end
if current == '~' .. token then
  -- hand_over took us out of the queue; a quorum's fresh token was queued in our place above.
  local fresh = prev and prev ~= '' and prev ~= token
  return take(fresh, true)
end
if not current then
  local first = first_live_waiter()
  if not first or first == token then
    return take(first ~= nil)
  end
  local other = other_kind()
  if other then
    return other
  end
  -- Free, but another waiter's turn: hand it over now rather than wait for a release.
  hand_over(first, A.claim_ms)
  current = '~' .. first
elseif string.sub(current, 1, 1) == '~' then
  local other = other_kind()
  if other then
    return other
  end
end

local pttl = redis.call('PTTL', LOCK)
local preempt = A.preempt == '1'
if preempt and string.sub(current, 1, 1) ~= '~' and string.sub(current, 1, 1) ~= '#' then
  -- Asked only of a holder that opted in, and once.
  local m = redis.call('HMGET', META, 'token', 'preemptible', 'preempted')
  if m[1] == current and m[2] == '1'
      and string.sub(m[3] or '', 1, #current + 1) ~= current .. ':' then
    ask_to_stop(current, A.who or '?', math.max(pttl, 0) + (tonumber(A.meta_idle_ms) or 0), now_ms())
  end
end
-- Busy because the lock is reserved for a waiter (its turn), not because someone holds it.
local reserved = 0
if string.sub(current, 1, 1) == '~' then
  reserved = 1
elseif A.want_run_id == '1' then
  local turn = redis.call('HMGET', META, 'turn', 'turn_until')
  if turn[1] == current and (tonumber(turn[2]) or 0) > now_ms() then
    reserved = 1
  end
end
return queue_up(A, token, now_ms(), pttl, pttl, reserved, '', log_max, preempt)
