-- Reads, without writing, the due time of the oldest job of a bucket that
-- is due and not started: the scheduled set's head when it is due (the
-- mover has not moved it yet), or the earliest due time the due HASH holds
-- for the first ARGV[1] ids of the ready list (moved, not fetched). Ready
-- ids without a due time (put back by crash recovery or a rollback) are
-- not counted: their due time is not kept.
-- KEYS[1] -> scheduled ZSET (id -> due ms)
-- KEYS[2] -> ready LIST
-- KEYS[3] -> due HASH (id -> due ms, written by the mover)
-- ARGV[1] -> ready ids to look at, from the head (at most 64)
-- Returns {now ms (Redis clock), oldest due ms or false when none is due}
local now = now_ms_floor()
local oldest = false
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if head[1] and tonumber(head[2]) <= now then oldest = tonumber(head[2]) end
local ids = redis.call('LRANGE', KEYS[2], 0, tonumber(ARGV[1]) - 1)
if #ids > 0 then
  local dues = redis.call('HMGET', KEYS[3], unpack(ids))
  for _, d in ipairs(dues) do
    if d then
      d = tonumber(d)
      if oldest == false or d < oldest then oldest = d end
    end
  end
end
return {now, oldest}
