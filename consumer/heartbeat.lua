-- Records that a consumer is alive, by the Redis server's clock, with the
-- topics it listens to and their bucket counts. Running it twice does what
-- running it once does. Entries of consumers that died stay until a
-- reaper has recovered their jobs and forgets them, however long that
-- takes (a fleet down for days).
-- KEYS[1] -> alive ZSET (consumer id -> last heartbeat, unix ms)
-- KEYS[2] -> alive topics HASH (consumer id -> "topic#buckets" lines;
--            consumer id .. "#timeout" -> its ConsumerTimeout, ms)
-- ARGV[1] -> consumer id
-- ARGV[2] -> its topics, "topic#buckets" one per line
-- ARGV[3] -> its ConsumerTimeout, ms
-- Returns now, unix ms.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2], ARGV[1] .. '#timeout', ARGV[3])
return now
