-- Leave the queue (the wait ran out, a signal arrived, or an error): nothing of ours stays behind.
--
-- ARGV token, claim_ms
--
-- If the lock was just reserved for us, we will not claim it: pass it on to the next waiter at
-- once instead of making the queue wait for the reservation to expire.
redis.call('ZREM', QUEUE, ARGV[1])
redis.call('HDEL', LEASES, ARGV[1])
redis.call('DEL', wake_key(ARGV[1]))
if redis.call('GET', LOCK) == '~' .. ARGV[1] then
  pass_on(ARGV[2])
end
return 1
