-- Reset the TTL of one holder's place in a lock with more than one holder (see
-- slots_common.lua), if, and only if, A.token still holds it.
--
-- A: token, ttl_ms, want_run_id (unused: a quorum is refused), meta_idle_ms, log_max, watch_all
--      (see `event` and `listened` in common.lua), draining ('1': the place's keeper stops its
--      pid's work, see kept_place in common.lua)
--
-- Returns {1, {}, false} extended, {2, {}, false} released by its holder (the mark
-- mark_released in common.lua left, taken away with this answer: its keeper ends), {0, {},
-- false} when the token holds no place (it expired: a dead place is never brought back, and is
-- told as `expired` here if nobody noticed it before; or it was forced, or released long ago). The marker and LOCK:slots last as long as the latest place,
-- shorter too when this renewal shortened the latest (as a plain lock's key follows its
-- renewal); meta and the history outlive them by meta_idle_ms, as for a plain lock.
local A = {
  token = ARGV[1], ttl_ms = ARGV[2], want_run_id = ARGV[3], meta_idle_ms = ARGV[4],
  log_max = ARGV[5], watch_all = ARGV[6], draining = ARGV[7],
}
watch_all = A.watch_all or ''
local current = redis.call('GET', LOCK)
if not current or string.sub(current, 1, 1) ~= '#' then
  -- The last place given back takes the marker with it.
  if released_by_owner(A.token) then
    return {2, {}, false}
  end
  return {0, {}, false}
end
local now = now_ms()
local ttl = tonumber(A.ttl_ms)
local idle = tonumber(A.meta_idle_ms) or 0
local view = live_slots(now, {A.log_max, ttl + idle})
local mine = view.holders[A.token]
if not mine then
  keep_marker(view, current, now)
  if released_by_owner(A.token) then
    return {2, {}, false}
  end
  return {0, {}, false}
end
mine.expires = now + ttl
redis.call('HSET', SLOTS, A.token, int(mine.expires) .. string.match(mine.value, '^%d+(.*)$'))
kept_place(A.token, ttl, true, A.draining == '1')
keep_marker(view, current, now)
keep_meta(A.meta_idle_ms, view.latest - now)
local log = LOCK .. ':log'
local kind = redis.pcall('TYPE', log)
if idle > 0 and type(kind) == 'table' and kind.ok == 'stream' then
  redis.call('PEXPIRE', log, int(ttl + idle))
end
return {1, {}, false}
