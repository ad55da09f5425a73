"""The Lua scripts the cluster runs in Redis, each one atomic there.

Redis runs a script to the end before any other command, so what a script
reads and writes is one step for every replica: that is how ``seq`` and
``session_seq`` stay gapless across replicas, how only a lease's holder can
renew it, and how exactly one confirmation answer wins.
"""

from __future__ import annotations

APPEND = """
-- KEYS[1] seq counter, KEYS[2] global stream, KEYS[3] session counters hash,
-- KEYS[4] the set of sessions with running turns, KEYS[4+i] the stream of
-- event i's session, then two keys per event marked as an ownership event
-- (in order): its session's lease and its session's running-turns hash.
-- ARGV[1] the appending replica's id ('' = it marks no events), ARGV[2] its
-- lease TTL in ms; then per event, 6 values: session id, type, turn id
-- ('' = none), ts, the envelope text after the two counters ('"id":...}'),
-- and '1' if an ownership event, else ''.
-- Returns the assigned (seq, session_seq) pairs, flattened.
-- An ownership event changes ownership in the same step as it is stored:
-- session.created takes the session's lease (if nobody holds it),
-- turn.started lists the turn as running (if this replica holds the lease),
-- a turn's end unlists it. So a turn that any reader saw start is listed,
-- and the loss of its replica ends it, however soon that replica dies.
local replica = ARGV[1]
local n = (#ARGV - 2) / 6
local US = '\\31'
local now = redis.call('TIME')
local ms = tostring(now[1] * 1000 + math.floor(now[2] / 1000))
local seq = redis.call('INCRBY', KEYS[1], n) - n
local extra = 4 + n
local out = {}
for i = 0, n - 1 do
  local a = 2 + i * 6
  local sid = ARGV[a + 1]
  local etype = ARGV[a + 2]
  local turn = ARGV[a + 3]
  seq = seq + 1
  local sseq = redis.call('HINCRBY', KEYS[3], sid, 1)
  local text = '{"seq":' .. string.format('%d', seq) .. ',"session_seq":'
    .. string.format('%d', sseq) .. ',' .. ARGV[a + 5]
  -- Two fields per entry: the text, and a header the reader splits
  -- (session, type, turn, ts, the other number, ms), joined by 0x1F;
  -- fewer fields make replies much cheaper to parse.
  local head = sid .. US .. etype .. US .. turn .. US .. ARGV[a + 4] .. US
  redis.call('XADD', KEYS[2], string.format('%d', seq) .. '-0',
    'd', text, 'h', head .. string.format('%d', sseq) .. US .. ms)
  redis.call('XADD', KEYS[5 + i], string.format('%d', sseq) .. '-0',
    'd', text, 'h', head .. string.format('%d', seq) .. US .. ms)
  if ARGV[a + 6] == '1' then
    local lease, running = KEYS[extra + 1], KEYS[extra + 2]
    extra = extra + 2
    if etype == 'session.created' then
      redis.call('SET', lease, replica, 'NX', 'PX', ARGV[2])
    elseif turn == '' then
      -- a turn event without a turn id names no turn to list
    elseif etype == 'turn.started' then
      if redis.call('GET', lease) == replica then
        redis.call('HSET', running, turn, replica)
        redis.call('SADD', KEYS[4], sid)
      end
    else
      redis.call('HDEL', running, turn)
      if redis.call('HLEN', running) == 0 then
        redis.call('SREM', KEYS[4], sid)
      end
    end
  end
  out[#out + 1] = seq
  out[#out + 1] = sseq
end
return out
"""

RENEW = """
-- Extend the leases in KEYS that ARGV[1] (this replica) still holds, by ARGV[2] ms.
-- Returns 1/0 per key: renewed, or lost (expired or taken by another replica).
local out = {}
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    redis.call('PEXPIRE', key, ARGV[2])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
"""

RELEASE = """
-- Delete the lease KEYS[1] if ARGV[1] holds it; 1 if deleted.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

CLAIM_LOST = """
-- KEYS[1] the session's lease, KEYS[2] its running-turns hash, KEYS[3] the set
-- of sessions with running turns; ARGV[1] the session id.
-- If nobody holds the lease, take the running turns (turn id, replica id,
-- flattened) and forget them, so exactly one replica handles the loss.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return false
end
local turns = redis.call('HGETALL', KEYS[2])
redis.call('DEL', KEYS[2])
redis.call('SREM', KEYS[3], ARGV[1])
return turns
"""

ANSWER = """
-- KEYS[1] the request's answer key; ARGV[1] the answer (JSON), ARGV[2] its TTL in ms.
-- The first answer is stored; every answer gets back {won, stored answer}.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, ARGV[1]}
end
return {0, redis.call('GET', KEYS[1])}
"""
