-- Read one lock's state in one consistent snapshot (read-only).
--
-- Returns {lock value or false, pttl, now_ms, meta, waiters, queue}. The value is the holder's
-- token, or '~' .. waiter while the lock is being handed over. `meta` is the whole meta hash: the
-- fence counter, and the record of the current or (when the lock is free) the last holder; the
-- caller tells which by comparing its token with the lock's value. `waiters` counts the queue;
-- `queue` is its first MAX_LISTED entries in arrival order, flat: token, lease (false if none),
-- record (false if none; see `:wr` in common.lua) for each. The caller drops those whose lease has
-- run out (dead waiters not pruned yet).
local MAX_LISTED = 100
local current = redis.call('GET', LOCK)
local tokens = redis.call('ZRANGE', QUEUE, 0, MAX_LISTED - 1)
local queue = {}
if #tokens > 0 then
  local leases = redis.call('HMGET', LEASES, unpack(tokens))
  local records = redis.pcall('HMGET', WAITERS, unpack(tokens))
  if records.err then
    records = {}
  end
  for i, token in ipairs(tokens) do
    queue[#queue + 1] = token
    queue[#queue + 1] = leases[i]
    queue[#queue + 1] = records[i] or false
  end
end
return {current, redis.call('PTTL', LOCK), now_ms(), redis.call('HGETALL', META),
  redis.call('ZCARD', QUEUE), queue}
