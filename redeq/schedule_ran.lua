-- Moves a schedule's cursor, and its latest added tick, up to a tick that
-- had its run: a change stopped the generation that added it, whose pass
-- had not moved the cursor past it yet (its advance was late or lost), so
-- no later pass plans that tick again, nor counts it as skipped.
-- KEYS[1] -> record HASH
-- ARGV[1] -> the generation the caller read: nothing is written when the
--            record has another (changed again meanwhile) or none
-- ARGV[2] -> the tick, unix ms
-- Returns 1 when the record has that generation, 0 otherwise. Monotonic:
-- a rerun, or a second stopper, writes nothing more.
if not string.find(ARGV[2], '^%d+$') then
  return redis.error_reply('schedule_ran.lua: tick ' .. ARGV[2] .. ' is no whole number')
end
local r = redis.call('HMGET', KEYS[1], 'gen', 'cursor', 'tick')
if r[1] == false or r[1] ~= ARGV[1] then return 0 end
local tick = tonumber(ARGV[2])
if tonumber(r[2] or '0') < tick then redis.call('HSET', KEYS[1], 'cursor', ARGV[2]) end
if tonumber(r[3] or '0') < tick then redis.call('HSET', KEYS[1], 'tick', ARGV[2], 'prevtick', r[3] or '0') end
return 1
