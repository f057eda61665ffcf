-- Reads the done records of a bucket: jobs acked on a topic with
-- retention, each kept until its score (ack/settle.lua writes them). A
-- record whose time has passed reads as absent, trimmed or not. It only
-- reads: a rerun answers alike for the same data.
-- KEYS[1] -> done ZSET (id -> when its record expires, unix ms)
-- KEYS[2] -> done records HASH (keys.Bucket.DoneJobs)
-- ARGV[1] -> 'get' or 'list'
-- get: ARGV[2] -> job id. Returns its record, or false.
-- list: ARGV[2] -> most records (at most 1000); ARGV[3] -> the score the
--   previous page ended on ('' from the start); ARGV[4] -> its member.
--   Pages follow the ZSET's order (expiry, then member), found by rank in
--   O(log n): when the previous page's last member is still there at its
--   score, the page starts after it, else at the first member of that
--   score or later (trimming takes the lowest first, so nothing after it
--   was trimmed). Returns {done, id, score, record, id, ...}: done is 1
--   when the set was read to its end.
local now = now_ms_floor()
if ARGV[1] == 'get' then
  local s = redis.call('ZSCORE', KEYS[1], ARGV[2])
  if s == false or tonumber(s) <= now then return false end
  return redis.call('HGET', KEYS[2], ARGV[2])
end
local limit = math.min(tonumber(ARGV[2]), 1000)
local start = redis.call('ZCOUNT', KEYS[1], '-inf', now) -- expired, not yet trimmed
if ARGV[3] ~= '' then
  local s = redis.call('ZSCORE', KEYS[1], ARGV[4])
  if s ~= false and tonumber(s) == tonumber(ARGV[3]) then
    start = math.max(start, redis.call('ZRANK', KEYS[1], ARGV[4]) + 1)
  else
    start = math.max(start, redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. ARGV[3]))
  end
end
local got = redis.call('ZRANGE', KEYS[1], start, start + limit - 1, 'WITHSCORES')
local out = {1}
if #got / 2 == limit and redis.call('ZCARD', KEYS[1]) > start + limit then out[1] = 0 end
if #got == 0 then return out end
local ids = {}
for i = 1, #got, 2 do ids[#ids + 1] = got[i] end
local recs = redis.call('HMGET', KEYS[2], unpack(ids))
for i = 1, #ids do
  out[#out + 1] = ids[i]
  out[#out + 1] = got[2 * i]
  out[#out + 1] = recs[i]
end
return out
