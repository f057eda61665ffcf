-- Reads a job and where it waits.
-- KEYS[1] -> pool HASH
-- KEYS[2] -> bucket ZSET
-- KEYS[3] -> ready LIST
-- KEYS[4] -> unack ZSET
-- KEYS[5] -> dead ZSET
-- KEYS[6] -> reasons HASH
-- ARGV[1] -> job id
-- ARGV[2] -> broadcast mark
-- Returns false when the job is absent, else {envelope, state, score or
-- false, and for a dead job the reason or false}.
local env = redis.call('HGET', KEYS[1], ARGV[1])
if env == false then return false end
local s = redis.call('ZSCORE', KEYS[2], ARGV[1])
if s == false then s = redis.call('ZSCORE', KEYS[2], ARGV[2] .. ARGV[1]) end
if s ~= false then return {env, 'scheduled', s} end
s = redis.call('ZSCORE', KEYS[4], ARGV[1])
if s ~= false then return {env, 'unack', s} end
s = redis.call('ZSCORE', KEYS[5], ARGV[1])
if s ~= false then return {env, 'dead', s, redis.call('HGET', KEYS[6], ARGV[1])} end
if redis.call('LPOS', KEYS[3], ARGV[1]) ~= false then return {env, 'ready', false} end
return {env, 'inflight', false}
