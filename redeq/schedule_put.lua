-- Creates or replaces a schedule's record. The same content put again
-- changes nothing (no write at all), so every instance of a service may
-- put its schedules at start-up.
-- KEYS[1] -> record HASH
-- KEYS[2] -> op STRING of this call
-- KEYS[3] -> stale ZSET: generations whose ticks are still to be stopped
-- ARGV[1] -> how long the op key keeps the reply, ms
-- ARGV[2..19] -> 9 content field/value pairs
-- ARGV[20] -> the new generation when the content changes: unique per call
-- Returns "0" when the record already held this content; else
-- "<1 created | 2 replaced>|<now ms>|<old topic>|<old tick ms>": the
-- caller removes the old tick's job when it is still waiting. A change
-- gives the schedule a new generation and moves its cursor to now (unless
-- ticks before now are still to be added: below), so the next tick
-- follows the new content; the generation it ends goes to the stale set,
-- whose ticks the caller (or, when it dies, a pass) stops. A
-- rerun after a lost reply returns the first run's reply.
if #ARGV ~= 20 then return redis.error_reply('schedule_put.lua: ' .. #ARGV .. ' arguments, want 20') end
-- SET ... PX refuses 0 and what is past a day here would be no answer
-- to a rerun: checked before any write.
if not string.find(ARGV[1], '^%d+$') or #ARGV[1] > 8 or tonumber(ARGV[1]) < 1 or tonumber(ARGV[1]) > 86400000 then
  return redis.error_reply('schedule_put.lua: op TTL ' .. ARGV[1] .. ' is no whole number of ms from 1 to a day')
end
local done = redis.call('GET', KEYS[2])
if done then return done end
local fields, pairs_ = {}, {}
for i = 1, 9 do
  fields[i] = ARGV[2 * i]
  pairs_[2 * i - 1], pairs_[2 * i] = ARGV[2 * i], ARGV[2 * i + 1]
end
local have = redis.call('HMGET', KEYS[1], unpack(fields))
local same = true
for i = 1, 9 do
  if have[i] ~= ARGV[2 * i + 1] then same = false end
end
if same then return '0' end
local t = redis.call('TIME')
local now = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local old = redis.call('HMGET', KEYS[1], 'topic', 'tick', 'prevtick', 'gen', 'cursor')
local existed = old[1] ~= false
-- The waiting tick goes (the caller removes its job): the latest tick
-- added is then the one before it.
if existed and tonumber(old[2]) > tonumber(now) then
  redis.call('HSET', KEYS[1], 'tick', old[3] or '0')
end
if existed and old[4] then
  redis.call('ZADD', KEYS[3], now, old[4] .. '|' .. now .. '|' .. old[1])
end
redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HSET', KEYS[1], unpack(pairs_))
-- The cursor stays where it is when ticks up to now are still to be added
-- (a pass of the ended generation is late, or no client ran): the new
-- generation adds them, with the new content, and the ticks missed while
-- no client ran follow the catch-up policy and are counted. Else it moves
-- to now: the ended generation's waiting tick goes, and the next tick
-- follows the new content.
-- Only within one topic: a tick the ended generation ran is marked so in
-- its topic's bucket (schedule_drop.lua), and the new generation's tick
-- in another topic would not see the mark.
local topic
for i = 1, 9 do
  if fields[i] == 'topic' then topic = ARGV[2 * i + 1] end
end
local cursor = now
if existed and old[1] == topic and old[5] and tonumber(old[5]) <= tonumber(now) then cursor = old[5] end
redis.call('HSET', KEYS[1], 'gen', ARGV[20], 'cursor', cursor)
local code = '2'
if not existed then
  code = '1'
  redis.call('HSET', KEYS[1], 'paused', '0', 'skipped', '0', 'tick', '0', 'prevtick', '0')
end
local reply = code .. '|' .. now .. '|' .. (old[1] or '') .. '|' .. (old[2] or '0')
redis.call('SET', KEYS[2], reply, 'PX', ARGV[1])
return reply
