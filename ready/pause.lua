-- Pauses or resumes fetching from one bucket, unless a newer Pause or
-- Resume of the topic has already reached it. The fetch script returns
-- nothing while the paused field is set.
-- KEYS[1] -> state HASH
-- ARGV[1] -> the call's number (from pausetopic.lua)
-- ARGV[2] -> "1" to pause, "" to resume
-- ARGV[3] -> paused field (keys.PausedField)
-- ARGV[4] -> number field (keys.PauseSeqField)
-- ARGV[5] -> ready channel
-- ARGV[6] -> the bucket's address
-- Returns 1 when applied (a rerun of the same call applies it again), 0
-- when a newer call had been applied.
local cur = redis.call('HGET', KEYS[1], ARGV[4])
if cur ~= false and tonumber(cur) > tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[4], ARGV[1])
if ARGV[2] == '1' then
  redis.call('HSET', KEYS[1], ARGV[3], '1')
else
  redis.call('HDEL', KEYS[1], ARGV[3])
  -- Wake the listeners now rather than at their next poll.
  redis.call('PUBLISH', ARGV[5], ARGV[6])
end
return 1
