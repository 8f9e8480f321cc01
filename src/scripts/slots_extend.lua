-- Reset the TTL of one holder's place in a lock with more than one holder (see
-- slots_common.lua), if, and only if, ARGV[1] still holds it.
--
-- ARGV token, ttl_ms, want_run_id (unused: a quorum is refused), meta_idle_ms
--
-- Returns {1, {}, false} extended, {0, {}, false} when the token holds no place (it expired: a
-- dead place is never brought back, or it was released or forced). The marker lasts at least as
-- long as the renewed place; meta and the history outlive it by meta_idle_ms, as for a plain lock.
local current = redis.call('GET', LOCK)
if not current or string.sub(current, 1, 1) ~= '#' then
  return {0, {}, false}
end
local value = redis.call('HGET', SLOTS, ARGV[1])
local now = now_ms()
local expires = value and tonumber(string.match(value, '^(%d+)'))
if not expires or expires <= now then
  if value then
    redis.call('HDEL', SLOTS, ARGV[1])
  end
  return {0, {}, false}
end
local ttl = tonumber(ARGV[2])
redis.call('HSET', SLOTS, ARGV[1], int(now + ttl) .. string.match(value, '^%d+(.*)$'))
local pttl = redis.call('PTTL', LOCK)
if pttl >= 0 and pttl < ttl then
  redis.call('PEXPIRE', LOCK, ttl)
  pttl = ttl
end
keep_meta(ARGV[4], pttl)
local log = LOCK .. ':log'
local idle = tonumber(ARGV[4]) or 0
local kind = redis.pcall('TYPE', log)
if idle > 0 and type(kind) == 'table' and kind.ok == 'stream' then
  redis.call('PEXPIRE', log, int(ttl + idle))
end
return {1, {}, false}
