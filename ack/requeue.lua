-- Takes a parked (un_ack) or dead job back to its bucket.
-- KEYS[1] -> pool HASH
-- KEYS[2] -> the ZSET it is parked in (unack or dead)
-- KEYS[3] -> bucket ZSET
-- KEYS[4] -> reasons HASH
-- ARGV[1] -> job id
-- ARGV[2] -> delay, ms
-- ARGV[3] -> "1" to reset the job's attempts and recoveries, else ""
-- ARGV[4] -> wake channel
-- ARGV[5] -> wake message
-- Returns 0 when requeued, 1 when the job is absent, 2 when it is not parked there.
local env = redis.call('HGET', KEYS[1], ARGV[1])
if env == false then return 1 end
if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then return 2 end
redis.call('HDEL', KEYS[4], ARGV[1])
if ARGV[3] == '1' then
  local head, tail = string.match(env, '^(1|%d+|)%d+|%d+(|.*)$')
  if head then redis.call('HSET', KEYS[1], ARGV[1], head .. '0|0' .. tail) end
end
local t = redis.call('TIME')
local due = math.ceil((tonumber(t[1]) * 1000000 + tonumber(t[2])) / 1000) + tonumber(ARGV[2])
local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
redis.call('ZADD', KEYS[3], due, ARGV[1])
if first[1] == nil or due < tonumber(first[2]) then
  redis.call('PUBLISH', ARGV[4], ARGV[5])
end
return 0
