-- Release the lock if, and only if, ARGV[1] holds it (compare-and-delete).
--
-- KEYS[1] lock key, KEYS[2] meta key; ARGV[1] token, ARGV[2] "force" to delete whoever holds it.
--
-- Returns {1, meta...} released (meta describes who held it), {0} already free (expired or never
-- taken), {-1, meta...} held by another token (nothing deleted).
--
-- GET and DEL must be one atomic step: with two round trips, the lock could expire between them
-- and a new holder's lock would be deleted (the seed's "classic wrong release").
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
if current == ARGV[1] or ARGV[2] == 'force' then
  redis.call('DEL', KEYS[1])
  return {1, holder(current)}
end
return {-1, holder(current)}
