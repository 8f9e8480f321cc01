-- Shared by every script: build.rs puts before each script the definitions of this file that it
-- uses, directly or through another one, in this file's order (see scripts.rs).
--
-- The layout build.rs relies on to pick them (slots_common.lua and guard.lua, which it picks from
-- too, keep it as well); a file that breaks it fails the build, saying where:
-- - Every top-level statement is a definition, and starts at column 0 with `local function NAME(`
--   or `local NAME[, NAME...] [= VALUE]`. A function's only column-0 line after that is its
--   closing `end`; a value's other lines are indented, or column-0 closing brackets.
-- - A definition is that statement with the comment lines right above it (no blank line between)
--   and whatever follows it up to the next definition's. It is kept where a name it declares is
--   used: a name token (not in a comment or a string) of the script, or of a definition kept.
-- - A value calls nothing (it would run whether a script uses it or not): constants, KEYS, other
--   values. A name is defined once among the files of one script.
-- This opening paragraph is sent with no script. A definition left out fails only on the path
-- that uses it, at run time: scripts.rs's tests compile every script with luac5.1 and fail on a
-- global that Redis does not provide.

-- KEYS[1] lock   string: the holder's token with a PX expiry, or '~' .. waiter while the lock is
--                reserved for the waiter at the head of the queue (a hand-over in progress)
-- KEYS[2] meta   hash: fence counter, ticket counter, the last holder's record; it expires after
--                an idle time (see keep_meta), never while the lock is held or has waiters
-- KEYS[3] queue  zset: waiter token -> ticket (arrival order)
-- KEYS[4] leases hash: waiter token -> server time (ms) after which the waiter counts as dead;
--                and token .. ':who' -> who waits, for `status`: 'SINCE\tDEADLINE\tPID\tUSER\t
--                HOST\tNOTE' (server ms; DEADLINE '' when the waiter waits forever; the note
--                last, so that nothing in it can shift the other fields). A record is written by
--                the attempt that queues the waiter, with its first lease, and deleted with it
--                (drop_waiter). (A token never contains ':', so no record is taken for a lease.)
--                And token .. ':f' -> what the waiter asked for, one letter each: 's' a shared
--                hold (slots.lua), 'u' --supersede (see supersede_earlier); absent: neither.
--                And token .. ':g' -> how the waiter would hold the lock, for a release that
--                grants it (see grant_to): 'TTL_MS\tPIDNS\tPREEMPTIBLE\tKEPT'; written only for a
--                waiter that can take a grant (one server, a plain lock: A.grant), so a waiter
--                without it (a quorum's, an older client's, a shared lock's reader) is reserved
--                the lock ('~' .. waiter) and claims it with an attempt of its own, as before.
-- Wake lists KEYS[1] .. ':w:' .. token are derived from KEYS[1]: same hash tag, same slot. So is
-- the pub/sub channel KEYS[1] .. ':events', where a lock taken away from its holder is announced,
-- and the tombstones KEYS[1] .. ':gone:' .. token (a string with a PX expiry) of tokens given up
-- while an attempt of theirs may still be on its way (see leave.lua). So are the channel
-- KEYS[1] .. ':watch' and the stream KEYS[1] .. ':log', where every change is told (see `event`).
local LOCK, META, QUEUE, LEASES = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

-- ARGV by name: each script declares its arguments once, at its top, in ARGV order, as the
-- table `A` (`local A = {token = ARGV[1], ttl_ms = ARGV[2], ...}`: build.rs reads it, and
-- scripts.rs checks every call against it) and reads them by name from then on. One not sent is
-- nil. A table constructor rather than a loop over a list of names: it is built on every call,
-- and costs a third as much.

-- 'user@host (pid N)', as records, replies and events name someone.
local function who_is(user, host, pid)
  return (user or '?') .. '@' .. (host or '?') .. ' (pid ' .. (pid or '?') .. ')'
end

-- The field of LEASES that holds the record of who waits with `token`.
local function who_field(token)
  return token .. ':who'
end

-- This server's clock in microseconds (16 digits: exact in a Lua number, which is a double, up
-- to 2^53, that is until the year 2255). Read once per script (one TIME, not one per use): a
-- script is one atomic step, and every date it writes is the instant of that step.
local clock_us
local function now_us()
  if not clock_us then
    local t = redis.call('TIME')
    clock_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return clock_us
end

local function now_ms()
  return math.floor(now_us() / 1000)
end

