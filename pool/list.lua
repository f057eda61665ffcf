-- Reads one page of the jobs of a bucket in one state, for List: at most
-- ARGV[2] jobs, from at most ARGV[3] entries of the source, skipping stale
-- entries: a ready-list entry counts only while state[id] is ready ("r..."), an
-- in-flight member only while state[id] names its delivery.
-- A page resumes after the entry the previous one ended on, found by what
-- does not change while the entry waits: in a ZSET its score and member
-- (or, when it left, the first entry after them in ZSET order); in the
-- ready list its place, its index plus the count of entries trimmed from
-- the head less those pushed back there (state field "\0readyhead",
-- keys.ReadyHeadField). Only the ends of a ready list change, so an entry
-- keeps its place while it waits, and the page reads from the first place
-- after the previous end in one LRANGE, whatever happened at the head.
-- KEYS[1] -> pool HASH
-- KEYS[2] -> state HASH
-- KEYS[3] -> reasons HASH
-- KEYS[4] -> errors HASH (id -> last handler error)
-- KEYS[5..] -> the source: the bucket, unack or dead ZSET; the ready LIST
--              and the limit key prefix (limits.lua: the jobs parked for
--              a slot of their key value are ready, listed after the
--              list); or the in-flight ZSETs of the consumers ARGV[6..],
--              in order
-- ARGV[1] -> state: scheduled, ready, inflight, unack or dead; with a
--            trailing "!", each envelope is cut to its header line (no
--            headers, no body: what a filter on the job's fields needs)
-- ARGV[2] -> most jobs to return
-- ARGV[3] -> most source entries to read (ARGV[2] plus a little slack)
-- ARGV[4] -> where the previous page ended in KEYS[5]: a ZSET score or a
--            ready-list place; "" to start at the beginning
-- ARGV[5] -> the member the previous page ended on (ZSETs)
-- ARGV[6..] -> inflight: the consumer of each in-flight set KEYS[5..];
--            ready: 1 to start in the ready list, 2 among the parked jobs
--            (then ARGV[5] is the key value, ARGV[4] the place in its list)
-- Returns {done, key, pos, member, id, envelope, score, extra, lasterr,
-- id, ...}: done is 1 when the sources were read to their end; else key
-- (1 for KEYS[5]), pos and member say where the next page starts (after
-- them). score is the ZSET score (false for ready): the due time, when
-- the job was parked, or, in flight, when its delivery was fetched; extra is
-- a dead job's reason or an in-flight job's consumer, else false; lasterr
-- the job's last handler error or false. It only reads: a rerun answers
-- alike for the same data.
local mode, heads = ARGV[1], false
if string.sub(mode, -1) == '!' then mode, heads = string.sub(mode, 1, -2), true end
local limit = tonumber(ARGV[2])
local budget = tonumber(ARGV[3])
local pos, last = ARGV[4], ARGV[5]
local first = 5
local cand = {} -- {key, pos, member, id, score, token}
local done, stop = 1, false

-- after reports that ZSET member a sorts after b among equal scores: byte
-- order, as Redis sorts them (Lua's < follows the server's locale).
local function after(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x > y end
  end
  return #a > #b
end

if mode == 'ready' then
  local set = tonumber(ARGV[6] or '1')
  if set == 1 then
    local head = tonumber(redis.call('HGET', KEYS[2], '\0readyhead') or '0')
    local start = 0
    if pos ~= '' then
      -- Entries before that place were taken since, or pushed back at the
      -- head after the previous page: not this listing's.
      start = math.max(0, tonumber(pos) + 1 - head)
    end
    local ids = redis.call('LRANGE', KEYS[first], start, start + budget - 1)
    for i, id in ipairs(ids) do
      cand[#cand + 1] = {1, string.format('%d', head + start + i - 1), id, id, false, false}
    end
    if #ids == budget then done, stop = 0, cand[#cand] end
    pos, last = '', ''
  end
  -- Then the jobs parked for a slot of their key value (limits.lua), value
  -- by value in byte order, each value's oldest first; a place is an
  -- entry's index plus the entries trimmed from its list's head.
  local p = KEYS[first + 1]
  if done == 1 and p then
    local vals = redis.call('ZRANGEBYLEX', p .. 'pvals', last == '' and '-' or ('[' .. last), '+', 'LIMIT', 0, 8)
    for vi, v in ipairs(vals) do
      local left = budget - #cand
      if left <= 0 then
        done, stop = 0, {2, '', v} -- the next page starts at this value
        break
      end
      local head = tonumber(redis.call('HGET', p .. 'phead', v) or '0')
      local start = 0
      if v == last and pos ~= '' then start = math.max(0, tonumber(pos) + 1 - head) end
      local ids = redis.call('LRANGE', p .. 'park:' .. v, start, start + left - 1)
      for i, id in ipairs(ids) do
        cand[#cand + 1] = {2, string.format('%d', head + start + i - 1), v, id, false, false}
      end
      if #ids == left then
        done, stop = 0, cand[#cand]
        break
      end
      if vi == 8 then done, stop = 0, {2, '', v .. '\0'} end -- after v: its successor in byte order
    end
  end
else
  local read = 0
  for k = first, #KEYS do
    local left = budget - read
    if left <= 0 then
      done, stop = 0, {k - first + 1, '', ''} -- the next page starts at this set
      break
    end
    local start, tie = 0, false
    if k == first and pos ~= '' then
      local s = redis.call('ZSCORE', KEYS[k], last)
      if s ~= false and tonumber(s) == tonumber(pos) then
        start = redis.call('ZRANK', KEYS[k], last) + 1
      else
        -- The previous end left: restart at its score, skip the ties before it.
        start, tie = redis.call('ZCOUNT', KEYS[k], '-inf', '(' .. pos), true
      end
    end
    local z = redis.call('ZRANGE', KEYS[k], start, start + left - 1, 'WITHSCORES')
    for i = 1, #z, 2 do
      local m, s = z[i], z[i + 1]
      read = read + 1
      if not (tie and tonumber(s) == tonumber(pos) and not after(m, last)) then
        local id, token = m, false
        if mode == 'scheduled' and string.byte(m) == 1 then
          id = string.sub(m, 2) -- a broadcast job's member
        elseif mode == 'inflight' then
          token, id = string.match(m, '^(%d+):(.*)$')
        end
        local score = s
        if id then cand[#cand + 1] = {k - first + 1, s, m, id, score, token} end
      end
      stop = {k - first + 1, s, m}
    end
    if #z / 2 == left then
      done = 0
      break
    end
    stop = false
  end
end

local out = {done, false, false, false}
if #cand > 0 then
  local ids = {}
  for i, c in ipairs(cand) do ids[i] = c[4] end
  local envs = redis.call('HMGET', KEYS[1], unpack(ids))
  local errs = redis.call('HMGET', KEYS[4], unpack(ids))
  local states, reasons = {}, {}
  if mode == 'ready' or mode == 'inflight' then
    states = redis.call('HMGET', KEYS[2], unpack(ids))
  elseif mode == 'dead' then
    reasons = redis.call('HMGET', KEYS[3], unpack(ids))
  end
  local seen, jobs = {}, 0
  for i, c in ipairs(cand) do
    local ok, extra = envs[i] ~= false, false
    if mode == 'ready' then
      if not is_ready(states[i]) or seen[c[4]] then ok = false end
      seen[c[4]] = true
    elseif mode == 'inflight' then
      extra = ARGV[5 + c[1]]
      ok = ok and states[i] == c[6] .. '@' .. extra
    elseif mode == 'dead' then
      extra = reasons[i]
    end
    if ok then
      out[#out + 1] = c[4]
      if heads then
        out[#out + 1] = string.sub(envs[i], 1, string.find(envs[i], '\n', 1, true) or #envs[i])
      else
        out[#out + 1] = envs[i]
      end
      out[#out + 1] = c[5]
      out[#out + 1] = extra
      out[#out + 1] = errs[i]
      jobs = jobs + 1
      if jobs == limit and i < #cand then
        done, stop = 0, c
        break
      end
    end
  end
end
out[1] = done
if done == 0 then
  out[2], out[3], out[4] = stop[1], stop[2], stop[3]
end
return out
