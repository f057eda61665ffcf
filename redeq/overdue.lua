-- Reads, without writing, the due time of the oldest job of a bucket that
-- is due and not started: the scheduled set's head when it is due (the
-- mover has not moved it yet), or the earliest due time the first ARGV[1]
-- ids of the ready list (moved, not fetched) carry in their states
-- ("r<due ms>"), or in the due HASH for a state of the older format (see
-- keys.Bucket.State). Ready ids without a due time (put back by crash
-- recovery or a rollback) are not counted: their due time is not kept.
-- KEYS[1] -> scheduled ZSET (id -> due ms)
-- KEYS[2] -> ready LIST
-- KEYS[3] -> state HASH
-- KEYS[4] -> due HASH (id -> due ms, written by a mover of the older format)
-- ARGV[1] -> ready ids to look at, from the head (at most 64)
-- Returns {now ms (Redis clock), oldest due ms or false when none is due}
local now = now_ms_floor()
local oldest = false
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if head[1] and tonumber(head[2]) <= now then oldest = tonumber(head[2]) end
local function seen(d)
  if d and (oldest == false or d < oldest) then oldest = d end
end
local ids = redis.call('LRANGE', KEYS[2], 0, tonumber(ARGV[1]) - 1)
if #ids > 0 then
  local states = redis.call('HMGET', KEYS[3], unpack(ids))
  local plain = {}
  for i, st in ipairs(states) do
    if st == 'r' then
      plain[#plain + 1] = ids[i]
    else
      seen(state_due(st))
    end
  end
  if #plain > 0 then
    for _, d in ipairs(redis.call('HMGET', KEYS[4], unpack(plain))) do
      if d then seen(tonumber(d)) end
    end
  end
end
return {now, oldest}
