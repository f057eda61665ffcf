-- Moves a schedule's cursor past the ticks a pass handled: the second step
-- of a tick, after its job and claim were written. It is monotonic and
-- conditional: it acts only when the record still has the generation and
-- the cursor the pass read, so two clients handling one schedule at once
-- count its skipped ticks once.
-- KEYS[1] -> record HASH
-- ARGV[1] -> generation read
-- ARGV[2] -> cursor read, unix ms
-- ARGV[3] -> new cursor, unix ms
-- ARGV[4] -> latest tick whose job the pass added, unix ms, or 0
-- ARGV[5] -> the tick before it, unix ms, or 0
-- ARGV[6] -> ticks the pass skipped
-- ARGV[7] -> this pass's token: unique per pass, the same on a rerun
-- Returns {code, paused}: code 1 when this pass moved the cursor (a rerun
-- finds its token there and writes nothing), 2 when another pass that
-- planned the same moved it to the same place (the ticks are that pass's
-- to count), 0 when another pass moved it elsewhere meanwhile, -1 when the
-- schedule was changed, paused or deleted meanwhile (another generation,
-- or no record). paused is, for code 1, the ticks that passed while the
-- schedule was paused and that no pass reported yet (a resume counts them
-- in pskip; the pass that moves the cursor next reports them, and its
-- rerun hears the same count), else 0.
if #ARGV ~= 7 then return redis.error_reply('schedule_advance.lua: ' .. #ARGV .. ' arguments, want 7') end
for i = 2, 6 do
  if not string.find(ARGV[i], '^%d+$') then
    return redis.error_reply('schedule_advance.lua: argument ' .. i .. ' ' .. ARGV[i] .. ' is no whole number')
  end
end
local r = redis.call('HMGET', KEYS[1], 'gen', 'cursor', 'tick', 'mover', 'pskip', 'moverpskip')
if r[1] ~= ARGV[1] then return {-1, 0} end
if r[2] == ARGV[3] then
  if r[4] == ARGV[7] then return {1, tonumber(r[6] or '0')} end
  return {2, 0}
end
if r[2] ~= ARGV[2] then return {0, 0} end
local paused = r[5] or '0'
redis.call('HSET', KEYS[1], 'cursor', ARGV[3], 'mover', ARGV[7], 'moverpskip', paused)
if r[5] then redis.call('HDEL', KEYS[1], 'pskip') end
if ARGV[4] ~= '0' and tonumber(ARGV[4]) > tonumber(r[3] or '0') then
  local prev = ARGV[5]
  if prev == '0' then prev = r[3] or '0' end
  redis.call('HSET', KEYS[1], 'tick', ARGV[4], 'prevtick', prev)
end
if ARGV[6] ~= '0' then redis.call('HINCRBY', KEYS[1], 'skipped', ARGV[6]) end
return {1, tonumber(paused)}
