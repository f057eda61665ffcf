-- Deletes a job from its pool and from wherever it waits, in O(1) and
-- O(log n) steps, and tells where that was. A job in the ready list or in
-- flight only loses its state entry: the stale ready entry is dropped by
-- the next fetch, and the holder's outcome finds the state gone and is
-- dropped.
-- KEYS[1] -> pool HASH
-- KEYS[2] -> bucket ZSET
-- KEYS[3] -> state HASH
-- KEYS[4] -> unack ZSET
-- KEYS[5] -> dead ZSET
-- KEYS[6] -> reasons HASH
-- KEYS[7] -> op STRING: this call's reply, kept for a rerun, as
--            "<state> <length of holder> <holder><envelope>"
-- KEYS[8] -> errors HASH
-- ARGV[1] -> job id
-- ARGV[2] -> broadcast mark
-- ARGV[3] -> how long to keep the reply, ms
-- ARGV[4] -> the job's expected created time, unix ms, or "" (or absent)
--            to delete whichever job of the id there is
-- Returns {1, envelope, state, holder or ''} when deleted (now or by an
-- earlier run of the same call): state is where the job waited,
-- 'scheduled', 'ready', 'inflight', 'unack' or 'dead'; holder is the
-- "<token>@<consumer>" state entry of an in-flight job. {0} when absent,
-- {2} when the job of the id was created at another time (deleted and
-- added again since): the last two write nothing. A rerun after a lost
-- reply returns the first run's reply and writes nothing.
local done = redis.call('GET', KEYS[7])
if done ~= false then
  local sp = string.find(done, ' ', 1, true)
  local sp2 = sp and string.find(done, ' ', sp + 1, true)
  local n = sp2 and tonumber(string.sub(done, sp + 1, sp2 - 1))
  if n == nil then return {1, done, '', ''} end -- a reply kept by an older version
  return {1, string.sub(done, sp2 + 1 + n), string.sub(done, 1, sp - 1), string.sub(done, sp2 + 1, sp2 + n)}
end
local created = ARGV[4] or ''
if created ~= '' and not string.find(created, '^%d+$') then
  return redis.error_reply('delete.lua: created time ' .. created .. ' is no whole number of ms')
end
local env = redis.call('HGET', KEYS[1], ARGV[1])
if env == false then return {0} end
if created ~= '' and tonumber(string.match(env, '^1|(%d+)|')) ~= tonumber(created) then
  return {2}
end
local st = redis.call('HGET', KEYS[3], ARGV[1])
local state, holder = 'inflight', ''
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[6], ARGV[1])
redis.call('HDEL', KEYS[8], ARGV[1])
if is_ready(st) then
  state = 'ready'
  redis.call('HDEL', KEYS[3], ARGV[1])
elseif st ~= false then
  holder = st
  redis.call('HDEL', KEYS[3], ARGV[1])
elseif redis.call('ZREM', KEYS[2], ARGV[1], ARGV[2] .. ARGV[1]) > 0 then
  state = 'scheduled'
elseif redis.call('ZREM', KEYS[4], ARGV[1]) > 0 then
  state = 'unack'
elseif redis.call('ZREM', KEYS[5], ARGV[1]) > 0 then
  state = 'dead'
end
-- In no place (an outcome dropped by a deleted-then-re-added race): in
-- flight, as get.lua reports it.
redis.call('SET', KEYS[7], state .. ' ' .. #holder .. ' ' .. holder .. env, 'PX', tonumber(ARGV[3]))
return {1, env, state, holder}
