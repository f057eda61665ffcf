-- Forgets a consumer whose jobs a reaper recovered in full, but only while
-- its last heartbeat is still the one the reaper read: a consumer that
-- heartbeat since stays, with whatever it fetched since.
-- KEYS[1] -> alive ZSET
-- KEYS[2] -> alive topics HASH
-- KEYS[3] -> dead HASH
-- ARGV[1] -> consumer id
-- ARGV[2] -> its last heartbeat as the reaper read it, unix ms
-- Returns 1 when forgotten (or already gone: a rerun), 0 when it heartbeat
-- again.
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if s == false then return 1 end
if tonumber(s) ~= tonumber(ARGV[2]) then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return 1