-- An acquisition's fence (see acquire.lua) from META `fence` as read: max(counter + 1, clock in
-- µs), and whether the caller writes it back (past 2^53, set by hand, HINCRBY counts on).
local function next_fence(last)
  last = tonumber(last) or 0
  if last >= 2^53 - 1 then
    return redis.call('HINCRBY', META, 'fence', 1), false
  end
  -- The counter is ahead when the clock stepped back, or a quorum wrote back a fence from a node
  -- whose clock is ahead.
  return math.max(last + 1, now_us()), true
end

-- An integer as Redis should store it: tostring() would write 1.7961336804629e+15. '%d' (a C
-- long: 64 bits here) rather than '%.0f': the server formats an integer in a fraction of the time
-- it takes for a float, and so it does for every number handed to redis.call, which it writes
-- with '%.17g'; the scripts hand it strings made here instead. Every value is below 2^53.
local function int(n)
  return string.format('%d', n)
end

-- Keep the meta hash for `idle_ms` after this use, counted from when the lock key and the queue
-- expire (as they stand now), so that meta outlives both: a lock that is held, reserved or waited
-- for never loses its record, its fence counter or its ticket counter. A lock key without expiry
-- (set by hand) keeps meta without expiry too. Every script that writes meta and can make the
-- lock or the queue last longer calls this last. `lock_pttl`, `queue_pttl`: the lock key's and
-- the queue's PTTL when the caller knows them (it just set or read them: saves a PTTL each).
local function keep_meta(idle_ms, lock_pttl, queue_pttl)
  local idle = tonumber(idle_ms)
  if not idle or idle < 1 then
    return
  end
  local last = 0
  for _, pttl in ipairs({lock_pttl or redis.call('PTTL', LOCK),
      queue_pttl or redis.call('PTTL', QUEUE)}) do
    if pttl == -1 then
      redis.call('PERSIST', META)
      return
    end
    if pttl > last then
      last = pttl
    end
  end
  redis.call('PEXPIRE', META, int(last + idle))
end

local function wake_key(token)
  return LOCK .. ':w:' .. token
end

local function gone_key(token)
  return LOCK .. ':gone:' .. token
end

-- A holder kept alive by a keeper (`acquire --while-pid`) that releases (a plain lock's META
-- `kept` says so; a place's record does not: see kept_place): its keeper hears it at
-- once on LOCK:events ('released:TOKEN'), and, should it miss that, its next renewal finds the
-- mark LOCK:gone:TOKEN = 'rel' (see extend.lua, slots_extend.lua): positive evidence that the
-- owner released, where a lock key gone for another reason (a restart, a flush, an eviction) is
-- a loss. (An attempt never reads it: a released token never attempts.) The keeper takes it away
-- when it reads it; otherwise it lasts `ttl_ms` (the holder's TTL) and MARK_SLACK_MS more, no
-- longer than a renewal that could still read it: the keeper's last renewal before the release
-- was sent before it, and the keeper renews (retrying failures every TTL/9) only until that
-- renewal's TTL has run out, when it takes the lock for lost anyway; MARK_SLACK_MS covers a
-- renewal sent just before that deadline and still on its way (up to the default --io-timeout,
-- 2 s). The keeper's own release (release.lua's who = 'keeper') leaves none: nobody is left to
-- read it; and it takes away a mark of the owner's release it had not heard of.
local MARK_SLACK_MS = 2000
local function mark_released(token, ttl_ms)
  redis.pcall('SET', gone_key(token), 'rel', 'PX', int((tonumber(ttl_ms) or 0) + MARK_SLACK_MS))
  redis.pcall('PUBLISH', LOCK .. ':events', 'released:' .. token)
end

-- A place kept alive by a keeper: its record (LOCK:slots, whose layout older versions read too)
-- has no room to say so, so its grant leaves LOCK:gone:TOKEN = 'kept' (no other mark can exist
-- for a token that holds), lasting as long as the place and MARK_SLACK_MS more, and each renewal
-- of the place makes it last as long again (`renewed`: a PEXPIRE that does nothing when there is
-- no such key). Its release turns it into the mark of mark_released; a forced release drops it.
-- A renewal by a keeper that stops its pid's work (`draining`) makes it 'drain': the owner's
-- release of the place then waits for the keeper (see slots_release.lua).
local function kept_place(token, ttl_ms, renewed, draining)
  local ms = int((tonumber(ttl_ms) or 0) + MARK_SLACK_MS)
  local was = draining and redis.call('GET', gone_key(token))
  if was == 'kept' or was == 'drain' then
    redis.call('SET', gone_key(token), 'drain', 'PX', ms)
  elseif renewed then
    redis.call('PEXPIRE', gone_key(token), ms)
  else
    redis.call('SET', gone_key(token), 'kept', 'PX', ms)
  end
end

-- Whether the place of `token` is kept alive by a keeper (see kept_place).
local function place_is_kept(token)
  local marker = redis.call('GET', gone_key(token))
  return marker == 'kept' or marker == 'drain'
end

-- Whether the holder with `token` released the lock itself (see mark_released); the mark is
-- taken away with the answer (its keeper asks once, then ends).
local function released_by_owner(token)
  if redis.call('GET', gone_key(token)) == 'rel' then
    redis.call('DEL', gone_key(token))
    return true
  end
  return false
end

-- Take `token` out of the queue: its ticket, its lease and its records go together (true if it
-- was queued).
local function drop_waiter(token)
  local queued = redis.call('ZREM', QUEUE, token)
  redis.call('HDEL', LEASES, token, who_field(token), token .. ':f', token .. ':g')
  return queued == 1
end

-- What an attempt with `token` must do about a tombstone (see leave.lua) or a supersession (see
-- supersede_earlier), if its token has one: the reply that ends the attempt, or nil. Given up:
-- busy, not queued, nothing done. Superseded: {-3, AT_MS, BY}, and the mark is gone with it
-- (its waiter reads it once, with this attempt, then stops).
local function given_up(token)
  local gone = redis.call('GET', gone_key(token))
  -- 'kept', 'drain' (see kept_place): a place this token holds; its attempt re-sent finds it
  -- taken.
  if not gone or gone == 'kept' or gone == 'drain' then
    return nil
  end
  local at, by = string.match(gone, '^sup:(%d+):(.*)$')
  if at then
    redis.call('DEL', gone_key(token))
    return {-3, tonumber(at), by}
  end
  return {0, redis.call('PTTL', LOCK), 0, 0}
end

-- The meta record describes the current holder only if its token is the lock key's value (a key
-- set by hand, or a reservation, has no record of its own).
local function holder(current)
  local meta = redis.call('HGETALL', META)
  for i = 1, #meta, 2 do
    if meta[i] == 'token' and meta[i + 1] ~= current then
      return {}
    end
  end
  return meta
