-- Moves at most ARGV[1] ids from a bucket's ready list into this consumer's
-- in-flight set, giving each delivery its own token, and returns them with
-- their envelopes. An id is taken only while it is ready: entries of
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
-- KEYS[4] -> state HASH (id -> "r<due ms>" or "r" while ready, or
--   "<token>@<consumer>"; field "\0readyhead" counts the entries trimmed
--   from the list's head; see keys.Bucket.State; field "\0parked" names
--   the limits ids were parked under, keys.LimitParkedField)
-- KEYS[5] -> errors HASH (id -> last handler error)
-- KEYS[6] -> due HASH (the older format's due times, written by a mover of
--   that format for a plain "r" state: read for the ids taken in that
--   format, removed for the ids consumed whenever one was)
-- KEYS[7] -> limit key prefix (keys.Bucket.LimitPrefix; see limits.lua)
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
-- ARGV[6] -> the listener's limits, "max|n|per ms|header" (limits.lua),
--   or '' for none: the one check a topic without limits pays
-- ARGV[7] -> under limits, "mirror" until the namespace is at the start
--   log's format (keys.FormatStartLog), then "log" (limits.lua's
--   limit_mirror)
-- Uses limits.lua.
-- Under limits, the fetch takes no more than they allow (topic-wide) or
-- parks the jobs of a key value at its limit (per key) and records a
-- lease per delivery; its first reply value is then -1 - ms when it could
-- take nothing more until a rate allows one in that many ms.
-- Returns {1 when it stopped at a quarantined job, else 2 when the list
-- may hold more than it read (so that a fetch that met stale entries is
-- followed by another at once, not by the mover's next scan), else 0; then
-- per job: id, token,
-- envelope, last error or false, ms since its due time or false when the
-- mover did not record it}; nothing ({0}) while the topic is paused
-- (state field "\0paused", keys.PausedField, is set).
-- It reads both formats of a ready state (keys.Bucket.State), whatever the
-- format the namespace writes: jobs moved before a switch run after it.
-- A typical fetch of jobs in the current format costs eight commands,
-- whatever the number of jobs it takes: LRANGE, one HMGET of the states
-- (the pause flag and the trimmed count read with them), one HMGET of the
-- envelopes, TIME, one HSET of the states (the trimmed count written with
-- them), ZCARD and ZADD of the in-flight set (and a ZREM when the fetch
-- takes the set past 16 members, see there), and LTRIM; an HMGET of last
-- errors only when a job taken failed before; an HMGET and an HDEL of the
-- due HASH only when it consumes an entry in the older format (or a stale
-- one, whose id's due time that format may have left there). The
-- lateness of the jobs it takes goes back to the consumer, whose settle
-- counts it in this minute's history (ack/settle.lua): a fetch writes no
-- history of its own.
-- Under limits, the pause flag is read first, so that a paused topic's
-- fetch reads and writes none of them (the parked flag with it).
-- Ids parked under limits per key value are sorted again by a fetch under
-- other limits, and given back to the ready list by a fetch with none
-- (the flag comes with the states it reads; an empty list adds an HGET):
-- no id waits for a slot no limit guards. A rerun after a lost reply
-- gives back what is still parked, as the first run would have.
-- The most ids a fetch may take bounds every list it reads and unpacks
-- (the window, the parked ids it gives back): checked before any write.
local SKIPLIST_MARK = string.rep('\0', 80) -- see the ZADD below
local most = tonumber(ARGV[1])
if not most or most < 0 or most > 256 or most % 1 ~= 0 then
  return redis.error_reply('fetch.lua: ' .. ARGV[1] .. ' ids asked, want a whole number from 0 to 256')
end
local spec = limit_spec(ARGV[6])
local parked = false
if spec then
  limit_set_mode(ARGV[7])
  local f = redis.call('HMGET', KEYS[4], '\0paused', '\0parked')
  if f[1] then return {0} end
  parked = f[2]
end
local want, lwait, lk = limit_open(KEYS[7], spec, KEYS[1], KEYS[4], most, parked)
if want == 0 then return {lwait and (-1 - lwait) or 0} end
-- One entry more than it may take, to tell whether the list ends within
-- the window (ended).
local ids = redis.call('LRANGE', KEYS[1], 0, want)
if #ids == 0 and not spec and redis.call('HGET', KEYS[4], '\0parked') then
  -- Without limits, ids parked under limits per key value go back to
  -- the ready list (the one read an empty fetch adds), and are read: no
  -- limit of this listener holds them.
  if limit_unlimit(KEYS[7], KEYS[1], KEYS[4], want) > 0 then
    ids = redis.call('LRANGE', KEYS[1], 0, want)
  end
end
if #ids == 0 then return {limit_close(lk, 0)} end
local ended = #ids <= want
if not ended then ids[#ids] = nil end
local n0 = #ids
ids[n0 + 1], ids[n0 + 2], ids[n0 + 3] = '\0paused', '\0readyhead', '\0parked'
local states = redis.call('HMGET', KEYS[4], unpack(ids))
if states[n0 + 1] then return {0} end
local head = tonumber(states[n0 + 2] or '0') or 0
-- Ids parked under limits per key value, seen by a fetch without limits
-- (the flag comes with the states, at no cost): given back at the end.
if not spec then parked = states[n0 + 3] end
ids[n0 + 1], ids[n0 + 2], ids[n0 + 3] = nil, nil, nil
states[n0 + 1], states[n0 + 2], states[n0 + 3] = nil, nil, nil
-- An entry whose state is not ready ("r...") is stale (its job was deleted,
-- rescheduled or taken since it was pushed). When stale entries fill part
-- of the window, the fetch reads on, 64 entries at a time and 256 in all,
-- until the window holds want live entries: a consumer with one free
-- worker then drops a run of deleted jobs in one fetch, not one a round
-- trip.
local live = 0
for i = 1, #ids do
  if is_ready(states[i]) then live = live + 1 end
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
    if is_ready(mst[j]) then
      live = live + 1
      if live == want then
        ended = ended and j == #more
        break
      end
    end
  end
end
local envs = redis.call('HMGET', KEYS[3], unpack(ids))
-- Under limits, the time limit_open read (one TIME a fetch).
local now = lk and lk.now or now_ms_floor()
local quarantine, idle = tonumber(ARGV[3]), ARGV[4] == '1'
-- One pattern per job reads its header's attempts (a job that never
-- failed has no last error) and recoveries. Interpreted Lua costs the
-- server more per job than the commands do, so the loops below do each
-- job's work once.
-- older is the first entry that may have a due time in the due HASH: one
-- in the older format (a plain "r"), stale, without its job, or a second
-- entry of an id.
local take, seen, gone, failed = {}, {}, {}, {}
local consumed, stopped, older = #ids, 0, nil
for i, id in ipairs(ids) do
  if envs[i] and is_ready(states[i]) and not seen[id] then
    if #states[i] < 2 then older = older or i end
    local att, rec = string.match(envs[i], '^1|%d+|(%d+)|(%d+)|')
    rec = tonumber(rec or '0')
    if rec >= quarantine then
      if #take == 0 and idle then
        if not lk or limit_admit(lk, envs[i], id) then
          take[1] = i
          failed[1] = att ~= '0'
        end
        consumed = i
      else
        consumed, stopped = i - 1, 1
      end
      break
    end
    seen[id] = true
    if not lk or limit_admit(lk, envs[i], id) then
      take[#take + 1] = i
      failed[#take] = att ~= '0'
    end
  else
    older = older or i
    if not envs[i] and states[i] then
      gone[#gone + 1] = id -- a state left without its job: clear it
    end
  end
end
-- The in-flight set's size, for its encoding (see the ZADD below).
local held = 0
if #take > 0 then held = redis.call('ZCARD', KEYS[2]) end
-- Every read is done; now the writes, the ready list's trim last.
local out = {stopped == 1 and 1 or ((consumed < #ids or not ended) and 2 or 0)}
out[1] = limit_close(lk, out[1])
if #take > 0 then
  -- Only a job that failed before has a last error.
  local tids, pos = {}, {}
  for k, i in ipairs(take) do
    if failed[k] then
      tids[#tids + 1] = ids[i]
      pos[#tids] = k
    end
  end
  local errs = {}
  if #tids > 0 then
    local got = redis.call('HMGET', KEYS[5], unpack(tids))
    for j, k in ipairs(pos) do errs[k] = got[j] end
  end
  -- The older format keeps due times in the due HASH.
  local late, plain, ppos = {}, {}, {}
  for k, i in ipairs(take) do
    local due = state_due(states[i])
    if due then
      late[k] = now - due
    else
      plain[#plain + 1] = ids[i]
      ppos[#plain] = k
    end
  end
  if #plain > 0 then
    local got = redis.call('HMGET', KEYS[6], unpack(plain))
    for j, k in ipairs(ppos) do
      if got[j] then late[k] = now - tonumber(got[j]) end
    end
  end
  local base = tonumber(ARGV[5])
  -- The fetch time as text once (limit_open's, under limits): a number
  -- among a command's arguments is formatted anew for each.
  local nowtext = lk and lk.nowtext or string.format('%d', now)
  local cid = ARGV[2]
  local st, fl = {}, {}
  for k, i in ipairs(take) do
    local id = ids[i]
    local token = string.format('%d', base + k)
    st[#st + 1] = id
    st[#st + 1] = token .. '@' .. cid
    fl[#fl + 1] = nowtext
    fl[#fl + 1] = token .. ':' .. id
    if lk then limit_record(lk, token, cid, id) end
    out[#out + 1] = id
    out[#out + 1] = token
    out[#out + 1] = envs[i]
    out[#out + 1] = errs[k] or false
    out[#out + 1] = late[k] or false
  end
  if consumed > 0 then
    -- The entries left keep their places (keys.ReadyHeadField), for List.
    st[#st + 1] = '\0readyhead'
    st[#st + 1] = string.format('%d', head + consumed)
  end
  redis.call('HSET', KEYS[4], unpack(st))
  -- A consumer under load holds some 50 deliveries in its in-flight set
  -- (for 16 workers: those running and those whose acks wait for the next
  -- settle). Redis keeps a small ZSET as a listpack, where each member
  -- added scans and moves the whole set: that made this ZADD the costliest
  -- command of a drain. The fetch that takes the set past 16 members turns
  -- it into a skiplist, which Redis keeps while the set exists (a restart
  -- or a RESTORE may load it as a listpack again, until it next passes
  -- 16): a member longer than zset-max-listpack-value (64 bytes by
  -- default; no "<token>:<id>" starts with a NUL) is added with the
  -- deliveries and removed at once, so no other command ever sees it.
  local mark = false
  if held <= 16 then mark = held + #take > 16 end
  if mark then
    fl[#fl + 1] = '0'
    fl[#fl + 1] = SKIPLIST_MARK
  end
  redis.call('ZADD', KEYS[2], unpack(fl))
  if mark then redis.call('ZREM', KEYS[2], SKIPLIST_MARK) end
  limit_flush(lk)
end
if #gone > 0 then redis.call('HDEL', KEYS[4], unpack(gone)) end
if consumed > 0 then
  if #take == 0 then
    -- Only stale entries: the count of trimmed entries is written alone.
    redis.call('HSET', KEYS[4], '\0readyhead', string.format('%d', head + consumed))
  end
  -- An entry consumed in the older format, or stale, or a second entry
  -- of an id, may have a due time in the due HASH: it is used or void.
  if older and older <= consumed then redis.call('HDEL', KEYS[6], unpack(ids, 1, consumed)) end
  redis.call('LTRIM', KEYS[1], consumed, -1)
end
if parked and not spec and limit_unlimit(KEYS[7], KEYS[1], KEYS[4], want) > 0 and out[1] == 0 then
  out[1] = 2
end
return out
