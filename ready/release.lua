-- Returns to the head of the ready list the deliveries of this consumer's
-- in-flight set that the consumer does not know it holds: ids a fetch took
-- whose reply was lost. The caller lists them (it reads the set and leaves
-- out what it holds); a member no longer in the set, or whose id's state
-- no longer names this delivery, is only removed.
-- KEYS[1] -> this consumer's in-flight ZSET
-- KEYS[2] -> ready LIST
-- KEYS[3] -> state HASH (field "\0readyhead": see fetch.lua)
-- KEYS[4] -> limit key prefix (limits.lua): the leases of the members
--   removed are freed
-- KEYS[5] -> due HASH (the older format's due times, fetch.lua): an id
--   returned loses its own, if the older format left one, so that the
--   fetch that takes it again reports no lateness from an earlier job's
--   due time
-- Uses limits.lua.
-- ARGV[1] -> ready channel
-- ARGV[2] -> bucket address
-- ARGV[3] -> consumer id
-- ARGV[4..] -> in-flight members ("<token>:<id>") to return, at most 500
-- Returns the number of ids returned to the ready list.
local members = {}
for i = 4, #ARGV do members[#members + 1] = ARGV[i] end
if #members == 0 then return 0 end
local back, st, present = {}, {}, {}
for _, m in ipairs(members) do
  if redis.call('ZSCORE', KEYS[1], m) ~= false then
    present[#present + 1] = m
    local token, id = string.match(m, '^(%d+):(.*)$')
    if id and redis.call('HGET', KEYS[3], id) == token .. '@' .. ARGV[3] then
      back[#back + 1] = id
      st[#st + 1] = id
      st[#st + 1] = 'r'
    end
  end
end
if #present == 0 then return 0 end
redis.call('ZREM', KEYS[1], unpack(present))
local leases = {}
for i, m in ipairs(present) do
  local token, id = string.match(m, '^(%d+):(.*)$')
  leases[i] = limit_lease(token or '', ARGV[3], id or m)
end
limit_release(KEYS[4], leases, KEYS[2], ARGV[1], ARGV[2])
if #back > 0 then
  redis.call('HSET', KEYS[3], unpack(st))
  redis.call('HDEL', KEYS[5], unpack(back))
  -- LPUSH reverses, so push the oldest last: it is fetched first.
  local rev = {}
  for i = #back, 1, -1 do rev[#rev + 1] = back[i] end
  redis.call('LPUSH', KEYS[2], unpack(rev))
  -- The entries behind keep their places (keys.ReadyHeadField), for List.
  redis.call('HINCRBY', KEYS[3], '\0readyhead', -#back)
  redis.call('PUBLISH', ARGV[1], ARGV[2])
end
return #back
