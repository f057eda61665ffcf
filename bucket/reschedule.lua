-- Gives a waiting job a new due time: a scheduled job keeps its place in the
-- bucket with a new score; a ready job goes back to the bucket (its stale
-- ready entry is dropped by the next fetch). O(log n).
-- KEYS[1] -> pool HASH
-- KEYS[2] -> bucket ZSET
-- KEYS[3] -> state HASH
-- KEYS[4] -> op STRING: this call's reply, kept for a rerun
-- ARGV[1] -> job id
-- ARGV[2] -> broadcast mark
-- ARGV[3] -> new due time, unix ms, or '' to count ARGV[7] from now
--   (the server's clock)
-- ARGV[4] -> wake channel
-- ARGV[5] -> wake message
-- ARGV[6] -> how long to keep the reply, ms
-- ARGV[7] -> delay from now, ms, when ARGV[3] is ''
-- ARGV[8] -> the job's expected created time, unix ms, or "" (or absent)
--            to reschedule whichever job of the id waits

-- Returns 0 when rescheduled (now or by an earlier run of the same call),
-- 1 when the job is absent, 2 when it is not waiting, 3 when the job of
-- the id was created at another time (deleted and added again since); the
-- last three write nothing.
if redis.call('EXISTS', KEYS[4]) == 1 then return 0 end
local created = ARGV[8] or ''
if created ~= '' and not string.find(created, '^%d+$') then
  return redis.error_reply('reschedule.lua: created time ' .. created .. ' is no whole number of ms')
end
local env = redis.call('HGET', KEYS[1], ARGV[1])
if env == false then return 1 end
if created ~= '' and tonumber(string.match(env, '^1|(%d+)|')) ~= tonumber(created) then
  return 3
end
local member = ARGV[1]
if redis.call('ZSCORE', KEYS[2], member) == false then
  member = ARGV[2] .. ARGV[1]
  if redis.call('ZSCORE', KEYS[2], member) == false then
    member = ARGV[1]
    if not is_ready(redis.call('HGET', KEYS[3], member)) then return 2 end
    redis.call('HDEL', KEYS[3], member)
  end
end
local due
if ARGV[3] ~= '' then
  due = tonumber(ARGV[3])
else
  due = due_in(tonumber(ARGV[7]))
end
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
redis.call('ZADD', KEYS[2], due, member)
if first[1] == nil or first[1] == member or due < tonumber(first[2]) then
  redis.call('PUBLISH', ARGV[4], ARGV[5])
end
redis.call('SET', KEYS[4], '0', 'PX', tonumber(ARGV[6]))
return 0
