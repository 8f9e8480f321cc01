-- Reset the lock's TTL if, and only if, A.token holds it (compare-and-PEXPIRE).
--
-- A: token, ttl_ms, want_run_id ('1': return this server's run_id), meta_idle_ms (see
--      keep_meta: meta must outlive the lock's new expiry), draining ('1': the holder's keeper,
--      `acquire --while-pid`, stops its pid's work: META `draining` names the token, and the
--      owner's release waits for the keeper, see release.lua)
--
-- Returns {1, {}, run_id[, preempted]} extended (preempted: 'AT:BY' when a --preempt waiter
-- asked this holder to stop, see acquire.lua: the lock is still renewed, and released by its
-- holder), {0, {}, run_id} free (expired: it is never brought back), {-1, holder-record, run_id}
-- held by another token, {2, {}, run_id} released by its holder (a kept lock: see mark_released
-- in common.lua; free or another's now), {-2} a lock with more than one holder (see
-- slots_common.lua); run_id is false unless asked for. An expired
-- key is gone, so PEXPIRE is never reached for it: extend cannot resurrect a lock. The holder
-- record's expires_ms follows the renewal, so that `status` can tell when a lock that nobody
-- released expired. The lock's history (`:log`) and meta live on as long as the renewed lock plus
-- meta_idle_ms.
local A = {
  token = ARGV[1], ttl_ms = ARGV[2], want_run_id = ARGV[3], meta_idle_ms = ARGV[4],
  draining = ARGV[5],
}
local current = redis.call('GET', LOCK)
if current ~= A.token and released_by_owner(A.token) then
  return {2, {}, run_id(A.want_run_id)}
end
if not current then
  return {0, {}, run_id(A.want_run_id)}
end
if string.sub(current, 1, 1) == '#' then
  -- A lock with more than one holder: slots_extend.lua answers for it.
  return {-2, {}, false}
end
if current == A.token then
  redis.call('PEXPIRE', LOCK, A.ttl_ms)
  local m = redis.call('HMGET', META, 'token', 'preempted')
  local preempted
  if m[1] == current then
    redis.call('HSET', META, 'expires_ms', now_ms() + tonumber(A.ttl_ms))
    if A.draining == '1' then
      redis.call('HSET', META, 'draining', current)
    end
    local pre = m[2] or ''
    if string.sub(pre, 1, #current + 1) == current .. ':' then
      preempted = string.sub(pre, #current + 2)
    end
  end
  keep_meta(A.meta_idle_ms, tonumber(A.ttl_ms))
  -- The history expires with the record: a long hold keeps it too (a stream only: a key of
  -- another type planted there gets no expiry from us).
  local log = LOCK .. ':log'
  local idle = tonumber(A.meta_idle_ms) or 0
  local kind = redis.pcall('TYPE', log)
  if idle > 0 and type(kind) == 'table' and kind.ok == 'stream' then
    redis.call('PEXPIRE', log, int(tonumber(A.ttl_ms) + idle))
  end
  if preempted then
    return {1, {}, run_id(A.want_run_id), preempted}
  end
  return {1, {}, run_id(A.want_run_id)}
end
return {-1, holder(current), run_id(A.want_run_id)}
