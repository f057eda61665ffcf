-- Lists retired topics, oldest first, each with whether it was retired
-- long enough ago to be forgotten.
-- KEYS[1] -> retired ZSET (topic -> when retired, unix ms)
-- ARGV[1] -> age, ms, after which a retired topic may be forgotten
-- ARGV[2] -> most topics to return
-- Returns {topic, 1 when older than ARGV[1] else 0, ...}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local r = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1, 'WITHSCORES')
local out = {}
for i = 1, #r, 2 do
  out[#out + 1] = r[i]
  if tonumber(r[i + 1]) <= now - tonumber(ARGV[1]) then out[#out + 1] = 1 else out[#out + 1] = 0 end
end
return out
