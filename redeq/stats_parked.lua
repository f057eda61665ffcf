-- Counts the jobs of a bucket that wait for a slot of their key value:
-- the ids in the park lists of its values (limits.lua) whose state still
-- says ready. An entry of a job taken out of the topic since it was
-- parked (deleted, rescheduled, replaced by Put, a bulk action) is stale
-- and not counted; nor is a second entry of an id. Read only.
-- KEYS[1] -> state HASH (keys.Bucket.State)
-- KEYS[2..] -> the park LISTs of the values counted (at most 1,000)
-- ARGV[1] -> most entries read per list
-- ARGV[2] -> most entries read in all
-- Each list's first entries are checked, up to both bounds; the entries
-- beyond them are counted as they are, stale or not. Returns {jobs
-- counted, entries counted unchecked}.
local per, budget = tonumber(ARGV[1]), tonumber(ARGV[2])
local seen, live, unchecked = {}, 0, 0
for i = 2, #KEYS do
  local len = redis.call('LLEN', KEYS[i])
  local n = math.min(len, per, budget)
  if n > 0 then
    budget = budget - n
    local got = redis.call('LRANGE', KEYS[i], 0, n - 1)
    local st = redis.call('HMGET', KEYS[1], unpack(got))
    for j, id in ipairs(got) do
      if is_ready(st[j]) and not seen[id] then
        seen[id] = true
        live = live + 1
      end
    end
  end
  unchecked = unchecked + len - n
end
return {live + unchecked, unchecked}
