-- Records that a consumer is alive, by the Redis server's clock, with the
-- topics it listens to and their bucket counts, and tells it when it
-- (re)joined its topics: the heartbeat that finds no join time recorded
-- (the first, or the first after a reaper forgot the consumer) records its
-- own time, and the consumer then joins its topics' consumer sets with
-- that time. Running it twice does what running it once does, and gives
-- the same join time. Entries of consumers that died stay until a reaper
-- has recovered their jobs and forgets them, however long that takes (a
-- fleet down for days).
-- KEYS[1] -> alive ZSET (consumer id -> last heartbeat, unix ms)
-- KEYS[2] -> alive topics HASH (consumer id -> "topic#buckets" lines;
--            consumer id .. "#timeout" -> its ConsumerTimeout, ms;
--            consumer id .. "#joined" -> when it joined its topics, ms;
--            consumer id .. "#info" -> its name, host and pid, JSON)
-- ARGV[1] -> consumer id
-- ARGV[2] -> its topics, "topic#buckets" one per line
-- ARGV[3] -> its ConsumerTimeout, ms
-- ARGV[4] -> its info, a JSON object of at most 1 KiB
-- Returns {now, join time}, unix ms.
local now = now_ms_floor()
local joined = redis.call('HGET', KEYS[2], ARGV[1] .. '#joined')
if joined == false then
  joined = string.format('%d', now)
  redis.call('HSET', KEYS[2], ARGV[1] .. '#joined', joined)
end
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2], ARGV[1] .. '#timeout', ARGV[3], ARGV[1] .. '#info', ARGV[4])
return {now, tonumber(joined)}
