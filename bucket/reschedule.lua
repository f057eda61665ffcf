-- Gives a waiting job a new due time: a scheduled job keeps its place in the
-- bucket with a new score; a ready job goes back to the bucket.
-- KEYS[1] -> pool HASH
-- KEYS[2] -> bucket ZSET
-- KEYS[3] -> ready LIST
-- ARGV[1] -> job id
-- ARGV[2] -> broadcast mark
-- ARGV[3] -> new due time, unix ms
-- ARGV[4] -> wake channel
-- ARGV[5] -> wake message
-- Returns 0 when rescheduled, 1 when the job is absent, 2 when it is not waiting.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 1 end
local member = ARGV[1]
if redis.call('ZSCORE', KEYS[2], member) == false then
  member = ARGV[2] .. ARGV[1]
  if redis.call('ZSCORE', KEYS[2], member) == false then
    member = ARGV[1]
    if redis.call('LREM', KEYS[3], 1, member) == 0 then return 2 end
  end
end
local due = tonumber(ARGV[3])
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
redis.call('ZADD', KEYS[2], due, member)
if first[1] == nil or first[1] == member or due < tonumber(first[2]) then
  redis.call('PUBLISH', ARGV[4], ARGV[5])
end
return 0
