-- Applies the outcomes of deliveries this consumer holds, in one bucket.
-- An outcome applies only when its delivery is still in this consumer's
-- in-flight set and the job's state still names that delivery (its token
-- and this consumer): a delivery the reaper took back, a job deleted
-- meanwhile (even deleted and added again), and a stale delivery of a job
-- this consumer fetched again are all dropped. The delivery's member leaves
-- the in-flight set either way.
-- KEYS[1] -> pool HASH
-- KEYS[2] -> this consumer's in-flight ZSET
-- KEYS[3] -> bucket ZSET
-- KEYS[4] -> unack ZSET
-- KEYS[5] -> dead ZSET
-- KEYS[6] -> reasons HASH (why each dead job died)
-- KEYS[7] -> state HASH
-- KEYS[8] -> errors HASH (id -> last handler error)
-- KEYS[9] -> history key prefix: the script appends this minute (server
--   clock) to it, a STRING of u32 counters written with BITFIELD (see
--   keys.Bucket.History); same hash tag, same slot
-- KEYS[12] -> limit key prefix (limits.lua): the leases of the deliveries
--   whose members leave the in-flight set are freed
-- KEYS[13] -> ready LIST (read only: whether jobs wait for a freed slot)
-- Uses limits.lua.
-- ARGV[1] -> wake channel (prefix ":wake"; a freed slot is announced on
--   the ready channel, prefix ":ready", with the same message)
-- ARGV[2] -> wake message
-- ARGV[3] -> most jobs the dead set keeps
-- KEYS[10] -> done ZSET (id -> when its record expires, ms)
-- KEYS[11] -> done records HASH (keys.Bucket.DoneJobs)
-- ARGV[4] -> consumer id
-- ARGV[5] -> retention of acked jobs, ms; 0 for none
-- ARGV[6] -> most acked jobs the done set keeps (retention on)
-- ARGV[7] -> how many of the outcomes are plain acks (k), sent first
-- ARGV[8..] -> per outcome (at most 256 in all): a plain ack (an ack of a
--   job with no last error stored) in three values: id, delivery token,
--   and how late the fetch took the job, ms after its due time ('' when
--   unknown); then every other outcome in eight values: id, delivery
--   token, op, delay ms, new header ('' keeps the stored one), for op d
--   the reason it died, the handler's error ('' for none; '-' for none
--   when the job has a last error stored, to be cleared by a or n), and
--   how late. A plain ack is an outcome like the others, in fewer
--   arguments: each argument costs the server more than the work it
--   stands for.
--   Ops: a ack: remove; r rejoin: to the bucket at
--   now+delay; f failure: like rejoin with the new header; n ack and
--   rejoin: to the bucket fresh, the header after the created time given;
--   u: park in unack; d: to the dead set.
-- Returns one value per outcome, in the order sent: 1 applied, 0 dropped.
-- History costs one command per call that applies an outcome (a BITFIELD
-- adding to this minute's processed and failed counters, and to the
-- lateness counters of the minute each delivery was fetched in, the score
-- of its in-flight member: the fetch writes no history, its consumer
-- passes the lateness on), plus an EXPIRE when that command created the
-- key; a delivery fetched in another minute than now adds a BITFIELD for
-- that minute. It runs last and with pcall: a server without BITFIELD
-- (miniredis) records no history, never a failed settle.
-- An ack reads no envelope: the state naming the delivery is the fence, and
-- only a job that goes on (rejoin, failure, park, dead) must still be in
-- the pool (with retention on, an ack reads it for the done record). A
-- typical call of acks costs eight commands, whatever the number of
-- outcomes: TIME, HMGET of the states, ZMSCORE, EXISTS of the limits'
-- running set, ZREM of the in-flight members, HDEL of the states and of
-- the pool, BITFIELD. Interpreted Lua costs the server more per outcome
-- than these commands do: no work is done per outcome that a call can do
-- once (a lease is built only in a bucket that ran under a limit, a
-- minute's name once per fetch time).
-- The outcomes as columns, checked before any write: ids, tokens, ops,
-- delays, headers, reasons, errors, lateness.
-- (Ifs, not and chains: miniredis's Lua has evaluated such chains wrong.)
local acks, rest = nil, -1
if ARGV[7] then
  if string.find(ARGV[7], '^%d+$') then acks = tonumber(ARGV[7]) end
end
if acks then rest = #ARGV - 7 - 3 * acks end
if rest < 0 or rest % 8 ~= 0 or acks + rest / 8 > 256 then
  return redis.error_reply('settle.lua: ' .. #ARGV .. ' arguments and ' .. tostring(ARGV[7]) .. ' plain acks, want 7 + 3 per plain ack + 8 per other outcome, at most 256 outcomes')
end
local n = acks + rest / 8
if n < 1 then return {} end
local ids, TOK, OP, DELAY, HDR, REASON, ERR, LATE = {}, {}, {}, {}, {}, {}, {}, {}
for i = 1, acks do
  local base = 5 + 3 * i
  ids[i], TOK[i], LATE[i] = ARGV[base], ARGV[base + 1], ARGV[base + 2]
  OP[i], DELAY[i], HDR[i], REASON[i], ERR[i] = 'a', '0', '', '', ''
end
for i = acks + 1, n do
  local base = 8 + 3 * acks + 8 * (i - acks - 1)
  ids[i], TOK[i], OP[i], DELAY[i] = ARGV[base], ARGV[base + 1], ARGV[base + 2], ARGV[base + 3]
  HDR[i], REASON[i], ERR[i], LATE[i] = ARGV[base + 4], ARGV[base + 5], ARGV[base + 6], ARGV[base + 7]
  if not string.find(DELAY[i], '^%d+$') then
    return redis.error_reply('settle.lua: outcome ' .. i .. ': delay ' .. DELAY[i] .. ' is no whole number of ms')
  end
end
local us = now_us()
local now = ceil_ms(us) -- due times and the parked and died stamps alike
local keep = tonumber(ARGV[5])
local need, nids = {}, {}
for i = 1, n do
  if keep > 0 or OP[i] ~= 'a' or HDR[i] ~= '' then
    nids[#nids + 1] = ids[i]
    need[#nids] = i
  end
end
-- Reads first: nothing below can fail after a write.
local envs = {}
if #nids > 0 then
  local got = redis.call('HMGET', KEYS[1], unpack(nids))
  for j, i in ipairs(need) do envs[i] = got[j] end
end
local states = redis.call('HMGET', KEYS[7], unpack(ids))
local all = {}
for i = 1, n do all[i] = TOK[i] .. ':' .. ids[i] end
local scores = redis.call('ZMSCORE', KEYS[2], unpack(all))
local members, ok = {}, {}
for i = 1, n do
  if scores[i] then
    members[#members + 1] = all[i]
    if states[i] == TOK[i] .. '@' .. ARGV[4] then
      -- A job that goes on must still be in the pool; an ack needs not.
      if keep <= 0 and OP[i] == 'a' and HDR[i] == '' then
        ok[i] = true
      else
        ok[i] = envs[i] ~= nil and envs[i] ~= false
      end
    end
  end
end
-- Leases exist only in a bucket that ran under a limit (limits.lua's
-- 'run'): one EXISTS, and no lease built per delivery where none can be.
local leases = nil
if #members > 0 and redis.call('EXISTS', KEYS[12] .. 'run') == 1 then
  leases = {}
  for i, m in ipairs(members) do
    local token, id = string.match(m, '^(%d+):(.*)$')
    leases[i] = limit_lease(token, ARGV[4], id)
  end
end
if #members > 0 then redis.call('ZREM', KEYS[2], unpack(members)) end
-- A failure keeps the job's earlier failures (at most 9) after it in its
-- trace, each with its time and consumer: one HMGET of the errors HASH
-- per call that applies a failure. Retention (ARGV[5] > 0): an acked
-- job's record (when, by whom, its trace, its envelope) stays in the done
-- set until now+ARGV[5], at most ARGV[6] of them (the oldest go first, at
-- most 512 a call). A rerun after a lost reply finds its deliveries gone
-- and writes nothing. Off, retention costs nothing.
local trail, failing = {}, false
for i = 1, n do
  local lasterr = ERR[i]
  if ok[i] and lasterr ~= '' and lasterr ~= '-' then failing = true end
end
if keep > 0 or failing then
  local olds = redis.call('HMGET', KEYS[8], unpack(ids))
  local function head(v, k) -- the first k failures of trace v
    local at = 1
    for _ = 1, k do
      if string.byte(v, at) ~= 31 then break end
      local comma = string.find(v, ',', at, true)
      local colon = comma and string.find(v, ':', comma, true)
      local len = colon and tonumber(string.sub(v, comma + 1, colon - 1))
      if not len then break end
      at = colon + 1 + len
    end
    return string.sub(v, 1, at - 1)
  end
  local acked = false
  for i = 1, n do
    local op, lasterr, old = OP[i], ERR[i], olds[i] or ''
    if ok[i] and lasterr ~= '' and lasterr ~= '-' then
      trail[i] = head(old, 9)
    elseif keep > 0 and ok[i] and op == 'a' then
      redis.call('HSET', KEYS[11], ids[i], string.format('%d|%d|%d\n', now, #ARGV[4], #old) .. ARGV[4] .. old .. envs[i])
      redis.call('ZADD', KEYS[10], now + keep, ids[i])
      acked = true
    end
  end
  if acked then
    local gone = redis.call('ZRANGEBYSCORE', KEYS[10], '-inf', now, 'LIMIT', 0, 512)
    local over = math.min(redis.call('ZCARD', KEYS[10]) - #gone - tonumber(ARGV[6]), 512)
    if over > 0 then
      for _, id in ipairs(redis.call('ZRANGE', KEYS[10], #gone, #gone + over - 1)) do gone[#gone + 1] = id end
    end
    if #gone > 0 then
      redis.call('ZREM', KEYS[10], unpack(gone))
      redis.call('HDEL', KEYS[11], unpack(gone))
    end
    redis.call('PEXPIRE', KEYS[10], keep)
    redis.call('PEXPIRE', KEYS[11], keep)
  end
end
local out, hdel, sdel, edel = {}, {}, {}, {}
local earliest, dead = nil, false
for i = 1, n do
  local id, op = ids[i], OP[i]
  local delay, header = tonumber(DELAY[i]), HDR[i]
  out[i] = 0
  if ok[i] then
    out[i] = 1
    sdel[#sdel + 1] = id
    if header ~= '' then
      local env = envs[i]
      local nl = string.find(env, '\n', 1, true)
      if op == 'n' then header = '1|' .. string.format('%d', floor_ms(us)) .. header end
      if nl then redis.call('HSET', KEYS[1], id, header .. string.sub(env, nl + 1)) end
    end
    local lasterr = ERR[i]
    if lasterr ~= '' and lasterr ~= '-' then
      redis.call('HSET', KEYS[8], id, string.format('\31%d@%s,%d:', now, ARGV[4], #lasterr) .. lasterr .. (trail[i] or ''))
    elseif lasterr == '-' and (op == 'a' or op == 'n') then
      edel[#edel + 1] = id -- it had failed before: its last error goes with it
    end
    if op == 'a' then
      hdel[#hdel + 1] = id
    elseif op == 'r' or op == 'f' or op == 'n' then
      local due = cap_due(now + delay)
      redis.call('ZADD', KEYS[3], due, id)
      if earliest == nil or due < earliest then earliest = due end
    elseif op == 'u' then
      redis.call('ZADD', KEYS[4], now, id)
    elseif op == 'd' then
      redis.call('ZADD', KEYS[5], now, id)
      if REASON[i] ~= '' then redis.call('HSET', KEYS[6], id, REASON[i]) end
      dead = true
    end
  end
end
if #sdel > 0 then redis.call('HDEL', KEYS[7], unpack(sdel)) end
if #hdel > 0 then redis.call('HDEL', KEYS[1], unpack(hdel)) end
if #edel > 0 then redis.call('HDEL', KEYS[8], unpack(edel)) end
if earliest ~= nil then
  local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  if tonumber(head[2]) >= earliest then redis.call('PUBLISH', ARGV[1], ARGV[2]) end
end
if dead then
  trim_dead(KEYS[5], tonumber(ARGV[3]), {KEYS[1], KEYS[6], KEYS[8]})
end
if leases then
  limit_release(KEYS[12], leases, KEYS[13], string.gsub(ARGV[1], 'wake$', 'ready'), ARGV[2], floor_ms(us), true)
end
-- The history: per minute (server clock), the outcomes applied and the
-- failures now, and the deliveries by lateness in the minute each was
-- fetched (a delivery is counted once: its member left the set above).
local bounds = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000}
-- Minutes are keyed by their text: a table keyed by numbers that large
-- is an array of that size to some Lua interpreters (miniredis's).
local minute = string.format('%d', math.floor(us / 60000000))
local hist, order, minutes = {}, {}, {}
local function counters(m)
  local h = hist[m]
  if h == nil then
    h = {}
    hist[m] = h
    order[#order + 1] = m
  end
  return h
end
for i = 1, n do
  if out[i] == 1 then
    local h = counters(minute)
    h[1] = (h[1] or 0) + 1
    local op = OP[i]
    if op == 'f' or op == 'd' then h[2] = (h[2] or 0) + 1 end
  end
  local late = scores[i] and tonumber(LATE[i])
  if late then
    local b = #bounds + 1
    for j = 1, #bounds do
      if late <= bounds[j] then b = j break end
    end
    -- The deliveries of a call were mostly fetched in the same ms: the
    -- minute of a fetch time is worked out once.
    local sc = scores[i]
    local m = minutes[sc]
    if m == nil then
      m = string.format('%d', math.floor(tonumber(sc) / 60000))
      minutes[sc] = m
    end
    local h = counters(m)
    h[2 + b] = (h[2 + b] or 0) + 1
  end
end
for _, m in ipairs(order) do
  local h = hist[m]
  local key = KEYS[9] .. m
  local args = {'BITFIELD', key, 'OVERFLOW', 'SAT', 'INCRBY', 'u32', '#0', 1}
  for c = 1, 3 + #bounds do
    if h[c] then
      args[#args + 1] = 'INCRBY'
      args[#args + 1] = 'u32'
      args[#args + 1] = '#' .. c
      args[#args + 1] = h[c]
    end
  end
  local r = redis.pcall(unpack(args))
  if type(r) == 'table' and r[1] == 1 then redis.call('EXPIRE', key, 5400) end
end
return out
