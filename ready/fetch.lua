-- Moves at most ARGV[1] ids from a bucket's ready list into this consumer's
-- in-flight list and returns them with their envelopes. Ids whose job was
-- deleted meanwhile are dropped here.
-- KEYS[1] -> ready LIST
-- KEYS[2] -> this consumer's in-flight LIST
-- KEYS[3] -> pool HASH
-- ARGV[1] -> most ids to fetch
-- Returns {id, envelope, id, envelope, ...}.
local ids = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #ids == 0 then return {} end
redis.call('LTRIM', KEYS[1], #ids, -1)
local envs = redis.call('HMGET', KEYS[3], unpack(ids))
local out, held = {}, {}
for i, id in ipairs(ids) do
  if envs[i] then
    held[#held + 1] = id
    out[#out + 1] = id
    out[#out + 1] = envs[i]
  end
end
if #held > 0 then redis.call('RPUSH', KEYS[2], unpack(held)) end
return out
