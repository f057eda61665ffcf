-- Records a topic's bucket count on first use and returns the recorded one.
-- A topic recorded already costs a read only, so that a server refusing
-- writes (maxmemory, min-replicas-to-write) lets its Adds be answered.
-- KEYS[1] -> meta HASH of the topic
-- ARGV[1] -> bucket count this client is configured with
-- Returns the recorded bucket count.
local n = redis.call('HGET', KEYS[1], 'buckets')
if n then return tonumber(n) end
redis.call('HSET', KEYS[1], 'buckets', ARGV[1])
return tonumber(ARGV[1])
