-- Read one lock's state in one consistent snapshot (read-only).
--
-- KEYS[1] lock key, KEYS[2] meta key.
--
-- Returns {token or false, pttl, now_ms, meta...}. The meta record describes the holder only when
-- its token equals the lock key's value; the caller checks that.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), now, redis.call('HGETALL', KEYS[2])}
