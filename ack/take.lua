-- Removes a parked (un_ack or dead) job from where it is parked and from
-- its pool, and returns it.
-- KEYS[1] -> pool HASH
-- KEYS[2] -> the ZSET it is parked in (unack or dead)
-- KEYS[3] -> reasons HASH
-- ARGV[1] -> job id
-- Returns the envelope, 1 when the job is absent, 2 when it is not parked there.
local env = redis.call('HGET', KEYS[1], ARGV[1])
if env == false then return 1 end
if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then return 2 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return env
