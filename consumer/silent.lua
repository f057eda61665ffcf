-- Finds consumers silent for longer than a timeout, a page at a time.
-- A reaper recovers only the deliveries fetched up to this look's time:
-- a consumer that comes back heartbeats before it fetches again (its
-- fetch gate), so whatever it fetches after the look is newer than the
-- look, however late a stalled reaper acts on it.
-- KEYS[1] -> alive ZSET (consumer id -> last heartbeat, unix ms)
-- KEYS[2] -> alive topics HASH (consumer id -> "topic#buckets" lines;
--            consumer id .. "#timeout" -> its own ConsumerTimeout, ms)
-- ARGV[1] -> timeout, ms (the reaper's)
-- ARGV[2] -> offset of the page in the silent consumers, oldest first
-- ARGV[3] -> page size (at most 1000)
-- Returns {now, cid, last heartbeat, topics, its own timeout or '', ...}:
-- the reaper passes over one not silent for its own timeout yet.
local now = now_ms_floor()
local found = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - tonumber(ARGV[1])), 'WITHSCORES',
  'LIMIT', tonumber(ARGV[2]), tonumber(ARGV[3]))
local out = {string.format('%d', now)}
for i = 1, #found, 2 do
  out[#out + 1] = found[i]
  out[#out + 1] = found[i + 1]
  local v = redis.call('HMGET', KEYS[2], found[i], found[i] .. '#timeout')
  out[#out + 1] = v[1] or ''
  out[#out + 1] = v[2] or ''
end
return out
