-- Returns to the head of the ready list every id of this consumer's
-- in-flight list that the consumer does not know it holds: ids a fetch
-- moved whose reply was lost. The ids it holds stay.
-- KEYS[1] -> this consumer's in-flight LIST
-- KEYS[2] -> ready LIST
-- ARGV[1] -> ready channel
-- ARGV[2] -> bucket address
-- ARGV[3..] -> the ids the consumer holds (with repeats, if any)
-- Returns the number of ids returned.
local list = redis.call('LRANGE', KEYS[1], 0, -1)
local keep = {}
for i = 3, #ARGV do keep[ARGV[i]] = (keep[ARGV[i]] or 0) + 1 end
local rest, back = {}, {}
for _, id in ipairs(list) do
  local k = keep[id] or 0
  if k > 0 then
    keep[id] = k - 1
    rest[#rest + 1] = id
  else
    back[#back + 1] = id
  end
end
if #back == 0 then return 0 end
redis.call('DEL', KEYS[1])
if #rest > 0 then redis.call('RPUSH', KEYS[1], unpack(rest)) end
-- LPUSH reverses, so push the oldest last: it is fetched first.
local rev = {}
for i = #back, 1, -1 do rev[#rev + 1] = back[i] end
redis.call('LPUSH', KEYS[2], unpack(rev))
redis.call('PUBLISH', ARGV[1], ARGV[2])
return #back