end

-- The first waiter in arrival order whose lease has not run out; dead ones are dropped on the way.
-- The loop is bounded so that a script never runs long, whatever the queue holds. With it, what
-- a grant needs (read in the same command as the lease): how it would hold the lock (its ':g'
-- field, nil for a waiter that cannot take a grant) and who it is (its record).
local function first_live_waiter()
  local now
  for _ = 1, 64 do
    local first = redis.call('ZRANGE', QUEUE, 0, 0)[1]
    if not first then
      return nil
    end
    now = now or now_ms()
    local found = redis.call('HMGET', LEASES, first, first .. ':g', who_field(first))
    local lease = tonumber(found[1])
    if lease and lease >= now then
      return first, found[2] or nil, found[3] or nil
    end
    drop_waiter(first)
  end
  return nil
end

-- Reserve the lock for `waiter`; false if the server refused the write (out of memory).
local function reserve(waiter, claim_ms)
  local set = redis.pcall('SET', LOCK, '~' .. waiter, 'PX', claim_ms)
  return not (type(set) == 'table' and set.err)
end

-- Reserve the free lock for `waiter` for `claim_ms` and wake it (unless `quiet`: a quorum wakes
-- it only after every node has the reservation). Until it claims (or the reservation expires),
-- the key exists, so no newcomer can barge in ahead of the queue. The waiter leaves the queue now:
-- if it does not claim in time, it was dead or too slow, and the next waiter gets its turn when
-- the reservation expires. Returns false, and changes nothing, if the reservation was refused.
local function hand_over(waiter, claim_ms, quiet)
  -- pcall: a server out of memory (maxmemory, noeviction) refuses the SET. The caller then frees
  -- the lock instead: a release must not fail, and the waiter, still queued, looks again.
  if not reserve(waiter, claim_ms) then
    return false
  end
  drop_waiter(waiter)
  if not quiet then
    redis.pcall('LPUSH', wake_key(waiter), '1')
    redis.call('PEXPIRE', wake_key(waiter), claim_ms)
  end
  return true
end

