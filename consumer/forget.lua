-- Takes a consumer a reaper forgot out of one topic's consumer set, unless
-- it joined the set after the heartbeat the reaper forgot: it came back
-- meanwhile, and its heartbeat made it join again (see heartbeat.lua).
-- KEYS[1] -> the topic's consumer ZSET (consumer id -> join time, unix ms)
-- ARGV[1] -> consumer id
-- ARGV[2] -> its last heartbeat as the reaper read it, unix ms
-- Returns 1 when taken out (or already out: a rerun), 0 when kept.
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if s == false then return 1 end
if tonumber(s) > tonumber(ARGV[2]) then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
