-- Tell what befell a holder while its command ran, as `exec` found out: `lost` (the lock was lost,
-- found while the command ran or at its release), `overran` (--warn-after: the command has held
-- the lock that long) or `timeout` (--max-runtime ran out: the command is being stopped).
--
-- A: token, fence, reason, log_max, meta_idle_ms, watch_all (see `listened` in common.lua),
--      kind ('lost' when absent: a client of an older version)
--
-- Nothing about the lock changes (after a loss it is someone else's or nobody's by now). This
-- only writes the event (see `event` in common.lua), so that the history and the watchers know
-- that a command may have run without its lock, or for too long. Returns 1.
local A = {
  token = ARGV[1], fence = ARGV[2], reason = ARGV[3], log_max = ARGV[4], meta_idle_ms = ARGV[5],
  watch_all = ARGV[6], kind = ARGV[7],
}
watch_all = A.watch_all or ''
local kind = A.kind
if kind ~= 'overran' and kind ~= 'timeout' then
  kind = 'lost'
end
local at = now_ms()
event(kind, A.token, {'fence', A.fence, 'reason', A.reason}, A.log_max, tonumber(A.meta_idle_ms) or 0, at)
return 1
