-- Records that a client is alive and returns the clients alive now, by the
-- Redis server's clock: one call per client per ScanInterval, whatever the
-- number of topics and buckets.
-- KEYS[1] -> movers ZSET (client id -> last announcement, unix ms)
-- ARGV[1] -> this client's id
-- ARGV[2] -> liveness window, ms: a client silent for longer is dead
-- ARGV[3] -> most ids to return
-- ARGV[4] -> '1': also drop the entries of dead clients
-- Returns the ids of the live clients, this one included. The live ones are
-- read by score, so entries of dead clients may stay between prunes (each
-- client asks for one every few announcements): they are only a few bytes
-- each, and their count is bounded by the clients that died since.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local since = now - tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
if ARGV[4] == '1' then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', since - 1)
end
return redis.call('ZRANGEBYSCORE', KEYS[1], since, '+inf', 'LIMIT', 0, tonumber(ARGV[3]))
