-- Lists the consumers of a topic silent for longer than a timeout.
-- KEYS[1] -> consumers ZSET of a topic
-- ARGV[1] -> timeout, ms
-- ARGV[2] -> most ids to return
-- Returns the silent consumer ids.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[1]), 'LIMIT', 0, tonumber(ARGV[2]))
