-- The fetch of the older format of the job state (keys.Bucket.State), as
-- clients of the version before the current one run it: it takes an id
-- only while its state is "r" exactly, and drops an entry in the current
-- format as stale. Only tests run it (FetchOlderFormat), to show that a
-- fleet of both versions loses nothing before the switch of format.
-- Moves at most ARGV[1] ids from a bucket's ready list into this consumer's
-- in-flight set, giving each delivery its own token, and returns them with
-- their envelopes. An id is taken only while its state is "r": entries of
-- jobs deleted, rescheduled or already taken since they were pushed are
-- stale and dropped here.
-- A job recovered ARGV[3] times or more (its consumers died while it ran,
-- more than once) is quarantined: it is taken only alone, and only by a
-- consumer running nothing else (ARGV[4] = "1"), so that if it is what
-- kills its consumers, it alone is counted for it. The fetch stops at such
-- a job otherwise, leaving it at the head of the list.
-- KEYS[1] -> ready LIST
-- KEYS[2] -> this consumer's in-flight ZSET (member "<token>:<id>" -> fetch ms)
-- KEYS[3] -> pool HASH
-- KEYS[4] -> state HASH (id -> "r" or "<token>@<consumer>"; field
--   "\0readyhead" counts the entries trimmed from the list's head)
-- KEYS[5] -> errors HASH (id -> last handler error)
-- KEYS[6] -> due HASH (id -> due ms, written by the mover; read and removed
--   here for every id the fetch consumes; not part of the delivery fence)
-- KEYS[7] -> history key prefix: the script appends this minute (server
--   clock) to it, a STRING of u32 counters written with BITFIELD (see
--   keys.Bucket.History); same hash tag, same slot
-- ARGV[1] -> most ids to fetch (at most 256)
-- ARGV[2] -> consumer id
-- ARGV[3] -> recoveries from which a job is quarantined
-- ARGV[4] -> "1" when the consumer runs nothing
-- ARGV[5] -> token base: the k-th job taken gets token base+k. The consumer
--   reserves ARGV[1] numbers from a counter of its own for each call, so
--   that no two deliveries to one consumer share a token, whatever Redis
--   lost (a restart without persistence, a failover): a counter kept in
--   Redis would start again from zero with the data. A rerun after a lost
--   reply gives the ids it takes the same tokens as the first run gave
--   others (taken ids are no longer "r"), so each member is still one
--   delivery.
-- Returns {1 when it stopped at a quarantined job, else 2 when the list
-- may hold more than it read (so that a fetch that met stale entries is
-- followed by another at once, not by the mover's next scan), else 0; then
-- per job: id, token,
-- envelope, last error or false, ms since its due time or false when the
-- mover did not record it}; nothing ({0}) while the topic is paused
-- (state field "\0paused", keys.PausedField, is set).
-- History costs one command per fetch that takes a job the mover timed (a
-- BITFIELD adding the jobs to this minute's lateness counters), plus an
-- EXPIRE when that command created the key. It runs last and with pcall: a
-- server without BITFIELD (miniredis) records no history, never a failed
-- fetch.
if redis.call('HGET', KEYS[4], '\0paused') then return {0} end
local want = tonumber(ARGV[1])
-- One entry more than it may take, to tell whether the list ends within
-- the window (ended).
local ids = redis.call('LRANGE', KEYS[1], 0, want)
if #ids == 0 then return {0} end
local ended = #ids <= want
if not ended then ids[#ids] = nil end
local states = redis.call('HMGET', KEYS[4], unpack(ids))
-- An entry whose state is not "r" is stale (its job was deleted,
-- rescheduled or taken since it was pushed). When stale entries fill part
-- of the window, the fetch reads on, 64 entries at a time and 256 in all,
-- until the window holds want live entries: a consumer with one free
-- worker then drops a run of deleted jobs in one fetch, not one a round
-- trip.
local live = 0
for i = 1, #ids do
  if states[i] == 'r' then live = live + 1 end
end
while live < want and not ended and #ids < 256 do
  local from = #ids
  local asked = math.min(64, 256 - from)
  local more = redis.call('LRANGE', KEYS[1], from, from + asked - 1)
  ended = #more < asked
  if #more == 0 then break end
  local mst = redis.call('HMGET', KEYS[4], unpack(more))
  for j = 1, #more do
    ids[#ids + 1], states[#states + 1] = more[j], mst[j]
    if mst[j] == 'r' then
      live = live + 1
      if live == want then
        ended = ended and j == #more
        break
      end
    end
  end
end
local envs = redis.call('HMGET', KEYS[3], unpack(ids))
local now = now_ms_floor()
local quarantine, idle = tonumber(ARGV[3]), ARGV[4] == '1'
local take, seen, gone = {}, {}, {}
local consumed, stopped = #ids, 0
for i, id in ipairs(ids) do
  if envs[i] and states[i] == 'r' and not seen[id] then
    local rec = tonumber(string.match(envs[i], '^1|%d+|%d+|(%d+)|') or '0')
    if rec >= quarantine then
      if #take == 0 and idle then
        take[1] = i
        consumed = i
      else
        consumed, stopped = i - 1, 1
      end
      break
    end
    seen[id] = true
    take[#take + 1] = i
  elseif not envs[i] and states[i] then
    gone[#gone + 1] = id -- a state left without its job: clear it
  end
end
-- Every read is done; now the writes, the ready list's trim last.
local out = {stopped == 1 and 1 or ((consumed < #ids or not ended) and 2 or 0)}
if #take > 0 then
  -- Only a job that failed before has a last error.
  local tids, pos = {}, {}
  for k, i in ipairs(take) do
    if not string.find(envs[i], '^1|%d+|0|') then
      tids[#tids + 1] = ids[i]
      pos[#tids] = k
    end
  end
  local errs = {}
  if #tids > 0 then
    local got = redis.call('HMGET', KEYS[5], unpack(tids))
    for j, k in ipairs(pos) do errs[k] = got[j] end
  end
  local due = {}
  for k, i in ipairs(take) do due[k] = ids[i] end
  due = redis.call('HMGET', KEYS[6], unpack(due))
  local base = tonumber(ARGV[5])
  local st, fl = {}, {}
  for k, i in ipairs(take) do
    local id = ids[i]
    local token = string.format('%d', base + k)
    st[#st + 1] = id
    st[#st + 1] = token .. '@' .. ARGV[2]
    fl[#fl + 1] = now
    fl[#fl + 1] = token .. ':' .. id
    out[#out + 1] = id
    out[#out + 1] = token
    out[#out + 1] = envs[i]
    out[#out + 1] = errs[k] or false
    out[#out + 1] = due[k] and (now - tonumber(due[k])) or false
  end
  redis.call('HSET', KEYS[4], unpack(st))
  redis.call('ZADD', KEYS[2], unpack(fl))
end
if #gone > 0 then redis.call('HDEL', KEYS[4], unpack(gone)) end
if consumed > 0 then
  -- An id consumed is taken or stale: its due time is used or void.
  redis.call('HDEL', KEYS[6], unpack(ids, 1, consumed))
  redis.call('LTRIM', KEYS[1], consumed, -1)
  -- The entries left keep their places (keys.ReadyHeadField), for List.
  redis.call('HINCRBY', KEYS[4], '\0readyhead', consumed)
end
if #take > 0 then
  -- Upper bounds in ms of the lateness counters: keys.HistLateBoundsMs.
  local bounds = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000}
  local hist, any = {}, false
  for k = 1, #take do
    local late = out[1 + 5 * k]
    if late then
      local b = #bounds + 1
      for j = 1, #bounds do
        if late <= bounds[j] then b = j break end
      end
      hist[b] = (hist[b] or 0) + 1
      any = true
    end
  end
  if any then
    local key = KEYS[7] .. string.format('%d', math.floor(now / 60000))
    local args = {'BITFIELD', key, 'OVERFLOW', 'SAT', 'INCRBY', 'u32', '#0', 1}
    for b = 1, #bounds + 1 do
      if hist[b] then
        args[#args + 1] = 'INCRBY'
        args[#args + 1] = 'u32'
        args[#args + 1] = '#' .. (2 + b)
        args[#args + 1] = hist[b]
      end
    end
    local r = redis.pcall(unpack(args))
    if type(r) == 'table' and r[1] == 1 then redis.call('EXPIRE', key, 5400) end
  end
end
return out
