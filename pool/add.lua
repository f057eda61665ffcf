-- Adds a job to its pool and its bucket, unless the id exists or the pool is full.
-- KEYS[1] -> pool HASH
-- KEYS[2] -> bucket ZSET
-- ARGV[1] -> job id
-- ARGV[2] -> ZSET member: the id, or the broadcast mark and the id
-- ARGV[3] -> the envelope header after the created time, newline included
-- ARGV[4] -> body
-- ARGV[5] -> delay, ms (used when ARGV[6] is empty)
-- ARGV[6] -> absolute due time, unix ms, or empty
-- ARGV[7] -> most jobs this pool may hold
-- ARGV[8] -> wake channel
-- ARGV[9] -> wake message, published when the job becomes the bucket's first
-- Returns {0, due ms} when added, {1} when the id exists, {2} when the pool is full.
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[7]) then
  if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return {1} end
  return {2}
end
local created = math.floor(now_us / 1000)
local env = '1|' .. string.format('%d', created) .. ARGV[3] .. ARGV[4]
if redis.call('HSETNX', KEYS[1], ARGV[1], env) == 0 then return {1} end
local due
if ARGV[6] ~= '' then
  due = tonumber(ARGV[6])
else
  -- Round now up to the next ms so the job is never due early.
  due = math.ceil(now_us / 1000) + tonumber(ARGV[5])
end
redis.call('ZADD', KEYS[2], due, ARGV[2])
-- Wake the mover when the job became the bucket's first member. Reading
-- the head after ZADD costs O(1) and returns no score to format and parse;
-- a job tied with the earliest that sorts first wakes it too, harmlessly.
if redis.call('ZRANGE', KEYS[2], 0, 0)[1] == ARGV[2] then
  redis.call('PUBLISH', ARGV[8], ARGV[9])
end
return {0, due}
