-- Records that a topic is paused or resumed, and numbers the call so that
-- the buckets apply the calls in this order.
-- KEYS[1] -> meta HASH of the topic
-- ARGV[1] -> "1" to pause, "" to resume
-- Returns the call's number, or 0 when the topic has no recorded bucket
-- count (nobody ever used it).
if redis.call('HEXISTS', KEYS[1], 'buckets') == 0 then return 0 end
local seq = redis.call('HINCRBY', KEYS[1], 'pauseseq', 1)
if ARGV[1] == '1' then
  redis.call('HSET', KEYS[1], 'paused', '1')
else
  redis.call('HDEL', KEYS[1], 'paused')
end
return seq
