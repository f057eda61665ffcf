-- Lists the topics retired long enough ago to be looked at once more.
-- KEYS[1] -> retired ZSET (topic -> when retired, unix ms)
-- ARGV[1] -> age, ms
-- ARGV[2] -> most topics to return
-- Returns the topics retired more than ARGV[1] ms ago.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[1]), 'LIMIT', 0, tonumber(ARGV[2]))
