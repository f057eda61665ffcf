-- Adds a job, or replaces the job of that id with it unless that one is
-- in flight: a scheduled, ready, parked or dead job of the id gives way to
-- the new one (fresh attempts and created time, new due time). A replaced
-- ready job's list entry turns stale and is dropped by the next fetch.
-- O(log n).
-- KEYS[1] -> pool HASH
-- KEYS[2] -> bucket ZSET
-- KEYS[3] -> state HASH
-- KEYS[4] -> unack ZSET
-- KEYS[5] -> dead ZSET
-- KEYS[6] -> reasons HASH
-- KEYS[7] -> op STRING: this call's reply, kept for a rerun
-- ARGV[1] -> job id
-- ARGV[2] -> its ZSET member: the id, or the broadcast mark and the id
-- ARGV[3] -> broadcast mark
-- ARGV[4] -> the envelope header after the created time, newline included
-- ARGV[5] -> body
-- ARGV[6] -> delay, ms (used when ARGV[7] is empty)
-- ARGV[7] -> absolute due time, unix ms, or empty
-- ARGV[8] -> most jobs this pool may hold
-- ARGV[9] -> wake channel
-- ARGV[10] -> wake message
-- ARGV[11] -> how long to keep the reply, ms
-- ARGV[12] -> 'dead': replace only a dead job of the id (an Add that
--             replaces dead jobs); '' or absent: any but one in flight
-- Returns {0, due ms, 1 if it replaced a job else 0} when stored (now or
-- by an earlier run of the same call), {2} when the pool is full, {3}
-- when the id is in flight, {4} when, with 'dead', the id holds a job
-- that is not dead. Nothing is written for {2}, {3} or {4}.
local done = redis.call('GET', KEYS[7])
if done ~= false then
  local due, replaced = string.match(done, '^(%d+):(%d)$')
  return {0, tonumber(due), tonumber(replaced)}
end
local us = now_us()
-- The due time and the op TTL before any write (a failed step would leave
-- the writes before it), as add.lua checks them: whole ms in plain digits,
-- as Go sends them, the due time at most MaxDueMs. What tonumber makes of
-- other strings differs between servers, a fraction would be cut to the
-- ms before it (due early), and a due time past int64 would be formatted
-- as its least value.
local due
if ARGV[7] ~= '' then
  if string.find(ARGV[7], '^%d+$') then due = tonumber(ARGV[7]) end
elseif string.find(ARGV[6], '^%d+$') then
  due = ceil_ms(us) + tonumber(ARGV[6])
end
if due == nil or due > MAX_DUE_MS then
  return redis.error_reply('put.lua: job ' .. ARGV[1] .. ': due time is no whole number of ms from 0 to ' .. MAX_DUE_MS_TEXT)
end
local ttl = tonumber(ARGV[11])
if not string.find(ARGV[11], '^%d+$') or ttl < 1 or ttl > 86400000 then
  return redis.error_reply('put.lua: op TTL ' .. ARGV[11] .. ' is no whole number of ms from 1 to a day')
end
local replaced = 0
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  if ARGV[12] == 'dead' then
    if redis.call('ZSCORE', KEYS[5], ARGV[1]) == false then return {4} end
  else
    local st = redis.call('HGET', KEYS[3], ARGV[1])
    if st ~= false and not is_ready(st) then return {3} end
  end
  replaced = 1
elseif redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[8]) then
  return {2}
end
if replaced == 1 then
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1], ARGV[3] .. ARGV[1])
  redis.call('ZREM', KEYS[4], ARGV[1])
  redis.call('ZREM', KEYS[5], ARGV[1])
  redis.call('HDEL', KEYS[6], ARGV[1])
end
local created = floor_ms(us)
redis.call('HSET', KEYS[1], ARGV[1], '1|' .. string.format('%d', created) .. ARGV[4] .. ARGV[5])
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
redis.call('ZADD', KEYS[2], due, ARGV[2])
if first[1] == nil or due < tonumber(first[2]) then
  redis.call('PUBLISH', ARGV[9], ARGV[10])
end
redis.call('SET', KEYS[7], string.format('%d', due) .. ':' .. replaced, 'PX', ttl)
return {0, due, replaced}
