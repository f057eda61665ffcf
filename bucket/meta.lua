-- Records a topic's bucket count on first use and returns the recorded one.
-- KEYS[1] -> meta HASH of the topic
-- ARGV[1] -> bucket count this client is configured with
-- Returns the recorded bucket count.
redis.call('HSETNX', KEYS[1], 'buckets', ARGV[1])
return tonumber(redis.call('HGET', KEYS[1], 'buckets'))
