-- Removes a consumer from the alive set, but only while it is still
-- silent. A reaper calls it before it recovers the consumer's jobs and
-- drops it from its topics: a consumer that heartbeats afterwards finds
-- itself gone, and joins its topics again.
-- KEYS[1] -> alive ZSET
-- ARGV[1] -> consumer id
-- ARGV[2] -> timeout, ms
-- Returns 1 when it is absent now, 0 when it heartbeat within the timeout.
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if s == false then return 1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(s) > now - tonumber(ARGV[2]) then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
