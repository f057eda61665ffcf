-- Takes a parked (un_ack) or dead job back to its bucket.
-- KEYS[1] -> pool HASH
-- KEYS[2] -> the ZSET it is parked in (unack or dead)
-- KEYS[3] -> bucket ZSET
-- KEYS[4] -> reasons HASH
-- KEYS[5] -> op STRING: this call's reply, kept for a rerun
-- ARGV[1] -> job id
-- ARGV[2] -> delay, ms
-- ARGV[3] -> "1" to reset the job's attempts and recoveries, else ""
-- ARGV[4] -> wake channel
-- ARGV[5] -> wake message
-- ARGV[6] -> how long to keep the reply, ms
-- ARGV[7] -> the job's expected mark, "<created ms>:<parked ms>", or "" to
--            requeue whichever job of the id is parked
-- Returns 0 when requeued (now or by an earlier run of the same call), 1
-- when the job is absent, 2 when it is not parked there, 3 when the job
-- parked there is not the one marked (added again, or parked again,
-- since); the last three write nothing.
if redis.call('EXISTS', KEYS[5]) == 1 then return 0 end
local created, parked
if ARGV[7] ~= '' then
  created, parked = string.match(ARGV[7], '^(%d+):(%d+)$')
  if created == nil then
    return redis.error_reply('requeue.lua: mark ' .. ARGV[7] .. ' is not <created ms>:<parked ms>')
  end
end
local env = redis.call('HGET', KEYS[1], ARGV[1])
if env == false then return 1 end
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if score == false then return 2 end
if created and (tonumber(string.match(env, '^1|(%d+)|')) ~= tonumber(created) or tonumber(score) ~= tonumber(parked)) then
  return 3
end
local head, tail
if ARGV[3] == '1' then
  head, tail = string.match(env, '^(1|%d+|)%d+|%d+(|.*)$')
end
local due = due_in(tonumber(ARGV[2]))
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
if head then redis.call('HSET', KEYS[1], ARGV[1], head .. '0|0' .. tail) end
local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
redis.call('ZADD', KEYS[3], due, ARGV[1])
if first[1] == nil or due < tonumber(first[2]) then
  redis.call('PUBLISH', ARGV[4], ARGV[5])
end
redis.call('SET', KEYS[5], '0', 'PX', tonumber(ARGV[6]))
return 0
