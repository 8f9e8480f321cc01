-- What kind of server this is, checked before a connection's first acquire attempt writes
-- anything, in the round trip that attempt makes anyway (scripts.rs wraps acquire.lua in
-- `guarded`; client.rs sends this variant once per connection).
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
-- Both sections in one INFO (Redis 7 and later; each call of INFO costs the server as much as a
-- small script); an older server refuses two sections, and is asked once for each.
local function server_check(allow_eviction)
  local replication = redis.pcall('INFO', 'replication', 'memory')
  local memory = replication
  if type(replication) ~= 'string' then
    replication = redis.pcall('INFO', 'replication')
    memory = redis.pcall('INFO', 'memory')
  end
  if type(replication) == 'string' then
    local role = string.match(replication, 'role:(%a+)')
    if role == 'slave' or role == 'replica' then
      local host = string.match(replication, 'master_host:([^\r\n]+)') or '?'
      local port = string.match(replication, 'master_port:(%d+)') or '?'
      return false, redis.error_reply('REDLOCK_REPLICA ' .. host .. ':' .. port)
    end
  end
  local policy = ''
  if type(memory) == 'string' then
    policy = string.match(memory, 'maxmemory_policy:([%w-]+)') or ''
  end
  if not allow_eviction and string.sub(policy, 1, 8) == 'allkeys-' then
    return false, redis.error_reply('REDLOCK_EVICTS ' .. policy)
  end
  return true, policy
end

-- Runs `attempt` (the acquire script) if the server passes the check, and appends the server's
-- maxmemory-policy ('' when unknown) to its reply.
local function guarded(attempt, allow_eviction)
  local ok, found = server_check(allow_eviction)
  if not ok then
    return found
  end
  local reply = attempt()
  if type(reply) == 'table' and not reply.err and not reply.ok then
    reply[#reply + 1] = found
  end
  return reply
end
