-- Deletes a job from its pool and from wherever it waits. A job in flight is
-- only removed from the pool: its consumer's outcome then finds it gone and
-- drops it.
-- KEYS[1] -> pool HASH
-- KEYS[2] -> bucket ZSET
-- KEYS[3] -> ready LIST
-- KEYS[4] -> unack ZSET
-- KEYS[5] -> dead ZSET
-- KEYS[6] -> reasons HASH
-- ARGV[1] -> job id
-- ARGV[2] -> broadcast mark
-- Returns the deleted envelope, or false when the job is absent.
local env = redis.call('HGET', KEYS[1], ARGV[1])
if env == false then return false end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[6], ARGV[1])
if redis.call('ZREM', KEYS[2], ARGV[1], ARGV[2] .. ARGV[1]) == 0
  and redis.call('ZREM', KEYS[4], ARGV[1]) == 0
  and redis.call('ZREM', KEYS[5], ARGV[1]) == 0 then
  -- Ready or in flight. Removing it from ready keeps a later Add of the same
  -- id from being delivered through this stale entry before its due time.
  redis.call('LREM', KEYS[3], 1, ARGV[1])
end
return env
