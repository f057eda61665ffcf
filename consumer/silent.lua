-- Reads the heartbeats of consumers.
-- KEYS[1] -> alive ZSET
-- ARGV[1] -> timeout, ms
-- ARGV[2..] -> consumer ids (the caller sends at most aliveChunk)
-- Returns {now - timeout, then per id: 0 when it heartbeat within the
-- timeout, 1 when its last heartbeat is older, 2 when it has none}.
local t = redis.call('TIME')
local cut = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(ARGV[1])
local out = {cut}
if #ARGV < 2 then return out end
local scores = redis.call('ZMSCORE', KEYS[1], unpack(ARGV, 2))
for i = 1, #ARGV - 1 do
  local s = scores[i]
  if s == false then
    out[i + 1] = 2
  elseif tonumber(s) < cut then
    out[i + 1] = 1
  else
    out[i + 1] = 0
  end
end
return out
