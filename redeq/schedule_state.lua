-- Pauses, resumes or deletes a schedule.
-- KEYS[1] -> record HASH
-- KEYS[2] -> op STRING of this call
-- KEYS[3] -> stale ZSET: generations whose ticks are still to be stopped
-- ARGV[1] -> how long the op key keeps the reply, ms
-- ARGV[2] -> "pause", "resume" or "delete"
-- ARGV[3] -> resume: the generation the caller read
-- ARGV[4] -> resume: the new cursor, unix ms (the server's now it read)
-- ARGV[5] -> resume: ticks skipped while paused, up to that cursor
-- ARGV[6] -> the new generation (pause, resume): unique per call
-- ARGV[7] -> resume: the first tick after that cursor, unix ms
-- Returns "nf" when there is no record; "0" when the schedule already is
-- in that state; "retry" when a resume read a generation that changed
-- since, or reached the server after the first tick past its cursor (that
-- tick passed while paused: the caller counts again); else "1|<now ms>|<topic>|<tick ms>": the caller removes the tick's
-- job when it is still waiting (pause, delete). A pause or a resume gives
-- the schedule a new generation; a pause or a delete puts the generation
-- it ends in the stale set, whose ticks the caller (or, when it dies, a
-- pass) stops. A paused generation writes no tick, so a resume leaves
-- nothing there. A rerun after a lost reply returns the first run's
-- reply.
if #ARGV ~= 7 then return redis.error_reply('schedule_state.lua: ' .. #ARGV .. ' arguments, want 7') end
-- SET ... PX refuses 0 and what is past a day here would be no answer
-- to a rerun: checked before any write.
if not string.find(ARGV[1], '^%d+$') or #ARGV[1] > 8 or tonumber(ARGV[1]) < 1 or tonumber(ARGV[1]) > 86400000 then
  return redis.error_reply('schedule_state.lua: op TTL ' .. ARGV[1] .. ' is no whole number of ms from 1 to a day')
end
local done = redis.call('GET', KEYS[2])
if done then return done end
local r = redis.call('HMGET', KEYS[1], 'topic', 'tick', 'paused', 'gen', 'cursor', 'version', 'prevtick')
if r[1] == false then return 'nf' end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local gen = ARGV[6]
local reply = '1|' .. string.format('%d', now) .. '|' .. r[1] .. '|' .. r[2]
local function ended()
  if not r[4] then return end
  local ms = string.format('%d', now)
  redis.call('ZADD', KEYS[3], ms, r[4] .. '|' .. ms .. '|' .. r[1])
end
if ARGV[2] == 'pause' then
  if r[3] == '1' then return '0' end
  ended()
  redis.call('HSET', KEYS[1], 'paused', '1', 'gen', gen)
  if tonumber(r[5]) > now then redis.call('HSET', KEYS[1], 'cursor', string.format('%d', now)) end
  -- The waiting tick goes (the caller removes its job): the latest tick
  -- added is then the one before it.
  if tonumber(r[2]) > now then redis.call('HSET', KEYS[1], 'tick', r[7] or '0') end
elseif ARGV[2] == 'resume' then
  if r[3] ~= '1' then return '0' end
  if r[4] ~= ARGV[3] then return 'retry' end
  if not string.find(ARGV[4], '^%d+$') or not string.find(ARGV[5], '^%d+$') or not string.find(ARGV[7], '^%d+$') then
    return redis.error_reply('schedule_state.lua: cursor, skipped or next tick is no whole number')
  end
  if now >= tonumber(ARGV[7]) then return 'retry' end
  redis.call('HSET', KEYS[1], 'paused', '0', 'gen', gen, 'cursor', ARGV[4])
  redis.call('HINCRBY', KEYS[1], 'skipped', ARGV[5])
  -- The next pass that moves the cursor reports them to its observer.
  if ARGV[5] ~= '0' then redis.call('HINCRBY', KEYS[1], 'pskip', ARGV[5]) end
elseif ARGV[2] == 'delete' then
  ended()
  redis.call('DEL', KEYS[1])
else
  return redis.error_reply('schedule_state.lua: unknown action ' .. ARGV[2])
end
redis.call('SET', KEYS[2], reply, 'PX', ARGV[1])
return reply
