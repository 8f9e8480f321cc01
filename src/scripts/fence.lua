-- A quorum's acquisition, once it holds the lock: raise the fence counter to the quorum's fence
-- (counter = max(counter, A.fence)), and tell the acquisition here (see `event` in common.lua).
--
-- A: token, fence, meta_idle_ms (see keep_meta), user, host, pid, note, waited_ms, ttl_ms,
--      log_max, watch_all (see `listened` in common.lua)
--
-- A quorum holder's fence is the highest of its nodes' candidates (each max(counter + 1, the
-- node's clock in microseconds), see acquire.lua); writing it back to them makes every later
-- holder, whose majority shares a node with ours, count from above it. Returns 1 if the lock
-- still holds our token here, 0 if not (the counter is raised either way: that is safe).
--
-- acquire.lua tells and counts nothing for a quorum's attempt, which may not win a majority (a
-- waiter's attempts would each be an `acquired`): this script, sent to the nodes that granted
-- the attempt once it won, tells `acquired` with the holder's fence and counts it in meta
-- (`acquisitions`, `waited_ms`), where the lock still holds our token.
local A = {
  token = ARGV[1], fence = ARGV[2], meta_idle_ms = ARGV[3], user = ARGV[4], host = ARGV[5],
  pid = ARGV[6], note = ARGV[7], waited_ms = ARGV[8], ttl_ms = ARGV[9], log_max = ARGV[10],
  watch_all = ARGV[11],
}
watch_all = A.watch_all or ''
local fence = tonumber(A.fence)
if (tonumber(redis.call('HGET', META, 'fence')) or 0) < fence then
  redis.call('HSET', META, 'fence', A.fence)
  keep_meta(A.meta_idle_ms)
end
if redis.call('GET', LOCK) ~= A.token then
  return 0
end
local waited = math.max(tonumber(A.waited_ms) or 0, 0)
-- pcall: telling must not fail the write-back (a server out of memory refuses HSET; the fence
-- counter above was raised, or did not need to be).
redis.pcall('HSET', META, 'told', A.token)
redis.pcall('HINCRBY', META, 'acquisitions', 1)
redis.pcall('HINCRBY', META, 'waited_ms', int(waited))
event('acquired', A.token, {'fence', A.fence, 'user', A.user or '', 'host', A.host or '',
  'pid', A.pid or '', 'note', A.note or '', 'waited_ms', waited,
  'ttl_ms', tonumber(A.ttl_ms) or 0}, A.log_max, (tonumber(A.ttl_ms) or 0) + (tonumber(A.meta_idle_ms) or 0),
  now_ms())
return 1
