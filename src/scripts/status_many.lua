-- status.lua for many locks in one call (read-only): KEYS holds four keys per lock, in the order
-- of common.lua (lock, meta, queue, leases), and the reply one status.lua reply per lock, in
-- that order. Each lock's reply is what status.lua returns for it alone; the call is one atomic
-- snapshot of all of them, and costs the script's set-up once instead of once per lock. Not on a
-- Redis Cluster, which refuses a call whose keys are in different slots.
local now = now_ms()
local out = {}
for i = 1, #KEYS, 4 do
  local lock = KEYS[i]
  out[#out + 1] = {redis.call('GET', lock), redis.call('PTTL', lock), now,
    redis.call('HGETALL', KEYS[i + 1]), redis.call('ZCARD', KEYS[i + 2])}
end
return out
