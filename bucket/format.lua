-- Switches the namespace to a format of the job state (keys.MoversFormat),
-- only while every live client records that it reads it, and tells which
-- do not otherwise. One call; it writes nothing when it refuses.
-- KEYS[1] -> movers ZSET (client id -> last announcement, fleet ms)
-- KEYS[2] -> formats HASH (client id -> newest format it reads)
-- KEYS[3] -> format STRING (the format the clients write)
-- KEYS[4] -> clock HASH (see announce.lua: the fleet's clock)
-- ARGV[1] -> liveness window, ms: a client silent for longer is dead
-- ARGV[2] -> the format to switch to
-- ARGV[3] -> most live clients to look at (at most 10,000)
-- ARGV[4] -> '' to switch when every live client reads the format; else a
--   client id: switch only when no client but that one is live (a fresh
--   namespace, at that client's Start)
-- Returns {1} when the format is in force (now, or already: a rerun after
-- a lost reply finds it so), {0, ids...} when it refused, with the live
-- clients that do not read it (ARGV[4] '') or the other live clients.
local want = tonumber(ARGV[2])
local cur = tonumber(redis.call('GET', KEYS[3]) or '0') or 0
if cur >= want then return {1} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
now = now + (tonumber(redis.call('HGET', KEYS[4], 'offset')) or 0)
local live = redis.call('ZRANGEBYSCORE', KEYS[1], now - tonumber(ARGV[1]), '+inf', 'LIMIT', 0, tonumber(ARGV[3]))
local refuse = {0}
if ARGV[4] ~= '' then
  for _, id in ipairs(live) do
    if id ~= ARGV[4] then refuse[#refuse + 1] = id end
  end
else
  for i = 1, #live, 500 do
    local part = {}
    for j = i, math.min(i + 499, #live) do part[#part + 1] = live[j] end
    local v = redis.call('HMGET', KEYS[2], unpack(part))
    for j = 1, #part do
      if (tonumber(v[j]) or 0) < want then refuse[#refuse + 1] = part[j] end
    end
  end
end
if #refuse > 1 then return refuse end
redis.call('SET', KEYS[3], ARGV[2])
return {1}
