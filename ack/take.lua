-- Removes a parked (un_ack or dead) job from where it is parked and from
-- its pool, and returns it.
-- KEYS[1] -> pool HASH
-- KEYS[2] -> the ZSET it is parked in (unack or dead)
-- KEYS[3] -> reasons HASH
-- KEYS[4] -> op STRING: this call's reply, kept for a rerun
-- KEYS[5] -> errors HASH
-- ARGV[1] -> job id
-- ARGV[2] -> how long to keep the reply, ms
-- Returns {0, envelope} when taken (now or by an earlier run of the same
-- call), {1} when the job is absent, {2} when it is not parked there.
local done = redis.call('GET', KEYS[4])
if done ~= false then return {0, done} end
local env = redis.call('HGET', KEYS[1], ARGV[1])
if env == false then return {1} end
if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then return {2} end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[5], ARGV[1])
redis.call('SET', KEYS[4], env, 'PX', tonumber(ARGV[2]))
return {0, env}