-- The value of INFO field `name` in `info`, or nil: a plain find for the line, then a match
-- anchored at its value. A pattern search for 'name:...' tries the pattern at every byte of the
-- reply (INFO memory is over a kilobyte): that scan was most of what this check cost the server.
local function info_field(info, name, value)
  local at = string.find(info, '\n' .. name .. ':', 1, true)
  if not at then
    return nil
  end
  return string.match(info, '^' .. value, at + #name + 2)
end

-- This server's run_id, when `flag` (the argument want_run_id) asks for it: a quorum notices a node that restarted.
local function run_id(flag)
  if flag ~= '1' then
    return false
  end
  -- pcall: a user that may not run INFO (an ACL, a renamed command) gets no restart check.
  local info = redis.pcall('INFO', 'server')
  if type(info) ~= 'string' then
    return false
  end
  return info_field(info, 'run_id', '(%x+)') or false
end


-- Whether a change is worth publishing on LOCK:watch: someone here subscribes to that channel,
-- or watches every lock (`status --watch` with no KEY subscribes to the channel `watch_all`,
-- PREFIX{*}:watching, besides its pattern, so that one PUBSUB NUMSUB counts both). Encoding an
-- event costs the server more than the rest of the telling, and most of the time nobody
-- watches. Asked once per script. `watch_all`: set by each script from its argument of that name; '' in a
-- Redis Cluster, which passes every PUBLISH on to all nodes, so a watcher on another node is not
-- counted here: publish always. A server that refuses PUBSUB (an ACL) publishes always.
local watch_all = ''
local listening
local function listened()
  if listening == nil then
    if watch_all == '' then
      listening = true
    else
      local subs = redis.pcall('PUBSUB', 'NUMSUB', LOCK .. ':watch', watch_all)
      listening = type(subs) ~= 'table' or (tonumber(subs[2]) or 0) + (tonumber(subs[4]) or 0) > 0
    end
  end
  return listening
end

-- Tell what just changed, in the step that changed it: published as one JSON object on the
-- channel LOCK:watch (for `status --watch`) when someone may listen (see `listened`), and,
-- for every kind but `queued` and `left` (told only to watchers), appended to the capped stream
-- LOCK:log (for `redlock log`) with the same fields. `token`: the token concerned (only its
-- fingerprint is told: a token can release the lock); `fields`: name, value, name, value...
-- (strings or integers); `log_max`: how many entries the stream keeps (0 or not a number: no
-- history); `keep_ms`: how long the stream outlives this write (the history of a lock nobody
-- uses expires, as meta does; 0: the caller sets it, see expire_log); `at`: now (ms). Returns
-- whether the stream took the entry.
-- Every call is a pcall: telling must never stop the change it tells of (a server out of
-- memory refuses XADD; an ACL user may lack the channel; anyone may write a key of another type
-- under the stream's name).
local APPROX_FROM = 100
local function event(kind, token, fields, log_max, keep_ms, at)
  local max = tonumber(log_max) or 0
  -- Every kind but `queued` and `left` (only told to watchers) is kept in the history.
  local keep = max > 0 and kind ~= 'queued' and kind ~= 'left'
  local tell = listened()
  if not keep and not tell then
    return
  end
  local fp = string.sub(token or '', 1, 8)
  if tell then
    local told = {event = kind, token = fp, at_ms = at}
    for i = 1, #fields, 2 do
      told[fields[i]] = fields[i + 1]
    end
    redis.pcall('PUBLISH', LOCK .. ':watch', cjson.encode(told))
  end
  if keep then
    -- Numbers go to Redis as integers written out: Lua would write 1.7961336804629e+15.
    -- `at_ms`: the entry's date, from TIME; the stream ID is only its place (history.rs: an ID
    -- planted in the future makes every later ID follow it).
    local entry = {'event', kind, 'token', fp, 'at_ms', int(now_ms())}
    for i = 1, #fields, 2 do
      local v = fields[i + 1]
      entry[#entry + 1] = fields[i]
      entry[#entry + 1] = type(v) == 'number' and int(v) or v
    end
    local log = LOCK .. ':log'
    -- Trimmed to `max` entries exactly below APPROX_FROM; from there, by whole stream nodes
    -- (MAXLEN ~: at least `max` entries, at most one node more, `stream-node-max-entries`, 100
    -- by default). An exact trim of a full stream walks the entries of its oldest node, deleted
    -- ones included, on every write: it cost the server more than the rest of an acquisition.
    -- Exactly, too, on the writes of one millisecond in a hundred: a server whose stream nodes
    -- have no size limit (`stream-node-max-entries 0` and `stream-node-max-bytes 0`) never trims
    -- by nodes, and the history must stay bounded there as well.
    local added
    if max >= APPROX_FROM and (tonumber(at) or 0) % 100 ~= 0 then
      added = redis.pcall('XADD', log, 'MAXLEN', '~', int(max), '*', unpack(entry))
    else
      added = redis.pcall('XADD', log, 'MAXLEN', int(max), '*', unpack(entry))
    end
    -- An ID planted at the end of the ID space (18446744073709551615-18446744073709551615) would
    -- make every XADD after it fail: the planted stream goes, the event is kept.
    if type(added) == 'table' and type(added.err) == 'string'
        and string.find(added.err, 'exhausted', 1, true) then
      redis.pcall('DEL', log)
      added = redis.pcall('XADD', log, 'MAXLEN', int(max), '*', unpack(entry))
    end
    -- Not on a key of another type planted there: its owner did not ask for an expiry. Never 0,
    -- which would delete the whole history (every caller passes a hold's span or more).
    if type(added) == 'string' and (tonumber(keep_ms) or 0) >= 1 then
      redis.pcall('PEXPIRE', log, int(keep_ms))
    end
    return type(added) == 'string'
  end
  return false
end

-- The history outlives this step by `keep_ms`: for an event told with keep_ms 0 (its caller
-- knew a later one in the same step might set a longer expiry), once it knows none did. Only on
-- a stream the event was written to (`logged`): never on a key of another type planted there.
local function expire_log(logged, keep_ms)
  if logged and (tonumber(keep_ms) or 0) >= 1 then
    redis.pcall('PEXPIRE', LOCK .. ':log', int(keep_ms))
  end
end

-- Asks `holder` to stop for `by` ('user@host (pid N)'), at `now` (ms): recorded in META
-- `preempted`, announced on LOCK:events and told as `preempted` (the history kept `keep` ms).
local function ask_to_stop(holder, by, keep, now, log_max)
  local at = int(now)
  redis.call('HSET', META, 'preempted', holder .. ':' .. at .. ':' .. by)
  redis.pcall('PUBLISH', LOCK .. ':events', 'preempted:' .. holder .. ':' .. at .. ':' .. by)
  event('preempted', holder, {'by', by}, log_max, keep, now)
end

-- The fields of a waiter's record (see KEYS[4]) or grant field, split at tabs: `n` of them, the
-- last one taking the rest of the line (a note is last, and nothing in it can shift the others).
local function tab_fields(line, n)
  local f, from = {}, 1
  for i = 1, n - 1 do
    local tab = string.find(line, '\t', from, true)
    if not tab then
      f[i] = string.sub(line, from)
      return f
    end
    f[i] = string.sub(line, from, tab - 1)
    from = tab + 1
  end
  f[n] = string.sub(line, from)
  return f
end

-- A --preemptible holder that takes the lock while a --preempt waiter is at the head of the
-- queue (it queued while the lock was being handed to this one) is asked to stop at once, as if
-- that waiter had asked it (see acquire.lua): its ticket is below 0, ahead of every plain one.
local function ask_if_preempted(holder, keep, now, log_max)
  local head = redis.call('ZRANGE', QUEUE, 0, 0, 'WITHSCORES')
  if not head[1] or tonumber(head[2]) >= 0 then
    return
  end
  local who = redis.call('HGET', LEASES, who_field(head[1]))
  local by = '?'
  if who then
    local f = tab_fields(who, 6)
    by = who_is(f[4], f[5], f[3])
  end
  ask_to_stop(holder, by, keep, now, log_max)
end

-- What META says about the lock before a new holder's record replaces it (see hold).
local BEFORE = {'fence', 'acquisitions', 'waited_ms', 'token', 'released_ms', 'told', 'slots'}

-- Records `token` as the holder, in the step that gave it the lock (the caller set the lock key,
-- with an expiry of h.expiry_ms): the holder record in META, the fence (`fence`, `write`: from
-- next_fence over `before`, META's BEFORE fields as read), and, unless `how.quorum` (a quorum
-- node's part of an attempt: fence.lua tells and counts the acquisition once a majority holds
-- it), the count and the history: `expired` for a previous holder whose end was never told
-- (unless `how.ended`: the caller told it), then `acquired`. `h`: host, pid, user, note, ttl_ms
-- (the holder's TTL, which renewals keep), expiry_ms, pidns, preemptible, kept, waited (ms).
-- `how`: log_max, meta_idle_ms, quorum, ended.
local function hold(token, h, before, fence, write, now, how)
  local ttl = h.ttl_ms
  -- released_ms '' (not deleted: one command less): the new holder has not released yet.
  local record = {'token', token, 'host', h.host, 'pid', h.pid, 'user', h.user,
    'note', h.note, 'acquired_ms', int(now), 'ttl_ms', ttl, 'expires_ms', int(now + h.expiry_ms),
    'pidns', h.pidns or '', 'released_ms', '', 'preemptible', h.preemptible or '',
    'kept', h.kept or ''}
  if before[7] and before[7] ~= '' then
    -- It was a lock with more than one holder, idle now: a plain lock from here on.
    table.insert(record, 'slots')
    table.insert(record, '')
  end
  if not how.quorum then
    -- `told`: the acquisition of this token is in the history, so its end will be too.
    table.insert(record, 'told')
    table.insert(record, token)
    table.insert(record, 'acquisitions')
    table.insert(record, int((tonumber(before[2]) or 0) + 1))
    table.insert(record, 'waited_ms')
    table.insert(record, int((tonumber(before[3]) or 0) + h.waited))
  end
  local log_max = how.log_max
  local keep = tonumber(ttl) + (tonumber(how.meta_idle_ms) or 0)
  if not how.ended and before[4] and before[4] == before[6] and before[4] ~= token
      and (before[5] or '') == '' then
    -- The rest of the previous holder's record, read only when it is told (an expiry is rare).
    local was = redis.call('HMGET', META, 'acquired_ms', 'expires_ms', 'user', 'host', 'pid')
    local from, to = tonumber(was[1]) or now, tonumber(was[2]) or now
    event('expired', before[4], {'fence', before[1] or '', 'user', was[3] or '',
      'host', was[4] or '', 'pid', was[5] or '', 'held_ms', math.max(to - from, 0),
      'expires_ms', to}, log_max, keep, now)
  end
  if write then
    table.insert(record, 'fence')
    table.insert(record, int(fence))
  end
  redis.call('HSET', META, unpack(record))
  keep_meta(how.meta_idle_ms, h.expiry_ms)
  if h.preemptible == '1' then
    ask_if_preempted(token, keep, now, log_max)
  end
  if not how.quorum then
    event('acquired', token, {'fence', int(fence), 'user', h.user, 'host', h.host,
      'pid', h.pid, 'note', h.note, 'waited_ms', h.waited, 'ttl_ms', tonumber(ttl)}, log_max,
      keep, now)
  end
end

-- The direct hand-over: the release (or a waiter's give-up, or an attempt that finds the lock
-- free and another waiter first in line) makes `waiter` the holder in the same step, so that it
-- wakes up holding the lock and sends no attempt of its own. `how`: its ':g' field (see
-- KEYS[4]), `who`: its record; `grant`: what hold() is told (log_max, meta_idle_ms, ended), and
-- `before`, META's BEFORE fields if the caller read them already.
--
-- The grant's expiry is the claim window (or the waiter's TTL, if shorter), not the waiter's
-- TTL: a waiter that died or froze just before its turn holds up the queue no longer than a
-- reservation it never claimed did, and the next waiter takes the lock when it expires. The
-- woken holder extends it to its TTL itself, off the critical path (see acquire.rs).
--
-- The push that wakes it carries the grant, 'g:FENCE:ACQUIRED_MS:EXPIRY_MS' (the waiter counts
-- on the expiry it says, not on a claim window of its own version's), and expires with it, set
-- first (no later than the lock key, on a server whose clock moves within a script): a push
-- popped is never older than its grant. The waiter counts the lock as its own from when it sent
-- its last attempt (which ran before this step), for the claim window: never longer than the
-- key lasts. A waiter that misses the push (a dropped connection) finds the lock held with its
-- own token at its next attempt, as does an older client, which reads any push as a wake-up
-- (acquire.lua: "taken already by this token"). Returns false, having changed nothing, when
-- the server refused the writes (out of memory): the caller reserves or frees the lock instead.
local function grant_to(waiter, how, who, claim_ms, grant)
  local g = tab_fields(how, 4)
  local ttl = tonumber(g[1])
  if not ttl or ttl < 1 then
    return false
  end
  local expiry = math.min(ttl, tonumber(claim_ms))
  local before = grant.before or redis.call('HMGET', META, unpack(BEFORE))
  local fence, write = next_fence(before[1])
  local now = now_ms()
  local wake = wake_key(waiter)
  local pushed = redis.pcall('LPUSH', wake, 'g:' .. int(fence) .. ':' .. int(now) .. ':' ..
    int(expiry))
  if type(pushed) == 'table' and pushed.err then
    return false
  end
  redis.call('PEXPIRE', wake, int(expiry))
  local set = redis.pcall('SET', LOCK, waiter, 'PX', int(expiry))
  if type(set) == 'table' and set.err then
    redis.call('DEL', wake)
    return false
  end
  drop_waiter(waiter)
  local w = tab_fields(who or '', 6)
  local since = tonumber(w[1])
  hold(waiter, {host = w[5] or '?', pid = w[3] or '?', user = w[4] or '?', note = w[6] or '',
    ttl_ms = g[1], expiry_ms = expiry, pidns = g[2], preemptible = g[3], kept = g[4],
    waited = since and math.max(now - since, 0) or 0}, before, fence, write, now, grant)
  return true
end

-- Free the lock: grant it to the first live waiter that can take a grant (see grant_to), else
-- reserve it for the first live waiter (hand_over), or delete it when nobody waits. Returns the
-- waiter it was handed to (or false) and whether it was granted. With `quiet`, the waiter is
-- not woken yet (a quorum first reserves the lock for it on its other nodes). With `to` (a
-- quorum's other nodes, which keep no queue), the lock is reserved for that waiter, whom the
-- queue node chose. `grant`: what a grant tells and keeps (see grant_to); nil: never grant (a
-- quorum's nodes). Out of memory, no reservation can be written: the lock is deleted (and a
-- waiter takes it at its next look).
local function pass_on(claim_ms, quiet, to, grant)
  if to and to ~= '' then
    if reserve(to, claim_ms) then
      return to, false
    end
  else
    local waiter, how, who = first_live_waiter()
    if waiter and grant and not quiet and how and grant_to(waiter, how, who, claim_ms, grant) then
      return waiter, true
    end
    if waiter and hand_over(waiter, claim_ms, quiet) then
      return waiter, false
    end
  end
  redis.call('DEL', LOCK)
  return false, false
end

-- `--supersede`: `token`, joining the queue, makes every earlier waiter that asked for
-- --supersede leave it at once: each is dropped from the queue, marked superseded by `by` at
-- `at` (LOCK:gone:TOKEN = 'sup:AT:BY', for `mark_ms`: its next attempt reads it, see given_up)
-- and woken; told as `superseded` (the
-- history kept `keep_ms` from now at least, as `event` says). The holder is left alone, and so
-- is a waiter the lock was handed to (out of the queue, claiming it: the next holder).
-- Bounded: the first 1000 waiters are looked at.
local function supersede_earlier(token, by, at, mark_ms, claim_ms, log_max, keep_ms)
  local queued = redis.call('ZRANGE', QUEUE, 0, 999)
  if #queued == 0 then
    return
  end
  local fields = {}
  for i, waiter in ipairs(queued) do
    fields[i] = waiter .. ':f'
  end
  local flags = redis.call('HMGET', LEASES, unpack(fields))
  for i, waiter in ipairs(queued) do
    if waiter ~= token and flags[i] and string.find(flags[i], 'u', 1, true) then
      drop_waiter(waiter)
      redis.call('SET', gone_key(waiter), 'sup:' .. int(at) .. ':' .. by, 'PX', mark_ms)
      redis.pcall('LPUSH', wake_key(waiter), '1')
      redis.call('PEXPIRE', wake_key(waiter), claim_ms)
      event('superseded', waiter, {'by', by}, log_max, keep_ms, at)
    end
  end
end

-- One lock's state, as `status` reads it (status.lua returns it; so does a waiter's attempt when
-- its status line is due, see acquire.lua): {lock value or false, pttl, now_ms, meta, waiters,
-- queue}. The value is the holder's token, or '~' .. waiter while the lock is being handed over.
-- `meta` is the whole meta hash: the fence counter, and the record of the current or (when the
-- lock is free) the last holder; the caller tells which by comparing its token with the lock's
-- value. `waiters` counts the queue; `queue` is its first MAX_LISTED entries in arrival order,
-- flat: token, lease (false if none), record (false if none; see KEYS[4] above) for each. The
-- caller drops those whose lease has run out (dead waiters not pruned yet). A lock with more
-- than one holder (the value '#slots' or '#shared', see slots_common.lua) adds a seventh item:
-- its holders and reserved places, HGETALL of LOCK:slots as it stands (dead entries included).
local MAX_LISTED = 100
local function snapshot()
  local current = redis.call('GET', LOCK)
  local tokens = redis.call('ZRANGE', QUEUE, 0, MAX_LISTED - 1)
  local queue = {}
  if #tokens > 0 then
    local fields = {}
    for _, token in ipairs(tokens) do
      fields[#fields + 1] = token
      fields[#fields + 1] = who_field(token)
    end
    local found = redis.call('HMGET', LEASES, unpack(fields))
    for i, token in ipairs(tokens) do
      queue[#queue + 1] = token
      queue[#queue + 1] = found[2 * i - 1]
      queue[#queue + 1] = found[2 * i]
    end
  end
  local state = {current, redis.call('PTTL', LOCK), now_ms(), redis.call('HGETALL', META),
    redis.call('ZCARD', QUEUE), queue}
  if current and string.sub(current, 1, 1) == '#' then
    state[7] = redis.call('HGETALL', LOCK .. ':slots')
  end
  return state
end

-- A busy attempt's end, in acquire.lua and slots.lua (which read the same arguments, `A`):
-- without A.join, busy and not queued. Otherwise the waiter joins the queue, or renews its lease if
-- it is queued: the lease covers the wait the client is about to do (`pttl`, at most
-- block_cap_ms) plus a margin, and the client renews it with every attempt. Who waits is written
-- with the first lease when the waiter joins (a quorum waiter's fresh token took its place and
-- record over in acquire.lua, so it is found here): since when and until when, by this server's
-- clock, written once, so that later attempts cost nothing more; with it the waiter's `flags`
-- (see KEYS[4]; 'u' added for --supersede, which then supersedes the earlier ones). `now`: this
-- server's ms; `lock_pttl`: the lock key's PTTL, for keep_meta. `ahead` (--preempt): the ticket
-- is moved 2^50 down, ahead of every ticket handed out the plain way (HINCRBY: far fewer) and
-- behind the earlier preemptors (theirs were moved as much). With A.grant, a new waiter also
-- records how it would hold the lock, for a release that grants it (see grant_to). Returns the
-- busy reply {0, pttl, queued, reserved[, state]} (the lock's state when the waiter's status
-- line is due, A.tell).
local PREEMPT_AHEAD = 2 ^ 50
local function queue_up(A, token, now, pttl, lock_pttl, reserved, flags, log_max, ahead)
  if A.join ~= '1' then
    return {0, pttl, 0, reserved}
  end
  if A.grant == '2' then
    -- A later attempt of a waiter that may have been granted the lock before it, and lost it
    -- since (forced away, evicted): the grant's push, if unread, must not be read after this.
    redis.call('DEL', wake_key(token))
  end
  local cap, margin = tonumber(A.block_cap_ms), tonumber(A.lease_margin_ms)
  local block = cap
  if pttl >= 0 and pttl < cap then
    block = pttl
  end
  local lease = int(now + block + margin)
  -- A waiter's first attempt (A.grant '1') is not queued yet, unless it is the same attempt sent
  -- again (a Cluster client's retry): ZADD NX keeps the place it took then, and tells the two
  -- apart in the same command. A later attempt (or a quorum's) asks ZSCORE first: a queued
  -- waiter, the usual case then, costs no ticket.
  local added = false
  if A.grant == '1' or not redis.call('ZSCORE', QUEUE, token) then
    local ticket = redis.call('HINCRBY', META, 'tickets', 1)
    if ahead then
      ticket = ticket - PREEMPT_AHEAD
    end
    added = redis.call('ZADD', QUEUE, 'NX', int(ticket), token) == 1
  end
  if added then
    local wait = tonumber(A.wait_ms)
    local record = {token, lease, who_field(token), table.concat({int(now),
      wait and int(now + wait) or '', A.pid, A.user, A.host, A.note}, '\t')}
    if (A.grant == '1' or A.grant == '2') and flags == '' then
      -- How it would hold the lock, should a release grant it (see grant_to).
      record[5] = token .. ':g'
      record[6] = table.concat({A.ttl_ms, A.pidns or '', A.preemptible or '', A.kept or ''}, '\t')
    end
    redis.call('HSET', LEASES, unpack(record))
    local who = {'user', A.user, 'host', A.host, 'pid', A.pid, 'note', A.note}
    if wait then
      who[#who + 1] = 'deadline_ms'
      who[#who + 1] = now + wait
    end
    event('queued', token, who, log_max, 0, now)
    local supersede = (A.supersede_ms or '') ~= ''
    if supersede then
      flags = flags .. 'u'
    end
    if flags ~= '' then
      redis.call('HSET', LEASES, token .. ':f', flags)
    end
    if supersede then
      supersede_earlier(token, A.who or '?', now, A.supersede_ms, A.claim_ms, log_max,
        tonumber(A.ttl_ms) + (tonumber(A.meta_idle_ms) or 0))
    end
  else
    redis.call('HSET', LEASES, token, lease)
  end
  local keep_queue = int(cap + margin)
  redis.call('PEXPIRE', QUEUE, keep_queue)
  redis.call('PEXPIRE', LEASES, keep_queue)
  keep_meta(A.meta_idle_ms, lock_pttl, cap + margin)
  if A.tell == '1' then
    -- The waiter's status line is due (acquire.rs): what it says rides on this round trip.
    return {0, pttl, 1, reserved, snapshot()}
  end
  return {0, pttl, 1, reserved}
end
