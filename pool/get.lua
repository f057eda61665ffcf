-- Reads a job and where it waits, in O(1) and O(log n) steps.
-- KEYS[1] -> pool HASH
-- KEYS[2] -> bucket ZSET
-- KEYS[3] -> state HASH
-- KEYS[4] -> unack ZSET
-- KEYS[5] -> dead ZSET
-- KEYS[6] -> reasons HASH
-- KEYS[7] -> errors HASH
-- ARGV[1] -> job id
-- ARGV[2] -> broadcast mark
-- Returns false when the job is absent, else {envelope, state, score or
-- false, the reason of a dead job or the holder of an in-flight one, or
-- false, the last handler error or false}.
local env = redis.call('HGET', KEYS[1], ARGV[1])
if env == false then return false end
local le = redis.call('HGET', KEYS[7], ARGV[1])
local st = redis.call('HGET', KEYS[3], ARGV[1])
if is_ready(st) then return {env, 'ready', false, false, le} end
if st ~= false then return {env, 'inflight', false, st, le} end
local s = redis.call('ZSCORE', KEYS[2], ARGV[1])
if s == false then s = redis.call('ZSCORE', KEYS[2], ARGV[2] .. ARGV[1]) end
if s ~= false then return {env, 'scheduled', s, false, le} end
s = redis.call('ZSCORE', KEYS[4], ARGV[1])
if s ~= false then return {env, 'unack', s, false, le} end
s = redis.call('ZSCORE', KEYS[5], ARGV[1])
if s ~= false then return {env, 'dead', s, redis.call('HGET', KEYS[6], ARGV[1]), le} end
-- In no place: an outcome dropped by a deleted-then-re-added race cannot
-- leave this; report it as in flight, the only transient place left.
return {env, 'inflight', false, false, le}
