-- Records that a consumer is alive, by the Redis server's clock.
-- KEYS[1] -> consumers ZSET of a topic
-- ARGV[1] -> consumer id
-- Returns the number of consumers added (1 the first time, or after the
-- reaper removed it; else 0).
local t = redis.call('TIME')
return redis.call('ZADD', KEYS[1], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), ARGV[1])
