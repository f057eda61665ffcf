-- Records that a consumer is alive, by the Redis server's clock, and drops
-- the entries of consumers silent for longer than a day or so: a reaper
-- forgets the silent consumers it finds in a topic, and this catches the
-- rest (a client that died between its first heartbeat and joining its
-- topics). A consumer paused for that long joins its topics again.
-- KEYS[1] -> alive ZSET
-- ARGV[1] -> consumer id
-- ARGV[2] -> age, ms, after which a silent entry is dropped
-- Returns {1 when the id was not there (the first heartbeat, or after a
-- reaper forgot it) else 0, now in unix ms}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - tonumber(ARGV[2])))
return {redis.call('ZADD', KEYS[1], now, ARGV[1]), now}
