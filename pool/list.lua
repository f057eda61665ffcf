-- Reads one page of the jobs of a bucket in one state, for List: at most
-- ARGV[2] jobs, from at most ARGV[3] entries of the source (plus up to 65
-- to find the previous end again in the ready list), skipping stale
-- entries: a ready-list entry counts only while state[id] is "r", an
-- in-flight member only while state[id] names its delivery.
-- KEYS[1] -> pool HASH
-- KEYS[2] -> state HASH
-- KEYS[3] -> reasons HASH
-- KEYS[4..] -> the source: the bucket, unack or dead ZSET; the ready LIST;
--              or the in-flight ZSETs of the consumers ARGV[6..], in order
-- ARGV[1] -> state: scheduled, ready, inflight, unack or dead
-- ARGV[2] -> most jobs to return
-- ARGV[3] -> most source entries to read (ARGV[2] plus a little slack)
-- ARGV[4] -> where the previous page ended in KEYS[4]: a ZSET score or a
--            LIST index; "" to start at the beginning
-- ARGV[5] -> the member (ZSET) or id (LIST) the previous page ended on
-- ARGV[6..] -> inflight: the consumer of each in-flight set KEYS[4..]
-- Returns {done, key, pos, member, id, envelope, score, extra, id, ...}:
-- done is 1 when the sources were read to their end; else key (1 for
-- KEYS[4]), pos and member say where the next page starts (after them).
-- score is the ZSET score (false for ready and in flight); extra is a
-- dead job's reason or an in-flight job's consumer, else false.
local mode = ARGV[1]
local limit = tonumber(ARGV[2])
local budget = tonumber(ARGV[3])
local pos, last = ARGV[4], ARGV[5]
local cand = {} -- {key, pos, member, id, score, token}
local done, stop = 1, false

if mode == 'ready' then
  local start = 0
  if pos ~= '' then
    -- Fetches trim the list's head: find the previous end again within
    -- the 64 places before where it was.
    local idx = tonumber(pos)
    local from = math.max(0, idx - 64)
    local back = redis.call('LRANGE', KEYS[4], from, idx)
    start = from
    for i = #back, 1, -1 do
      if back[i] == last then start = from + i; break end
    end
  end
  local ids = redis.call('LRANGE', KEYS[4], start, start + budget - 1)
  for i, id in ipairs(ids) do
    cand[#cand + 1] = {1, string.format('%d', start + i - 1), id, id, false, false}
  end
  if #ids == budget then done, stop = 0, cand[#cand] end
else
  local read = 0
  for k = 4, #KEYS do
    local left = budget - read
    if left <= 0 then
      done, stop = 0, {k - 3, '', ''} -- the next page starts at this set
      break
    end
    local start, tie = 0, false
    if k == 4 and pos ~= '' then
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
      if not (tie and tonumber(s) == tonumber(pos) and m <= last) then
        local id, token = m, false
        if mode == 'scheduled' and string.byte(m) == 1 then
          id = string.sub(m, 2) -- a broadcast job's member
        elseif mode == 'inflight' then
          token, id = string.match(m, '^(%d+):(.*)$')
        end
        if id then cand[#cand + 1] = {k - 3, s, m, id, s, token} end
      end
      stop = {k - 3, s, m}
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
      ok = ok and states[i] == 'r' and not seen[c[4]]
      seen[c[4]] = true
    elseif mode == 'inflight' then
      extra = ARGV[5 + c[1]]
      ok = ok and states[i] == c[6] .. '@' .. extra
    elseif mode == 'dead' then
      extra = reasons[i]
    end
    if ok then
      out[#out + 1] = c[4]
      out[#out + 1] = envs[i]
      out[#out + 1] = c[5]
      out[#out + 1] = extra
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
