-- Raise the fence counter to a quorum's fence: counter = max(counter, ARGV[2]).
--
-- ARGV token, fence, meta_idle_ms (see keep_meta)
--
-- A quorum holder's fence is the highest of its nodes' candidates (each max(counter + 1, the
-- node's clock in microseconds), see acquire.lua); writing it back to them makes every later
-- holder, whose majority shares a node with ours, count from above it. Returns 1 if the lock
-- still holds our token here, 0 if not (the counter is raised either way: that is safe).
local fence = tonumber(ARGV[2])
if (tonumber(redis.call('HGET', META, 'fence')) or 0) < fence then
  redis.call('HSET', META, 'fence', ARGV[2])
  keep_meta(ARGV[3])
end
if redis.call('GET', LOCK) == ARGV[1] then
  return 1
end
return 0
