-- Adds jobs to one bucket's pool and ZSET, each unless its id exists or the
-- pool is full. Go sends one run for the concurrent Adds to a bucket (at
-- most 64, see rdb.NewJoiningCommitter) or for the jobs of a bucket in an
-- AddMany chunk (at most 256), so the reads every job needs
-- (TIME, HLEN, the count before the earliest due time) happen once per
-- run, and the writes of its jobs are one ZADD and one HSET.
-- KEYS[1] -> pool HASH
-- KEYS[2] -> bucket ZSET
-- KEYS[3] -> op STRING of the caller's lane: "<run number>|<reply>" of the
--            latest run on it that added a job (one run at a time uses a
--            lane, and the numbers of the runs on a lane grow)
-- ARGV[1] -> most jobs this pool may hold
-- ARGV[2] -> wake channel
-- ARGV[3] -> wake message, published when a job added becomes the bucket's first
-- ARGV[4] -> how long the op key keeps the reply, ms
-- ARGV[5] -> this run's number, plain digits
-- ARGV[6..] -> 6 values per job:
--   id; ZSET member (the id, or the broadcast mark and the id);
--   the envelope header after the created time, newline included; body;
--   delay, ms (used when the next is empty); absolute due time, unix ms, or
--   empty; both in plain digits, the due time at most MaxDueMs, else the run
--   fails before it writes
-- Returns one integer per job: its due time, unix ms, when added; -1 when
-- its id exists; -2 when the pool is full. A rerun of the same run (go-redis
-- sends a script again when its reply is late or lost) returns the first
-- run's reply and writes nothing (a run of one job leaves the lane's record
-- as it was, its TTL renewed): it neither reports its own jobs as existing
-- nor adds again a job that ran and was acked meanwhile. A copy of a run
-- that arrives after a later run on its lane (its caller has long had its
-- answer or an error) fails and writes nothing either.
if #ARGV < 11 or (#ARGV - 5) % 6 ~= 0 then
  return redis.error_reply('add.lua: ' .. #ARGV .. ' arguments, want 5 + 6 per job')
end
-- Go joins at most 256 jobs into a run; the bound keeps every unpack below
-- small whatever a caller sends.
if #ARGV > 5 + 6 * 256 then
  return redis.error_reply('add.lua: ' .. (#ARGV - 5) / 6 .. ' jobs in one run, at most 256')
end
-- The run number as digits, compared as digits: no float rounds it.
local seq = ARGV[5]
if not string.find(seq, '^%d+$') or #seq > 20 then
  return redis.error_reply('add.lua: run number ' .. seq .. ' is no whole number')
end
seq = string.gsub(seq, '^0+(%d)', '%1')
-- The op TTL too, before any write: SET refusing it after the jobs were
-- written would leave them without their op record, and a rerun would
-- report them as existing.
-- The bound is a day, far above what Go sends and below what any server
-- keeps (miniredis overflows past some 292 years).
local ttl = tonumber(ARGV[4])
if not string.find(ARGV[4], '^%d+$') or ttl < 1 or ttl > 86400000 then
  return redis.error_reply('add.lua: op TTL ' .. ARGV[4] .. ' is no whole number of ms from 1 to a day')
end
-- The pool's limit likewise: a run that failed on it after a write would
-- have written part of what it should.
local limit = tonumber(ARGV[1])
if not string.find(ARGV[1], '^%d+$') then
  return redis.error_reply('add.lua: pool limit ' .. ARGV[1] .. ' is no whole number')
end
-- The server's time, stamped and rounded as the prelude's now_us,
-- floor_ms and ceil_ms do it, written out: every function a script
-- defines is a closure made anew at each run, which cost a lone Add more
-- than a command (the one-job path below makes one, first_reply).
local t = redis.call('TIME')
local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local created = '1|' .. string.format('%d', math.floor(us / 1000))
local soon = math.ceil(us / 1000)
local n = (#ARGV - 5) / 6
-- first_reply returns the reply kept in the lane's record rec for a
-- rerun of this run, nil for a run like any other, or an error reply for
-- a copy of a run older than the lane's latest. A lane whose latest run
-- added nothing holds an older number, and a rerun of that run is a run
-- like any other.
local function first_reply(rec)
  if not rec then return nil end
  local last, done = string.match(rec, '^(%d+)|(.*)$')
  if last == seq then
    local out = {}
    for v in string.gmatch(done, '[^,]+') do out[#out + 1] = tonumber(v) end
    return out
  end
  if last and (#last > #seq or (#last == #seq and last > seq)) then
    return redis.error_reply('add.lua: run ' .. seq .. ' is older than run ' .. last .. ' of its lane: a stale copy, not run')
  end
  return nil
end
-- Wake-ups: a run whose earliest new job is due before every job of the
-- bucket's ZSET (ZCOUNT up to its due time is 0, before the ZADD) is due
-- earlier than the mover sleeps, and wakes it. A job due at the same time
-- as the earliest does not: the mover wakes then anyway and moves all
-- that is due, and a burst of jobs due at one time (a batch scheduled "at
-- 9:00") publishes once, not once a job. ZCOUNT is O(log n) and answers
-- an integer: reading the head with its score cost more (the score is
-- formatted as a string for the script and parsed back).
if n == 1 then
  -- One job, the run of a lone Add (most runs): no tables, and six
  -- commands with TIME. A command called from a script costs more than its
  -- work, so the lane's record is read and written by one SET ... GET, the
  -- run's first write, with the reply of a run that adds its job (which it
  -- cannot know yet); a run that does not add puts back the record as it
  -- was (a rerun's due time after a delay is not the first run's, a
  -- refused run leaves nothing behind, and a rerun of it is a run like any
  -- other), with its TTL renewed. A full pool is answered before it, by
  -- reads alone (GET of the record, for a rerun whose job filled the pool;
  -- HEXISTS), so that a server refusing writes (maxmemory with
  -- noeviction, min-replicas-to-write) still answers it; that server
  -- refuses the SET, and the run then answers a rerun from the record by a
  -- read, and fails any other run before any write. The writes after the SET
  -- cannot fail: once a script wrote, the server no longer refuses its
  -- writes for maxmemory, and HSETNX and ZADD of a due time in plain
  -- digits fail only on keys of the wrong type, which Go never makes.
  -- Its due time, as due_of below works it out (see there), written out.
  local due, s = nil, ARGV[11]
  if s ~= '' then
    if string.find(s, '^%d+$') then due = tonumber(s) end
  else
    if string.find(ARGV[10], '^%d+$') then due = soon + tonumber(ARGV[10]) end
    s = nil
  end
  if due == nil or due > MAX_DUE_MS then
    return redis.error_reply('add.lua: job ' .. ARGV[6] .. ': due time is no whole number of ms from 0 to ' .. MAX_DUE_MS_TEXT)
  end
  s = s or string.format('%d', due)
  local id = ARGV[6]
  if limit <= redis.call('HLEN', KEYS[1]) then
    local first = first_reply(redis.call('GET', KEYS[3]))
    if first then return first end
    if redis.call('HEXISTS', KEYS[1], id) == 1 then return {-1} end
    return {-2}
  end
  local mine = seq .. '|' .. s
  local rec = redis.pcall('SET', KEYS[3], mine, 'PX', ttl, 'GET')
  if type(rec) == 'table' then
    -- Refused (OOM, NOREPLICAS), so nothing is written: a rerun still
    -- answers from the record, read by GET (the first run's own job may
    -- be what pushed the server over maxmemory); any other run fails here.
    local first = first_reply(redis.call('GET', KEYS[3]))
    if first then return first end
    return rec
  end
  local first = first_reply(rec) -- a rerun, or a stale copy
  if not first then
    if redis.call('HSETNX', KEYS[1], id, created .. ARGV[8] .. ARGV[9]) == 1 then
      local wake = redis.call('ZCOUNT', KEYS[2], '-inf', s) == 0
      redis.call('ZADD', KEYS[2], s, ARGV[7])
      if wake then
        redis.call('PUBLISH', ARGV[2], ARGV[3])
      end
      return {due}
    end
    first = {-1}
  end
  -- Added nothing: the lane's record as it was.
  if not rec then
    redis.call('DEL', KEYS[3])
  elseif rec ~= mine then
    redis.call('SET', KEYS[3], rec, 'PX', ttl)
  end
  return first
end
-- Every due time first: an argument that is no due time fails the run
-- before it wrote anything, not after the jobs before it. A delay and an
-- absolute due time are whole ms in plain digits, as Go sends them, and
-- the due time is at most MaxDueMs: what tonumber makes of other strings
-- differs between servers (exponents, hex, spaces), a fraction would be
-- cut to the ms before it (due early), a due time past int64 formats as
-- its least value (due at once), and one before the epoch could read as
-- -1 or -2 in the reply. due_of returns the due time of the job whose
-- arguments start at ARGV[i] as a number, for the reply and the wake-up, and
-- as the string ZADD and the op record take (the absolute due time as
-- sent, else formatted once), or nil. Interpreted Lua costs more here than
-- the commands (a string.format or a table insertion per job counts), so
-- the run does no per-job work twice.
local function due_of(i)
  local due, s = nil, ARGV[i + 5]
  if s ~= '' then
    if string.find(s, '^%d+$') then due = tonumber(s) end
  else
    s = ARGV[i + 4]
    if string.find(s, '^%d+$') then due = soon + tonumber(s) end
    s = nil
  end
  if due == nil or due > MAX_DUE_MS then return nil end
  return due, s or string.format('%d', due)
end
local function bad_due(i)
  return redis.error_reply('add.lua: job ' .. ARGV[i] .. ': due time is no whole number of ms from 0 to ' .. MAX_DUE_MS_TEXT)
end
-- A joined run reads the lane's record first (GET is a read: a server
-- that refuses writes still answers it) and writes it last, only when
-- the run added a job.
do
  local first = first_reply(redis.call('GET', KEYS[3]))
  if first then return first end
end
-- Many jobs, a joined run.
local dues, dstr, ids = {}, {}, {}
for k = 1, n do
  local i = k * 6
  local due, s = due_of(i)
  if due == nil then return bad_due(i) end
  dues[k], dstr[k], ids[k] = due, s, ARGV[i]
end
local room = limit - redis.call('HLEN', KEYS[1])
-- Which ids exist, in one read; then the new jobs in one ZADD and one
-- HSET (ZADD first: it checks every score before it writes, so a run it
-- refused wrote nothing). A command called from a script costs more than
-- its work, so a run issues a fixed number of commands, not two per job.
local have = redis.call('HMGET', KEYS[1], unpack(ids))
local out, least, lstr = {}, nil, nil
local ours, fields, members, nf = {}, {}, {}, 0
for k = 1, n do
  local i, id = k * 6, ids[k]
  if have[k] or ours[id] then
    out[k] = -1 -- stored already, or earlier in this run
  elseif room <= 0 then
    out[k] = -2
  else
    room = room - 1
    ours[id] = true
    nf = nf + 2
    fields[nf - 1], fields[nf] = id, created .. ARGV[i + 2] .. ARGV[i + 3]
    members[nf - 1], members[nf] = dstr[k], ARGV[i + 1]
    if least == nil or dues[k] < least then least, lstr = dues[k], dstr[k] end
    out[k] = dues[k]
  end
end
-- A run that added nothing wrote nothing, and a rerun of it is a run like
-- any other.
if least ~= nil then
  local wake = redis.call('ZCOUNT', KEYS[2], '-inf', lstr) == 0
  redis.call('ZADD', KEYS[2], unpack(members))
  redis.call('HSET', KEYS[1], unpack(fields))
  if wake then
    redis.call('PUBLISH', ARGV[2], ARGV[3])
  end
  local reply = {}
  for k = 1, n do
    if out[k] == -1 or out[k] == -2 then reply[k] = out[k] == -1 and '-1' or '-2' else reply[k] = dstr[k] end
  end
  redis.call('SET', KEYS[3], seq .. '|' .. table.concat(reply, ','), 'PX', ttl)
end
return out
