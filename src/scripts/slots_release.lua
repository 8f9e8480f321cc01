-- Give back a place in a lock with more than one holder (see slots_common.lua), and pass the
-- freed place on to the waiter whose turn it is.
--
-- A as release.lua's (token, 'force', claim_ms, -, -, the forcer's host, pid and user, a
-- condition and its value, log_max, status, meta_idle_ms, watch_all, who).
--
-- Returns {1, {}, false, freed} released, {0, {}, false, {}} when the token holds no place here
-- (it expired, or was released), {-1, {}, false, {}} when a conditional force found no holder
-- with that fence or fingerprint, {2, {}, false, {}} to a keeper (who = 'keeper') whose owner
-- released the place already (its mark, taken away now), {3, {}, false, {}} to the owner of a
-- kept place whose keeper stops its pid's work (its marker says 'drain': the keeper releases
-- the place once the work has ended, as release.lua says of a plain lock). The keeper's own
-- release leaves no mark and takes the place's marker away (nobody is left to read either).
-- `freed`: token, record (as in LOCK:slots) for each holder that was let go (--force: all of
-- them; each is told on LOCK:events, as release.lua tells one).
--
-- Atomic together: the removal, the places given to the waiters at the head of the queue (one
-- wake-up per freed place: no herd; a shared lock's writer at the head gets the whole lock once
-- the last reader is gone, see admit), and the marker's expiry, which follows the latest holder.
local A = {
  token = ARGV[1], force = ARGV[2], claim_ms = ARGV[3], quiet = ARGV[4], to = ARGV[5],
  forcer_host = ARGV[6], forcer_pid = ARGV[7], forcer_user = ARGV[8], if_held = ARGV[9],
  if_value = ARGV[10], log_max = ARGV[11], status = ARGV[12], meta_idle_ms = ARGV[13],
  watch_all = ARGV[14], who = ARGV[15],
}
watch_all = A.watch_all or ''
local by_keeper = A.who == 'keeper'
local current = redis.call('GET', LOCK)
if not current or string.sub(current, 1, 1) ~= '#' then
  if by_keeper and released_by_owner(A.token) then
    return {2, {}, false, {}}
  end
  return {0, {}, false, {}}
end
local now = now_ms()
local log_max, keep = A.log_max, tonumber(A.meta_idle_ms) or 0
local view = live_slots(now, {log_max, keep})
local spec = redis.call('HGET', META, 'slots')
local shared = current == '#shared'
local freed = {}

local function let_go(token, why, by)
  local h = view.holders[token]
  redis.call('HDEL', SLOTS, token)
  view.holders[token] = nil
  view.count = view.count - 1
  freed[#freed + 1] = token
  freed[#freed + 1] = h.value
  local fields = {'fence', h.fence or '', 'slot', h.slot or '',
    'held_ms', math.max(now - (h.acquired or now), 0)}
  if why == 'forced' then
    local _, _, _, _, _, pid, user, host = string.match(h.value,
      '^(%d*)\t(%d*)\t(%d*)\t(%d*)\t(%d*)\t([^\t]*)\t([^\t]*)\t([^\t]*)')
    fields = {'fence', h.fence or '', 'slot', h.slot or '', 'by', by, 'user', user or '',
      'host', host or '', 'pid', pid or ''}
    redis.pcall('HSET', META, 'forced_token', token, 'forced_by', by, 'forced_at', int(now))
    redis.pcall('PUBLISH', LOCK .. ':events', 'forced:' .. token .. ':' .. now .. ':' .. by)
    if place_is_kept(token) then
      redis.call('DEL', gone_key(token))
    end
  else
    if tonumber(A.status) then
      fields[#fields + 1] = 'status'
      fields[#fields + 1] = tonumber(A.status)
    end
    -- A kept place's release is marked (see mark_released in common.lua), so that a keeper
    -- that missed the announcement does not take its place gone for a loss. Any other is only
    -- announced (nobody listens for it but a keeper of an older version).
    if place_is_kept(token) and by_keeper then
      redis.call('DEL', gone_key(token))
    elseif place_is_kept(token) then
      mark_released(token, string.match(h.value, '^%d*\t%d*\t%d*\t%d*\t(%d*)'))
    else
      redis.pcall('PUBLISH', LOCK .. ':events', 'released:' .. token)
    end
  end
  event(why, token, fields, log_max, keep, now)
end

if A.force == 'force' then
  local by = who_is(A.forcer_user, A.forcer_host, A.forcer_pid)
  local chosen = {}
  for token, h in pairs(view.holders) do
    local fits = true
    if A.if_held == 'fence' then
      fits = h.fence == A.if_value
    elseif A.if_held == 'token' then
      fits = string.sub(token, 1, string.len(A.if_value)) == A.if_value
    end
    if fits then
      chosen[#chosen + 1] = token
    end
  end
  if #chosen == 0 and A.if_held ~= '' then
    return {-1, {}, false, {}}
  end
  table.sort(chosen, function(a, b)
    return (view.holders[a].slot or 0) < (view.holders[b].slot or 0)
  end)
  for _, token in ipairs(chosen) do
    let_go(token, 'forced', by)
  end
elseif view.holders[A.token] and not by_keeper
    and redis.call('GET', gone_key(A.token)) == 'drain' then
  keep_marker(view, current, now)
  return {3, {}, false, {}}
elseif view.holders[A.token] then
  let_go(A.token, 'released')
else
  keep_marker(view, current, now)
  if by_keeper and released_by_owner(A.token) then
    return {2, {}, false, {}}
  end
  return {0, {}, false, {}}
end
admit(view, shared and math.huge or limit_of(spec), shared, A.claim_ms, now)
keep_marker(view, current, now)
return {1, {}, false, freed}
