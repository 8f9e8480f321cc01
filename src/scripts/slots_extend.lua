-- Reset the TTL of one holder's place in a lock with more than one holder (see
-- slots_common.lua), if, and only if, ARGV[1] still holds it.
--
-- ARGV token, ttl_ms, want_run_id (unused: a quorum is refused), meta_idle_ms, log_max, watch_all
--      (see `event` and `listened` in common.lua), draining ('1': the place's keeper stops its
--      pid's work, see kept_place in common.lua)
--
-- Returns {1, {}, false} extended, {2, {}, false} released by its holder (the mark
-- mark_released in common.lua left, taken away with this answer: its keeper ends), {0, {},
-- false} when the token holds no place (it expired: a dead place is never brought back, and is
-- told as `expired` here if nobody noticed it before; or it was forced, or released long ago). The marker and LOCK:slots last as long as the latest place,
-- shorter too when this renewal shortened the latest (as a plain lock's key follows its
-- renewal); meta and the history outlive them by meta_idle_ms, as for a plain lock.
watch_all = ARGV[6] or ''
local current = redis.call('GET', LOCK)
if not current or string.sub(current, 1, 1) ~= '#' then
  -- The last place given back takes the marker with it.
  if released_by_owner(ARGV[1]) then
    return {2, {}, false}
  end
  return {0, {}, false}
end
local now = now_ms()
local ttl = tonumber(ARGV[2])
local idle = tonumber(ARGV[4]) or 0
local view = live_slots(now, {ARGV[5], ttl + idle})
local mine = view.holders[ARGV[1]]
if not mine then
  keep_marker(view, current, now)
  if released_by_owner(ARGV[1]) then
    return {2, {}, false}
  end
  return {0, {}, false}
end
mine.expires = now + ttl
redis.call('HSET', SLOTS, ARGV[1], int(mine.expires) .. string.match(mine.value, '^%d+(.*)$'))
kept_place(ARGV[1], ttl, true, ARGV[7] == '1')
keep_marker(view, current, now)
keep_meta(ARGV[4], view.latest - now)
local log = LOCK .. ':log'
local kind = redis.pcall('TYPE', log)
if idle > 0 and type(kind) == 'table' and kind.ok == 'stream' then
  redis.call('PEXPIRE', log, int(ttl + idle))
end
return {1, {}, false}
