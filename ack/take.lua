-- Removes a parked (un_ack or dead) job from where it is parked and from
-- its pool, and returns it.
-- KEYS[1] -> pool HASH
-- KEYS[2] -> the ZSET it is parked in (unack or dead)
-- KEYS[3] -> reasons HASH
-- KEYS[4] -> op STRING: this call's reply, kept for a rerun
-- KEYS[5] -> errors HASH
-- ARGV[1] -> job id
-- ARGV[2] -> how long to keep the reply, ms
-- ARGV[3] -> the job's expected mark, "<created ms>:<parked ms>", or "" to
--            take whichever job of the id is parked
-- Returns {0, envelope} when taken (now or by an earlier run of the same
-- call), {1} when the job is absent, {2} when it is not parked there, {3}
-- when the job parked there is not the one marked (added again, or parked
-- again, since); the last three write nothing.
local done = redis.call('GET', KEYS[4])
if done ~= false then return {0, done} end
local created, parked
if ARGV[3] ~= '' then
  created, parked = string.match(ARGV[3], '^(%d+):(%d+)$')
  if created == nil then
    return redis.error_reply('take.lua: mark ' .. ARGV[3] .. ' is not <created ms>:<parked ms>')
  end
end
local env = redis.call('HGET', KEYS[1], ARGV[1])
if env == false then return {1} end
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if score == false then return {2} end
if created and (tonumber(string.match(env, '^1|(%d+)|')) ~= tonumber(created) or tonumber(score) ~= tonumber(parked)) then
  return {3}
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[5], ARGV[1])
redis.call('SET', KEYS[4], env, 'PX', tonumber(ARGV[2]))
return {0, env}
