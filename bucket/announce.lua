-- Records that a client is alive and returns the clients alive now, by the
-- Redis server's clock: one call per client per ScanInterval, whatever the
-- number of topics and buckets.
-- KEYS[1] -> movers ZSET (client id -> last announcement, unix ms)
-- ARGV[1] -> this client's id
-- ARGV[2] -> liveness window, ms: a client silent for longer is dead
-- ARGV[3] -> most ids to return
-- Returns the ids of the live clients, this one included.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]) - 1)
return redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[3]) - 1)
