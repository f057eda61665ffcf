-- Removes a consumer from a topic's consumer set, but only while it is
-- still silent: a consumer that heartbeat again while it was being reaped
-- stays, so that the jobs it fetched since are still recovered if it dies.
-- KEYS[1] -> consumers ZSET of a topic
-- ARGV[1] -> consumer id
-- ARGV[2] -> timeout, ms
-- Returns 1 when removed, 0 when it is alive again (or already gone).
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if s == false then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(s) > now - tonumber(ARGV[2]) then return 0 end
return redis.call('ZREM', KEYS[1], ARGV[1])
