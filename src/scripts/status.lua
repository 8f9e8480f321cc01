-- Read one lock's state in one consistent snapshot (read-only).
--
-- Returns {lock value or false, pttl, now_ms, holder-record, waiters}. The value is the holder's
-- token, or '~' .. waiter while the lock is being handed over.
local current = redis.call('GET', LOCK)
local record = {}
if current then
  record = holder(current)
end
return {current, redis.call('PTTL', LOCK), now_ms(), record, redis.call('ZCARD', QUEUE)}
