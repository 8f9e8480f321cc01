-- Tell that a holder lost its lock (`exec` found out while its command ran or at its release).
--
-- ARGV token, fence, reason, log_max, meta_idle_ms, watch_all (see `listened` in common.lua)
--
-- Nothing about the lock changes: the lock is someone else's or nobody's by now. This only
-- writes the `lost` event (see `event` in common.lua), so that the history and the watchers know
-- that a command may have run without its lock. Returns 1.
watch_all = ARGV[6] or ''
local at = now_ms()
event('lost', ARGV[1], {'fence', ARGV[2], 'reason', ARGV[3]}, ARGV[4], tonumber(ARGV[5]) or 0, at)
return 1
