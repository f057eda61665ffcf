-- Applies the outcomes of jobs this consumer holds, in one bucket. Each
-- outcome first takes its id out of this consumer's in-flight list; an id
-- that is not there (the reaper gave it to another consumer) or whose pool
-- entry is gone or was replaced (deleted, or deleted and added again) is
-- dropped, so a stalled consumer never acts on a job it no longer holds.
-- KEYS[1] -> pool HASH
-- KEYS[2] -> this consumer's in-flight LIST
-- KEYS[3] -> bucket ZSET
-- KEYS[4] -> unack ZSET
-- KEYS[5] -> dead ZSET
-- KEYS[6] -> reasons HASH (why each dead job died)
-- ARGV[1] -> wake channel
-- ARGV[2] -> wake message
-- ARGV[3] -> most jobs the dead set keeps
-- ARGV[4..] -> per outcome, six values: id, created ms as stored (empty:
--   do not check), op, delay ms, new header ('' keeps the stored one), and
--   for op d the reason it died. Ops:
--   a ack: remove; r rejoin: to the bucket at now+delay; f failure: like
--   rejoin with the new header; n ack and rejoin: to the bucket fresh, the
--   header after the created time given; u: park in unack; d: to the dead set.
-- Returns one value per outcome: 1 applied, 0 dropped.
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.ceil(now_us / 1000)
local n = (#ARGV - 3) / 6
local ids = {}
for i = 0, n - 1 do ids[i + 1] = ARGV[4 + i * 6] end

-- Which of the ids this consumer holds. Few outcomes: LREM each. Many: read
-- the list once and write back what stays.
local held = {}
local list = nil
if n <= 2 then
  for i = 1, n do held[i] = redis.call('LREM', KEYS[2], 1, ids[i]) == 1 end
else
  list = redis.call('LRANGE', KEYS[2], 0, -1)
  local count = {}
  for _, id in ipairs(list) do count[id] = (count[id] or 0) + 1 end
  for i = 1, n do
    local c = count[ids[i]] or 0
    held[i] = c > 0
    if c > 0 then count[ids[i]] = c - 1 end
  end
  local rest = {}
  for _, id in ipairs(list) do
    local c = count[id] or 0
    if c > 0 then
      rest[#rest + 1] = id
      count[id] = c - 1
    end
  end
  redis.call('DEL', KEYS[2])
  if #rest > 0 then redis.call('RPUSH', KEYS[2], unpack(rest)) end
end

local envs = redis.call('HMGET', KEYS[1], unpack(ids))
local out, hdel = {}, {}
local earliest, dead = nil, false
for i = 1, n do
  local base = 4 + (i - 1) * 6
  local id, created, op = ARGV[base], ARGV[base + 1], ARGV[base + 2]
  local delay, header = tonumber(ARGV[base + 3]), ARGV[base + 4]
  local env = envs[i]
  local ok = held[i] and env and (created == '' or string.match(env, '^1|(%d+)|') == created)
  out[i] = 0
  if ok then
    out[i] = 1
    if header ~= '' then
      local nl = string.find(env, '\n', 1, true)
      if op == 'n' then header = '1|' .. string.format('%d', math.floor(now_us / 1000)) .. header end
      if nl then redis.call('HSET', KEYS[1], id, header .. string.sub(env, nl + 1)) end
    end
    if op == 'a' then
      hdel[#hdel + 1] = id
    elseif op == 'r' or op == 'f' or op == 'n' then
      local due = now + delay
      redis.call('ZADD', KEYS[3], due, id)
      if earliest == nil or due < earliest then earliest = due end
    elseif op == 'u' then
      redis.call('ZADD', KEYS[4], now, id)
    elseif op == 'd' then
      redis.call('ZADD', KEYS[5], now, id)
      if ARGV[base + 5] ~= '' then redis.call('HSET', KEYS[6], id, ARGV[base + 5]) end
      dead = true
    end
  end
end
if #hdel > 0 then redis.call('HDEL', KEYS[1], unpack(hdel)) end
if earliest ~= nil then
  local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  if tonumber(first[2]) >= earliest then redis.call('PUBLISH', ARGV[1], ARGV[2]) end
end
if dead then
  -- Trim the oldest, a bounded number per call.
  local over = math.min(redis.call('ZCARD', KEYS[5]) - tonumber(ARGV[3]), 1000)
  if over > 0 then
    local old = redis.call('ZRANGE', KEYS[5], 0, over - 1)
    redis.call('HDEL', KEYS[1], unpack(old))
    redis.call('HDEL', KEYS[6], unpack(old))
    redis.call('ZREMRANGEBYRANK', KEYS[5], 0, over - 1)
  end
end
return out
