-- Release the lock if, and only if, A.token holds it (compare-and-delete), waking the next waiter.
--
-- A: token, force ('force' to release whoever holds it), claim_ms, quiet ('quiet': a quorum's
--      queue node: do not wake the next waiter yet, the other nodes reserve the lock for it
--      first), to (a quorum's other nodes: reserve the lock for this waiter, chosen by the queue
--      node); with force also forcer_host, forcer_pid and forcer_user (recorded as forced_by),
--      then if_held, a condition ('' none, 'fence' or 'token'), and if_value (`release --force --if-fence N` /
--      `--if-token FINGERPRINT`) (all five '' when not forced), log_max (see `event` in
--      common.lua), status (the exit status of `exec`'s command, told with `released`; '' for
--      `release`), meta_idle_ms (how long the history outlives this release), watch_all
--      (see `listened` in common.lua), who ('keeper': the lock's own keeper releases it, or
--      acquire gives back a kept lock whose token it could not hand on; '' the owner)
--
-- Returns {1, holder-record, next} released: the record names who held it (for --force; empty
-- otherwise) and `next` is the waiter it was handed to, or false; {0} already free (expired or
-- never taken); {-1, holder-record} held by another token (nothing changed); {-2} a lock with
-- more than one holder (see slots_common.lua; nothing changed); {2, {}, false} to a keeper whose
-- owner released the lock already (its mark, taken away now: the keeper ends quietly); {3, {},
-- false} to the owner of a kept lock whose keeper is stopping its pid's work (below).
--
-- A keeper that stops its pid's work (a preemption, or SIGTERM to the keeper) first records
-- META `draining` = its token (extend.lua). The owner's release of such a lock (a bash EXIT
-- trap runs at once on SIGTERM, while the foreground step it started still runs) must not hand
-- the lock on beside that step: it records META `release_asked` = the token and changes nothing
-- else; the keeper releases once the work has ended (and escalates to SIGKILL meanwhile). The
-- keeper's own release is never deferred, and leaves no mark (nobody is left to read one).
--
-- The compare and the delete must be one atomic step: with two round trips the lock could expire
-- between them and a new holder's lock would be deleted (the seed's "classic wrong release"). The
-- hand-over to the first waiter is in the same step, so no newcomer can slip in between.
--
-- The holder record stays (it becomes the last holder's, for `status`), dated with the release.
-- A holder kept alive by a keeper (META `kept`, `acquire --while-pid`) that releases has its
-- token published on KEYS[1] .. ':events' as 'released:TOKEN', which stops the keeper, and
-- marked released (see mark_released in common.lua).
-- With 'force', the evicted holder's token is published on KEYS[1] .. ':events' as
-- 'forced:TOKEN:FORCED_AT:FORCED_BY' (a redlock token never contains ':'), and in the same step
-- the meta hash records the forced release: forced_token (the evicted token), forced_by
-- ('user@host (pid N)', the forcer's calling script) and forced_at (server ms). Those three
-- fields are not part of the holder record: the next acquisition leaves them, so an evicted
-- holder that looks only after someone else took the lock still finds who forced it (it compares
-- forced_token with its own); the next forced release overwrites them. A release that is not
-- forced never touches them.
--
-- A conditional force releases only if the lock here is still held by the holder the operator
-- saw: its record (the meta hash, whose token must be the lock's) has that fence, or its token
-- starts with that fingerprint. Otherwise it answers {-1, holder-record} and changes nothing, as
-- for another token. Checked in the same step as the delete, so the lock cannot change hands
-- between the check and the release (Terraform's `force-unlock LOCK_ID`).
--
-- Told (see `event` in common.lua): `released` by the holder (how long it held the lock, and the
-- command's exit status for `exec`), `forced` (whose lock, by whom).
--
-- A quorum's queue node ('quiet') that does not hold our token (a holder's majority need not
-- include it) still names the waiter whose turn is next, as {0|-1, holder-record, next}: the
-- other nodes reserve what they release for it and it is woken, so every release wakes the next
-- waiter. Free here: the lock is reserved for the first live waiter, as acquire.lua would. Held
-- here: the waiter it is reserved for, or whose turn it is (acquire.lua's `turn` mark), else the
-- first live waiter; this node is left as it is.
local A = {
  token = ARGV[1], force = ARGV[2], claim_ms = ARGV[3], quiet = ARGV[4], to = ARGV[5],
  forcer_host = ARGV[6], forcer_pid = ARGV[7], forcer_user = ARGV[8], if_held = ARGV[9],
  if_value = ARGV[10], log_max = ARGV[11], status = ARGV[12], meta_idle_ms = ARGV[13],
  watch_all = ARGV[14], who = ARGV[15],
}
local function next_here(current)
  if A.quiet ~= 'quiet' or A.force == 'force' then
    return false
  end
  if not current then
    return pass_on(A.claim_ms, true)
  end
  if string.sub(current, 1, 1) == '~' then
    return string.sub(current, 2)
  end
  local turn = redis.call('HMGET', META, 'turn', 'turn_until')
  if turn[1] == current and (tonumber(turn[2]) or 0) > now_ms() then
    return current
  end
  return first_live_waiter() or false
end

watch_all = A.watch_all or ''
local by_keeper = A.who == 'keeper'
local current = redis.call('GET', LOCK)
if current ~= A.token and by_keeper and released_by_owner(A.token) then
  -- The owner released first, and its keeper did not hear it before its pid ended.
  return {2, {}, false}
end
if not current then
  return {0, {}, next_here(current)}
end
if string.sub(current, 1, 1) == '#' then
  -- A lock with more than one holder: slots_release.lua answers for it.
  return {-2, {}, false}
end
-- The lock changes first, the records after, with pcall: a server out of memory (maxmemory,
-- noeviction) refuses HSET but not DEL, and a release must not fail for want of a date.
local log_max, keep = A.log_max, tonumber(A.meta_idle_ms) or 0
local mine = redis.call('HMGET', META, 'token', 'acquired_ms', 'fence', 'told', 'kept', 'ttl_ms',
  'draining')
-- Only an acquisition in the history has its end told (a quorum's attempt that did not win a
-- majority, given back, was never an acquisition).
local told = mine[4] == current
local dated = (current == A.token or A.force == 'force') and mine[1] == current
local function date_release()
  if dated then
    redis.pcall('HSET', META, 'released_ms', int(now_ms()))
  end
end
if current == A.token and not by_keeper and mine[1] == current and mine[5] == '1'
    and mine[7] == current then
  -- Its keeper is stopping the work: it releases once the work has ended.
  redis.pcall('HSET', META, 'release_asked', current)
  return {3, {}, false}
end
if current == A.token then
  local next = pass_on(A.claim_ms, A.quiet == 'quiet', A.to)
  date_release()
  if dated and told then
    local at = now_ms()
    local fields = {'fence', mine[3] or '', 'held_ms', math.max(at - (tonumber(mine[2]) or at), 0)}
    if tonumber(A.status) then
      fields[#fields + 1] = 'status'
      fields[#fields + 1] = tonumber(A.status)
    end
    event('released', current, fields, log_max, keep, at)
  end
  if dated and mine[5] == '1' and not by_keeper then
    -- Its keeper (`acquire --while-pid`) ends (see mark_released in common.lua).
    mark_released(current, mine[6])
  end
  return {1, {}, next}
end
local function as_seen(current)
  if A.if_held == 'fence' then
    return redis.call('HGET', META, 'token') == current
      -- As text: both are integers in decimal, and a number compares exactly only up to 2^53.
      and redis.call('HGET', META, 'fence') == A.if_value
  elseif A.if_held == 'token' then
    return string.sub(current, 1, string.len(A.if_value)) == A.if_value
  end
  return true
end
if A.force == 'force' and not as_seen(current) then
  return {-1, holder(current), false}
end
if A.force == 'force' then
  local record = holder(current)
  local next = pass_on(A.claim_ms, A.quiet == 'quiet', A.to)
  date_release()
  -- A reservation ('~' .. waiter) has no holder to tell, nor to record as evicted.
  if string.sub(current, 1, 1) ~= '~' then
    local by = who_is(A.forcer_user, A.forcer_host, A.forcer_pid)
    local at = now_ms()
    redis.pcall('HSET', META, 'forced_token', current, 'forced_by', by, 'forced_at', int(at))
    local was = {}
    for i = 1, #record, 2 do
      was[record[i]] = record[i + 1]
    end
    if told then
      event('forced', current, {'fence', was.fence or '', 'by', by, 'user', was.user or '',
        'host', was.host or '', 'pid', was.pid or ''}, log_max, keep, at)
    end
    -- Tell the holder now rather than at its next renewal (`exec` listens on this channel; see
    -- notify.rs). Fire-and-forget: a holder not listening at this instant learns it by renewing.
    -- pcall: an ACL user without the channel (Redis 7 gives new users none) still releases; its
    -- holder learns it by renewing.
    redis.pcall('PUBLISH', LOCK .. ':events', 'forced:' .. current .. ':' .. at .. ':' .. by)
  end
  return {1, record, next}
end
return {-1, holder(current), next_here(current)}
