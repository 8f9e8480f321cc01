-- Give up on taking the lock (the wait ran out, a signal arrived, or an error): nothing of ours
-- stays behind.
--
-- ARGV token, claim_ms, 'quiet' (a quorum's queue node: do not wake the next waiter yet), waiter
--      (a quorum's other nodes: reserve what we give back for this waiter, chosen by the queue
--      node; see release.lua)
--
-- Returns the waiter the lock was passed on to, or false.
-- If the lock was just reserved for us, we will not claim it: pass it on to the next waiter at
-- once instead of making the queue wait for the reservation to expire. If it is held with our
-- token, an attempt whose reply we never read (a timeout, a dropped connection) took it: nobody
-- knows that token, so give the lock back rather than leave it held for its whole TTL, and
-- forget the holder record (the fence counter stays: it never goes back).
redis.call('ZREM', QUEUE, ARGV[1])
redis.call('HDEL', LEASES, ARGV[1])
redis.call('DEL', wake_key(ARGV[1]))
local current = redis.call('GET', LOCK)
local next = false
if current == '~' .. ARGV[1] or current == ARGV[1] then
  next = pass_on(ARGV[2], ARGV[3] == 'quiet', ARGV[4])
end
if redis.call('HGET', META, 'token') == ARGV[1] then
  redis.call('HDEL', META, 'token', 'host', 'pid', 'user', 'note', 'acquired_ms', 'ttl_ms',
    'expires_ms', 'released_ms')
end
return next
