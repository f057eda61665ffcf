-- Replaces a waiting job's envelope, and its due time when asked, only if
-- the job is still as the caller read it: a compare-and-set, so that a
-- fetch, an outcome or another change in between is never overwritten.
-- A ready job given a new due time goes back to the bucket (its stale
-- ready entry is dropped by the next fetch); without one it keeps its
-- place. O(log n).
-- KEYS[1] -> pool HASH
-- KEYS[2] -> bucket ZSET
-- KEYS[3] -> state HASH
-- KEYS[4] -> op STRING: this call's reply, kept for a rerun
-- ARGV[1] -> job id
-- ARGV[2] -> its member in the bucket ZSET (the id, or the broadcast mark and the id)
-- ARGV[3] -> SHA1 of the envelope as read
-- ARGV[4] -> where it was read: "ready" or "scheduled"
-- ARGV[5] -> its due time as read, unix ms (scheduled), else ""
-- ARGV[6] -> the new envelope
-- ARGV[7] -> new due time: "" to keep it, "at" for ARGV[8], "in" for now + ARGV[8]
-- ARGV[8] -> unix ms ("at") or ms from now ("in")
-- ARGV[9] -> wake channel
-- ARGV[10] -> wake message
-- ARGV[11] -> how long to keep the reply, ms
-- Returns 0 when written (now or by an earlier run of the same call), 1
-- when the job is absent, 2 when it is not waiting, 3 when it changed
-- since it was read.
if redis.call('EXISTS', KEYS[4]) == 1 then return 0 end
local env = redis.call('HGET', KEYS[1], ARGV[1])
if env == false then return 1 end
local st = redis.call('HGET', KEYS[3], ARGV[1])
local place, score = 'ready', false
if not is_ready(st) then
  if st ~= false then return 2 end
  score = redis.call('ZSCORE', KEYS[2], ARGV[2])
  if score == false then return 2 end
  place = 'scheduled'
end
if redis.sha1hex(env) ~= ARGV[3] or place ~= ARGV[4]
  or (score and tonumber(score) ~= tonumber(ARGV[5])) then
  return 3
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[6])
if ARGV[7] ~= '' then
  local due = tonumber(ARGV[8])
  if ARGV[7] == 'in' then
    due = due_in(due)
  end
  if place == 'ready' then redis.call('HDEL', KEYS[3], ARGV[1]) end
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  redis.call('ZADD', KEYS[2], due, ARGV[2])
  if first[1] == nil or first[1] == ARGV[2] or due < tonumber(first[2]) then
    redis.call('PUBLISH', ARGV[9], ARGV[10])
  end
end
redis.call('SET', KEYS[4], '0', 'PX', tonumber(ARGV[11]))
return 0
