-- Reset the lock's TTL if, and only if, ARGV[1] holds it (compare-and-PEXPIRE).
--
-- KEYS[1] lock key, KEYS[2] meta key; ARGV[1] token, ARGV[2] ttl_ms.
--
-- Returns {1} extended, {0} free (expired: it is never brought back), {-1, meta...} held by another
-- token. An expired key is gone, so PEXPIRE is never reached for it: extend cannot resurrect a lock.
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

local current = redis.call('GET', KEYS[1])
if not current then
  return {0}
end
if current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1}
end
return {-1, holder(current)}
