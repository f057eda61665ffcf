-- Moves at most ARGV[1] due jobs of one bucket: plain jobs to the ready list,
-- broadcast jobs out of the pool into the sent HASH, announced by a small
-- notice on the broadcast channel.
-- KEYS[1] -> bucket ZSET
-- KEYS[2] -> ready LIST
-- KEYS[3] -> pool HASH
-- KEYS[4] -> sent HASH (id "\n" seq -> envelope of a published broadcast job)
-- KEYS[5] -> sent-at ZSET (id "\n" seq -> published, unix ms)
-- KEYS[6] -> sent-seq STRING (last sequence number given)
-- KEYS[7] -> state HASH (a moved id's state becomes ready: "r<due ms>",
--   or "r" in the older format; see keys.Bucket.State)
-- KEYS[8] -> due HASH (older format only: a moved id -> its due time, unix
--   ms, for the fetch to report lateness; not part of the delivery fence)
-- ARGV[1] -> most ids to move
-- ARGV[2] -> broadcast mark
-- ARGV[3] -> ready channel
-- ARGV[4] -> broadcast channel
-- ARGV[5] -> bucket address (topic#n)
-- ARGV[6] -> grace, ms: move only jobs overdue by more than this (0 for the
--   lock holder; a non-holder moves what a dead holder left behind)
-- ARGV[7] -> broadcast retention, ms: how long sent envelopes are kept
-- ARGV[8] -> the format to write (see keys.MoversFormat): '1' keeps each
--   due time in the id's state, one field per job; '' (or absent) writes
--   "r" and the due HASH, the format clients of older versions read
-- Returns {ids moved, next due time in unix ms or -1, now in unix ms,
-- length of the ready list}. Whenever the ready list holds ids, moved now
-- or earlier, it announces them on the ready channel: a notification lost
-- earlier is repeated at the next scan, so fetchers need not poll.
local t = redis.call('TIME')
local now = math.floor((tonumber(t[1]) * 1000000 + tonumber(t[2])) / 1000)
local upto = now - tonumber(ARGV[6])
local function announce()
  local waiting = redis.call('LLEN', KEYS[2])
  if waiting > 0 then redis.call('PUBLISH', ARGV[3], ARGV[5]) end
  return waiting
end
-- The idle case, one look: nothing due yet.
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if first[1] == nil then return {0, -1, now, announce()} end
if tonumber(first[2]) > upto then return {0, tonumber(first[2]), now, announce()} end
local rows = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', upto, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
local ids, dues = {}, {}
for i = 1, #rows, 2 do
  ids[#ids + 1] = rows[i]
  dues[rows[i]] = rows[i + 1]
end
local ready = {}
local sent = 0
for _, m in ipairs(ids) do
  if string.sub(m, 1, 1) == ARGV[2] then
    -- Publish a notice, not the envelope: one run may move MoveBatch jobs
    -- of MaxBodyBytes each, far past a subscriber's output buffer limit.
    -- The envelope waits under a fresh sequence number for the clients to
    -- read; the created ms lets them check they read the job announced.
    local id = string.sub(m, 2)
    local env = redis.call('HGET', KEYS[3], id)
    if env ~= false then
      local field = id .. '\n' .. redis.call('INCR', KEYS[6])
      redis.call('HSET', KEYS[4], field, env)
      redis.call('ZADD', KEYS[5], now, field)
      redis.call('HDEL', KEYS[3], id)
      local created = string.match(env, '^1|(%d+)|') or ''
      redis.call('PUBLISH', ARGV[4], ARGV[5] .. '\n' .. field .. '\n' .. created)
      sent = sent + 1
    end
  else
    ready[#ready + 1] = m
  end
end
if sent > 0 then
  -- Trim as many expired envelopes as this run may add, and let the keys
  -- expire with their newest entry, so a quiet bucket costs nothing.
  local old = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now - tonumber(ARGV[7]), 'LIMIT', 0, tonumber(ARGV[1]))
  if #old > 0 then
    redis.call('HDEL', KEYS[4], unpack(old))
    redis.call('ZREM', KEYS[5], unpack(old))
  end
  redis.call('PEXPIRE', KEYS[4], ARGV[7])
  redis.call('PEXPIRE', KEYS[5], ARGV[7])
end
redis.call('ZREM', KEYS[1], unpack(ids))
if #ready > 0 then
  -- The state marks each id as fetchable; chunked to stay within unpack's
  -- limit (MoveBatch may be 5,000, two values per id). The due time is the
  -- score as the ZSET gave it: whole ms in plain digits.
  local current = ARGV[8] == '1'
  for i = 1, #ready, 1000 do
    local st, du = {}, {}
    for j = i, math.min(i + 999, #ready) do
      st[#st + 1] = ready[j]
      if current then
        st[#st + 1] = 'r' .. dues[ready[j]]
      else
        st[#st + 1] = 'r'
        du[#du + 1] = ready[j]
        du[#du + 1] = dues[ready[j]]
      end
    end
    redis.call('HSET', KEYS[7], unpack(st))
    if #du > 0 then redis.call('HSET', KEYS[8], unpack(du)) end
  end
  redis.call('RPUSH', KEYS[2], unpack(ready))
end
local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local due = -1
if nxt[1] ~= nil then due = tonumber(nxt[2]) end
return {#ids, due, now, announce()}
