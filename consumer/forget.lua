-- Removes a consumer from a topic's consumer set, but only while its entry
-- is the one the reaper read: a consumer that joined again while it was
-- being reaped stays, so that the jobs it fetched since are still
-- recovered if it dies.
-- KEYS[1] -> consumers ZSET of a topic
-- ARGV[1] -> consumer id
-- ARGV[2] -> its join time as the reaper read it, unix ms
-- Returns 1 when removed, 0 when it joined again (or is already gone).
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if s == false or tonumber(s) ~= tonumber(ARGV[2]) then return 0 end
return redis.call('ZREM', KEYS[1], ARGV[1])
