-- Records that a client is alive, and which buckets it cannot move, and
-- returns the clients alive now with the buckets each cannot move: one
-- call per client per ScanInterval, whatever the number of topics and
-- buckets.
-- KEYS[1] -> movers ZSET (client id -> last announcement, fleet ms)
-- KEYS[2] -> unreachable HASH (client id -> addresses it cannot move, one a line)
-- KEYS[3] -> clock HASH (high -> latest fleet ms, offset -> ms the clock stepped back in all)
-- KEYS[4] -> formats HASH (client id -> newest job state format it reads;
--   keys.MoversFormats)
-- KEYS[5] -> format STRING (the format the clients write; keys.MoversFormat)
-- ARGV[1] -> this client's id
-- ARGV[2] -> liveness window, ms: a client silent for longer is dead
-- ARGV[3] -> most ids to return, and to prune at once
-- ARGV[4] -> '1': also drop the entries of dead clients
-- ARGV[5] -> the addresses this client cannot move, one a line; '' none
-- ARGV[6] -> the newest job state format this client reads; '' none
--   (as a client of an older version, which writes no entry)
-- Returns {ids of the live clients, this one included; {id, addresses,
-- ...} of the clients with buckets they cannot move; the format in force
-- or ''; while one is, the live clients that record another format or
-- none}. The live ones are
-- read by score, so entries of dead clients may stay between prunes (each
-- client asks for one every few announcements): they are only a few bytes
-- each, and their count is bounded by the clients that died since.
--
-- Scores are on the fleet's clock: the server's TIME plus the steps back
-- it took so far, so it never goes back. A server clock stepped back by S
-- would otherwise keep a dead client's last score "recent" for S more.
-- A step forward makes every client look silent until it announces again
-- (one interval): some buckets change hands twice, which costs duplicate
-- work, never a job. A rerun after a lost reply announces again.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local c = redis.call('HMGET', KEYS[3], 'high', 'offset')
local high, offset = tonumber(c[1]) or 0, tonumber(c[2]) or 0
now = now + offset
if now < high then
  offset = offset + high - now
  now = high
end
redis.call('HSET', KEYS[3], 'high', now, 'offset', offset)

local since = now - tonumber(ARGV[2])
local most = tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], now, ARGV[1])
if ARGV[6] == '' then
  redis.call('HDEL', KEYS[4], ARGV[1])
else
  redis.call('HSET', KEYS[4], ARGV[1], ARGV[6])
end
if ARGV[5] == '' then
  redis.call('HDEL', KEYS[2], ARGV[1])
else
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[5])
end
if ARGV[4] == '1' then
  local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', since - 1, 'LIMIT', 0, most)
  for i = 1, #dead, 500 do
    local part = {}
    for j = i, math.min(i + 499, #dead) do part[#part + 1] = dead[j] end
    redis.call('ZREM', KEYS[1], unpack(part))
    redis.call('HDEL', KEYS[2], unpack(part))
    redis.call('HDEL', KEYS[4], unpack(part))
  end
end
local live = redis.call('ZRANGEBYSCORE', KEYS[1], since, '+inf', 'LIMIT', 0, most)
local cannot = {}
-- Empty while every client reaches every node: then this costs one HLEN.
if redis.call('HLEN', KEYS[2]) > 0 then
  for i = 1, #live, 500 do
    local part = {}
    for j = i, math.min(i + 499, #live) do part[#part + 1] = live[j] end
    local v = redis.call('HMGET', KEYS[2], unpack(part))
    for j = 1, #part do
      if v[j] then
        cannot[#cannot + 1] = part[j]
        cannot[#cannot + 1] = v[j]
      end
    end
  end
end
-- The format costs one GET while none is in force, and an HMGET of the
-- live clients' formats (500 at a time) while one is.
local format = redis.call('GET', KEYS[5]) or ''
local outdated = {}
if format ~= '' then
  for i = 1, #live, 500 do
    local part = {}
    for j = i, math.min(i + 499, #live) do part[#part + 1] = live[j] end
    local v = redis.call('HMGET', KEYS[4], unpack(part))
    for j = 1, #part do
      if (tonumber(v[j]) or 0) < tonumber(format) then outdated[#outdated + 1] = part[j] end
    end
  end
end
return {live, cannot, format, outdated}
