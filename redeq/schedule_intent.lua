-- Records the ticks a pass is about to write, in the schedule's slot,
-- before their jobs: the first step of a pass. A change of the schedule
-- (put, pause, delete) ends the generation and leaves it in the stale set;
-- whoever stops its ticks reads them here, whether the pass that wrote
-- them lived or died.
-- KEYS[1] -> record HASH
-- KEYS[2] -> ticks ZSET of the generation read (tick ms -> tick ms)
-- KEYS[3] -> stale ZSET: generations whose ticks are still to be stopped
-- ARGV[1] -> generation read
-- ARGV[2..] -> the pass's tick instants, unix ms: 1 to 1024 of them
-- Returns 1 when the ticks are recorded (a rerun after a lost reply
-- records them again, the same members), -1 when the schedule was
-- changed, paused or deleted since the pass read it (nothing written: the
-- pass writes no tick), -3 when a generation ended earlier still has
-- ticks to stop (nothing written: the pass stops them first, so no job
-- of the new generation meets one of an old one of the same id).
-- The set holds the ticks not yet due at the last pass plus those of the
-- last pass (each pass removes the due ones first), so it stays within
-- two passes' ticks, whatever the schedule's age.
if #ARGV < 2 or #ARGV > 1025 then
  return redis.error_reply('schedule_intent.lua: ' .. (#ARGV - 1) .. ' ticks, want 1 to 1024')
end
for i = 2, #ARGV do
  if not string.find(ARGV[i], '^%d+$') then
    return redis.error_reply('schedule_intent.lua: tick ' .. ARGV[i] .. ' is no whole number')
  end
end
local r = redis.call('HMGET', KEYS[1], 'gen', 'paused')
if r[1] ~= ARGV[1] or r[2] == '1' then return -1 end
if redis.call('ZCARD', KEYS[3]) > 0 then return -3 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('%d', now))
local zs = {}
for i = 2, #ARGV do
  zs[#zs + 1] = ARGV[i]
  zs[#zs + 1] = ARGV[i]
end
redis.call('ZADD', KEYS[2], unpack(zs))
return 1
