-- Finds the consumers silent for longer than a timeout, and declares each
-- dead at the first look (the declaration stays until it heartbeats again
-- or is forgotten). A reaper recovers only the deliveries a consumer
-- fetched before its declaration: one that came back and fetched again
-- keeps those jobs, however late the reaper acts.
-- KEYS[1] -> alive ZSET (consumer id -> last heartbeat, unix ms)
-- KEYS[2] -> alive topics HASH (consumer id -> its topics, one per line)
-- KEYS[3] -> dead HASH (consumer id -> when a reaper declared it dead)
-- ARGV[1] -> timeout, ms
-- ARGV[2] -> most consumers to return (at most 1000)
-- Returns {cid, last heartbeat, declared dead at, topics, ...}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local found = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - tonumber(ARGV[1])), 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for i = 1, #found, 2 do
  local cid = found[i]
  redis.call('HSETNX', KEYS[3], cid, now)
  out[#out + 1] = cid
  out[#out + 1] = found[i + 1]
  out[#out + 1] = redis.call('HGET', KEYS[3], cid)
  out[#out + 1] = redis.call('HGET', KEYS[2], cid) or ''
end
return out
