-- The prelude: helpers every script shares, put before each script's own
-- source by script.New (internal/script), so what they decide is written
-- once. Local functions only (a script may not define globals).
--
-- The clock is the server's (TIME). A due time rounds now UP to the next
-- ms, so that a job is never due early; a time stamp (created, parked,
-- died, a heartbeat, a "since") rounds it DOWN, so that an age is never
-- overstated: the names say which.
local MAX_DUE_MS = $MAX_DUE_MS -- the last ms of the year 9999 (pool.MaxDueMs)
local MAX_DUE_MS_TEXT = '$MAX_DUE_MS'
-- now_us is the server's time in microseconds (exact in a Lua number
-- until the year 2255).
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function ceil_ms(us) return math.ceil(us / 1000) end
local function floor_ms(us) return math.floor(us / 1000) end
-- now_ms_ceil is now for a due time (never early).
local function now_ms_ceil() return ceil_ms(now_us()) end
-- now_ms_floor is now for a time stamp or an age.
local function now_ms_floor() return floor_ms(now_us()) end
-- cap_due keeps a due time at most MAX_DUE_MS.
local function cap_due(ms) return math.min(ms, MAX_DUE_MS) end
-- due_in is the due time delay_ms from now: rounded up, capped.
local function due_in(delay_ms) return cap_due(now_ms_ceil() + delay_ms) end
-- is_ready tells whether a state HASH entry is that of a ready job: "r",
-- or "r" and the due time the mover moved it at (keys.Bucket.State); a
-- delivery's entry starts with its token's digits. (An if, not an and
-- chain: miniredis's Lua has evaluated such chains wrong.)
local function is_ready(st)
  if st then return string.byte(st, 1) == 114 end
  return false
end
-- state_due is the due time a ready state entry carries ("r<due ms>"), or
-- nil for a plain "r" (the older format keeps it in the due HASH; a job
-- put back by recovery or a rollback has none) and for any other entry.
local function state_due(st)
  if st then
    if string.byte(st, 1) == 114 then
      if #st > 1 then return tonumber(string.sub(st, 2)) end
    end
  end
  return nil
end
-- trim_dead drops the oldest members of a dead ZSET past the most it
-- keeps, at most 1000 a call, with their fields in each HASH of hashes
-- (the pool, the reasons, the errors). Returns how many it dropped.
local function trim_dead(dead, most, hashes)
  local over = math.min(redis.call('ZCARD', dead) - most, 1000)
  if over <= 0 then return 0 end
  local old = redis.call('ZRANGE', dead, 0, over - 1)
  for _, h in ipairs(hashes) do redis.call('HDEL', h, unpack(old)) end
  redis.call('ZREMRANGEBYRANK', dead, 0, over - 1)
  return over
end
-- The script's own source follows.
