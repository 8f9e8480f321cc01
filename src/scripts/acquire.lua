-- Take the lock, atomically with its fencing token and owner record.
--
-- KEYS[1] lock key (string: the holder's token, with a PX expiry)
-- KEYS[2] meta key (hash, never expires: the fence counter and the last holder's record)
-- ARGV    token, ttl_ms, host, pid, user, note
--
-- Returns {1, fence, acquired_ms} when taken, {0, pttl, meta...} when busy.
--
-- Why one script: SET NX PX alone is atomic, but the fence must be incremented if and only if the
-- lock was taken, and the owner record must describe the holder that the lock key names. Doing the
-- three in one script means no reader ever sees a lock without its record or a fence that was
-- burned by a failed attempt. The time is the Redis server's (TIME), never a client's clock.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = redis.call('HINCRBY', KEYS[2], 'fence', 1)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('HSET', KEYS[2], 'token', ARGV[1], 'host', ARGV[3], 'pid', ARGV[4],
    'user', ARGV[5], 'note', ARGV[6], 'acquired_ms', now, 'ttl_ms', ARGV[2])
  return {1, fence, now}
end
-- The meta record describes the current holder only if its token is the lock key's value (a key
-- set by hand has no record of its own).
local function holder(current)
  local meta = redis.call('HGETALL', KEYS[2])
  for i = 1, #meta, 2 do
    if meta[i] == 'token' and meta[i + 1] ~= current then
      return {}
    end
  end
  return meta
end

return {0, redis.call('PTTL', KEYS[1]), holder(redis.call('GET', KEYS[1]))}
