-- Removes at most ARGV[1] of the oldest jobs of a bucket's dead set, with
-- their envelopes, reasons and last errors.
-- KEYS[1] -> pool HASH
-- KEYS[2] -> dead ZSET
-- KEYS[3] -> reasons HASH
-- KEYS[4] -> errors HASH
-- KEYS[5] -> op STRING: this call's reply, kept for a rerun
-- ARGV[1] -> most jobs to remove (at most 500)
-- ARGV[2] -> how long to keep the reply, ms
-- Returns how many jobs it removed (an earlier run of the same call: its
-- count, removing nothing more).
local done = redis.call('GET', KEYS[5])
if done ~= false then return tonumber(done) end
local ids = redis.call('ZRANGE', KEYS[2], 0, tonumber(ARGV[1]) - 1)
if #ids > 0 then
  redis.call('HDEL', KEYS[1], unpack(ids))
  redis.call('HDEL', KEYS[3], unpack(ids))
  redis.call('HDEL', KEYS[4], unpack(ids))
  redis.call('ZREM', KEYS[2], unpack(ids))
end
redis.call('SET', KEYS[5], #ids, 'PX', tonumber(ARGV[2]))
return #ids
