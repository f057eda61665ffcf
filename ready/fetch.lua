-- Moves at most ARGV[1] ids from a bucket's ready list into this consumer's
-- in-flight set, giving each delivery its own token, and returns them with
-- their envelopes. An id is taken only while its state is "r": entries of
-- jobs deleted, rescheduled or already taken since they were pushed are
-- stale and dropped here.
-- KEYS[1] -> ready LIST
-- KEYS[2] -> this consumer's in-flight ZSET (member "<token>:<id>" -> fetch ms)
-- KEYS[3] -> pool HASH
-- KEYS[4] -> state HASH (id -> "r" or "<token>@<consumer>")
-- KEYS[5] -> seq STRING (delivery counter)
-- ARGV[1] -> most ids to fetch (at most 256)
-- ARGV[2] -> consumer id
-- Returns {id, token, envelope, id, token, envelope, ...}; nothing while the
-- topic is paused (state field "\0paused", keys.PausedField, is set).
if redis.call('HGET', KEYS[4], '\0paused') then return {} end
local ids = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #ids == 0 then return {} end
local envs = redis.call('HMGET', KEYS[3], unpack(ids))
local states = redis.call('HMGET', KEYS[4], unpack(ids))
local t = redis.call('TIME')
local now = math.floor((tonumber(t[1]) * 1000000 + tonumber(t[2])) / 1000)
local take, seen, gone = {}, {}, {}
for i, id in ipairs(ids) do
  if envs[i] and states[i] == 'r' and not seen[id] then
    seen[id] = true
    take[#take + 1] = i
  elseif not envs[i] and states[i] then
    gone[#gone + 1] = id -- a state left without its job: clear it
  end
end
-- Every read is done; now the writes, the ready list's trim last.
local out = {}
if #take > 0 then
  local base = redis.call('INCRBY', KEYS[5], #take) - #take
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
  end
  redis.call('HSET', KEYS[4], unpack(st))
  redis.call('ZADD', KEYS[2], unpack(fl))
end
if #gone > 0 then redis.call('HDEL', KEYS[4], unpack(gone)) end
redis.call('LTRIM', KEYS[1], #ids, -1)
return out
