-- Renews a consumer's lease on one bucket: the lease ends ARGV[1] ms from
-- now by this node's clock, and the key expires with it. recover.lua
-- compares the end with the same node's clock, so no two clocks meet, and
-- the end holds where keys do not expire by themselves (an embedded
-- server whose clock a test moves). A rerun after a lost reply renews it
-- again from the rerun's time: a lease that lasts a little longer.
-- KEYS[1] -> the consumer's lease on the bucket, STRING (end, unix ms)
-- ARGV[1] -> its ConsumerTimeout, ms
-- Returns the end of the lease, unix ms.
local ttl = tonumber(ARGV[1])
local ends = now_ms_floor() + ttl
redis.call('SET', KEYS[1], string.format('%d', ends), 'PX', ttl)
return ends
