-- Forgets a consumer whose jobs a reaper recovered in full, but only while
-- its last heartbeat is still the one the reaper read, and only once that
-- heartbeat is older than twice the timeout: a fetch it sent just before
-- it died, held up on the way, has landed by then (and was recovered).
-- KEYS[1] -> alive ZSET
-- KEYS[2] -> alive topics HASH (its fields of the consumer go with it: its
--   info, and its join time too, so that its next heartbeat, should it come back, has it
--   join its topics again)
-- ARGV[1] -> consumer id
-- ARGV[2] -> its last heartbeat as the reaper read it, unix ms
-- ARGV[3] -> timeout, ms: the longer of the consumer's own and the reaper's
-- Returns 1 when forgotten (or already gone: a rerun), 0 when kept.
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if s == false then return 1 end
if tonumber(s) ~= tonumber(ARGV[2]) then return 0 end
local now = now_ms_floor()
if tonumber(s) > now - 2 * tonumber(ARGV[3]) then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1], ARGV[1] .. '#timeout', ARGV[1] .. '#joined', ARGV[1] .. '#info')
return 1
