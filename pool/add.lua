-- Adds jobs to one bucket's pool and ZSET, each unless its id exists or the
-- pool is full. Go sends one run for the concurrent Adds to a bucket (at
-- most 64, see rdb.NewJoiningCommitter), so the reads every job needs
-- (TIME, HLEN, the bucket's head) happen once per run, and the writes of
-- its jobs are one HSET and one ZADD.
-- KEYS[1] -> pool HASH
-- KEYS[2] -> bucket ZSET
-- KEYS[3] -> op STRING of this run: its reply, kept for a rerun
-- ARGV[1] -> most jobs this pool may hold
-- ARGV[2] -> wake channel
-- ARGV[3] -> wake message, published when a job added becomes the bucket's first
-- ARGV[4] -> how long the op key keeps the reply, ms
-- ARGV[5..] -> 6 values per job:
--   id; ZSET member (the id, or the broadcast mark and the id);
--   the envelope header after the created time, newline included; body;
--   delay, ms (used when the next is empty); absolute due time, unix ms, or empty
-- Returns one integer per job: its due time, unix ms, when added; -1 when
-- its id exists; -2 when the pool is full. A rerun of the same run (go-redis
-- sends a script again when its reply is late or lost) returns the first
-- run's reply and writes nothing: it neither reports its own jobs as
-- existing nor adds again a job that ran and was acked meanwhile.
if #ARGV < 10 or (#ARGV - 4) % 6 ~= 0 then
  return redis.error_reply('add.lua: ' .. #ARGV .. ' arguments, want 4 + 6 per job')
end
-- Go joins at most 64 jobs into a run; the bound keeps every unpack below
-- small whatever a caller sends.
if #ARGV > 4 + 6 * 256 then
  return redis.error_reply('add.lua: ' .. (#ARGV - 4) / 6 .. ' jobs in one run, at most 256')
end
local done = redis.call('GET', KEYS[3])
if done then
  local out = {}
  for v in string.gmatch(done, '[^,]+') do out[#out + 1] = tonumber(v) end
  return out
end
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local created = '1|' .. string.format('%d', math.floor(now_us / 1000))
-- Now rounded up to the next ms, so that a job is never due early.
local soon = math.ceil(now_us / 1000)
-- Every due time first: an argument that is no number fails the run
-- before it wrote anything, not after the jobs before it.
-- A due time must be a finite number: ZADD refuses NaN, after the pool
-- entry would have been written.
local dues = {}
for i = 5, #ARGV, 6 do
  local due
  if ARGV[i + 5] ~= '' then due = tonumber(ARGV[i + 5]) else due = soon + tonumber(ARGV[i + 4]) end
  if due == nil or due ~= due or due == math.huge or due == -math.huge then
    return redis.error_reply('add.lua: job ' .. ARGV[i] .. ': due time is no finite number')
  end
  dues[#dues + 1] = due
end
local room = tonumber(ARGV[1]) - redis.call('HLEN', KEYS[1])
local out, mine, added = {}, {}, false
if #ARGV == 10 then
  -- One job: HSETNX tells and writes in one command.
  local id = ARGV[5]
  if room <= 0 then
    if redis.call('HEXISTS', KEYS[1], id) == 1 then out[1] = -1 else out[1] = -2 end
  elseif redis.call('HSETNX', KEYS[1], id, created .. ARGV[7] .. ARGV[8]) == 0 then
    out[1] = -1
  else
    redis.call('ZADD', KEYS[2], dues[1], ARGV[6])
    mine[ARGV[6]] = true
    added = true
    out[1] = dues[1]
  end
else
  -- Many jobs: which ids exist, in one read; then the new jobs in one
  -- HSET and one ZADD. A command called from a script costs more than
  -- its work, so a run issues three commands, not two per job.
  local ids = {}
  for i = 5, #ARGV, 6 do ids[#ids + 1] = ARGV[i] end
  local have = redis.call('HMGET', KEYS[1], unpack(ids))
  local ours, fields, members = {}, {}, {}
  for k = 1, #ids do
    local i, id = 5 + (k - 1) * 6, ids[k]
    if have[k] or ours[id] then
      out[k] = -1 -- stored already, or earlier in this run
    elseif room <= 0 then
      out[k] = -2
    else
      room = room - 1
      ours[id] = true
      fields[#fields + 1] = id
      fields[#fields + 1] = created .. ARGV[i + 2] .. ARGV[i + 3]
      members[#members + 1] = dues[k]
      members[#members + 1] = ARGV[i + 1]
      mine[ARGV[i + 1]] = true
      out[k] = dues[k]
    end
  end
  if #fields > 0 then
    redis.call('HSET', KEYS[1], unpack(fields))
    redis.call('ZADD', KEYS[2], unpack(members))
    added = true
  end
end
-- Wake the mover when a job added became the bucket's first member: only
-- the jobs of this run were added meanwhile, so one read of the head after
-- them tells. Reading the head costs O(1) and returns no score to format
-- and parse; a job tied with the earliest that sorts first wakes it too,
-- harmlessly.
if added and mine[redis.call('ZRANGE', KEYS[2], 0, 0)[1]] then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
-- A run that added nothing wrote nothing, and a rerun of it is a run like
-- any other.
if added then
  local reply = {}
  for k, v in ipairs(out) do reply[k] = string.format('%d', v) end
  redis.call('SET', KEYS[3], table.concat(reply, ','), 'PX', ARGV[4])
end
return out
