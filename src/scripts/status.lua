-- Read one lock's state in one consistent snapshot (read-only).
--
-- Returns {lock value or false, pttl, now_ms, meta, waiters}. The value is the holder's token, or
-- '~' .. waiter while the lock is being handed over. `meta` is the whole meta hash: the fence
-- counter, and the record of the current or (when the lock is free) the last holder; the caller
-- tells which by comparing its token with the lock's value.
local current = redis.call('GET', LOCK)
return {current, redis.call('PTTL', LOCK), now_ms(), redis.call('HGETALL', META),
  redis.call('ZCARD', QUEUE)}
