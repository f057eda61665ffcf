-- Keeps, in a topic's meta, since when the topic has been idle (no jobs,
-- no consumers), by the Redis server's clock.
-- KEYS[1] -> meta HASH of the topic
-- ARGV[1] -> "1" when the topic was found idle just now, "0" when not
-- Returns {ms the topic has been idle (-1 when not idle), now in unix ms}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[1] ~= '1' then
  redis.call('HDEL', KEYS[1], 'idle')
  return {-1, now}
end
redis.call('HSETNX', KEYS[1], 'idle', now)
return {now - tonumber(redis.call('HGET', KEYS[1], 'idle')), now}
