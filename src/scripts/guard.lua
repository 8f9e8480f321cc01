-- What kind of server this is, checked before a connection's first acquire attempt writes
-- anything, in the round trip that attempt makes anyway (scripts.rs wraps acquire.lua in
-- `guarded`; client/ sends this variant once per connection).
--
-- A replica must not grant locks: a writable one (replica-read-only no) keeps a lock where the
-- master's clients never look, and the master grants the same lock to them. Every replica is
-- refused, read-only or not (INFO does not say which).
-- A server that evicts keys under memory pressure can drop a held lock: every lock key has a TTL,
-- so volatile-* policies evict lock keys first, and allkeys-* policies may evict them (and the
-- fence counter) too. The policy goes back to the client, which warns about volatile-*; allkeys-*
-- is refused here, before anything is written, unless the caller allows eviction.
--
-- INFO is the only way a script can see either: CONFIG and ROLE are not allowed in scripts. A
-- server that refuses INFO (renamed, or denied by an ACL, as managed services do) is not checked.
-- The role is read every time (INFO replication is short). INFO memory costs the server more
-- than the whole lock operation, so the policy it gives is remembered in the lock's meta hash
-- (`policy`, `policy_ms`: this server's clock) for POLICY_FOR_MS, and read again after that.
-- Written after the attempt, only into a meta hash that exists then (its expiry is kept by the
-- lock scripts; the first attempt on a new lock makes it), and only if the server passed.
local POLICY_FOR_MS = 10000

local function server_check(allow_eviction)
  local replication = redis.pcall('INFO', 'replication')
  if type(replication) == 'string' then
    local role = info_field(replication, 'role', '(%a+)')
    if role == 'slave' or role == 'replica' then
      local host = info_field(replication, 'master_host', '([^\r\n]+)') or '?'
      local port = info_field(replication, 'master_port', '(%d+)') or '?'
      return false, redis.error_reply('REDLOCK_REPLICA ' .. host .. ':' .. port)
    end
  end
  local now = now_ms()
  local policy
  local known = redis.pcall('HMGET', META, 'policy', 'policy_ms')
  if type(known) == 'table' and known[1] then
    local age = now - (tonumber(known[2]) or -POLICY_FOR_MS)
    if age >= 0 and age < POLICY_FOR_MS then
      policy = known[1]
    end
  end
  local fresh = not policy
  if fresh then
    local memory = redis.pcall('INFO', 'memory')
    policy = type(memory) == 'string' and info_field(memory, 'maxmemory_policy', '([%w-]+)') or ''
  end
  if not allow_eviction and string.sub(policy, 1, 8) == 'allkeys-' then
    return false, redis.error_reply('REDLOCK_EVICTS ' .. policy)
  end
  return true, policy, fresh and now
end

-- Runs `attempt` (the acquire script) if the server passes the check, and appends the server's
-- maxmemory-policy ('' when unknown) to its reply.
local function guarded(attempt, allow_eviction)
  local ok, found, read_at = server_check(allow_eviction)
  if not ok then
    return found
  end
  local reply = attempt()
  if type(reply) == 'table' and not reply.err and not reply.ok then
    reply[#reply + 1] = found
    if read_at and redis.call('EXISTS', META) == 1 then
      redis.pcall('HSET', META, 'policy', found, 'policy_ms', int(read_at))
    end
  end
  return reply
end
