-- Adds the job of one schedule tick, unless the tick is claimed: the claim
-- and the job are written together, in the job's bucket slot, so two
-- clients adding one tick collide instead of doubling it, and a claim
-- outlives its job (a tick whose job was deleted is not added again).
-- KEYS[1] -> pool HASH
-- KEYS[2] -> bucket ZSET
-- KEYS[3] -> ticks ZSET: the claims
-- ARGV[1] -> job id, "<schedule>@<tick ms>"
-- ARGV[2] -> claim member, "<job id>#<schedule generation>"
-- ARGV[3] -> tick instant = due time, unix ms, plain digits
-- ARGV[4] -> the envelope header after the created time, newline included
-- ARGV[5] -> headers block and body
-- ARGV[6] -> most jobs this pool may hold
-- ARGV[7] -> wake channel
-- ARGV[8] -> wake message
-- ARGV[9] -> how long a claim is kept after its tick (or after it was made,
--            when later), ms
-- Returns 1 when the tick stands claimed (its job added by this run or by
-- an earlier one, or a job of that id already in the pool), -2 when the
-- pool is full (nothing written). A rerun after a lost reply finds its
-- claim and returns 1 again without writing.
for i, what in pairs({[3] = 'tick', [6] = 'pool limit', [9] = 'claim keep'}) do
  if not string.find(ARGV[i], '^%d+$') then
    return redis.error_reply('schedule_tick.lua: ' .. what .. ' ' .. ARGV[i] .. ' is no whole number')
  end
end
if redis.call('ZSCORE', KEYS[3], ARGV[2]) ~= false then return 1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local claimed = string.format('%d', math.max(tonumber(ARGV[3]), now))
-- A tick whose job an ended generation of the schedule ran (or runs) had
-- its run: schedule_drop.lua marked it, and it is not added again.
if redis.call('ZSCORE', KEYS[3], ARGV[1] .. '#*') ~= false then
  redis.call('ZADD', KEYS[3], claimed, ARGV[2])
  return 1
end
-- Old claims leave a few at a time: bounded whatever the backlog.
-- A claim is kept for a while after its tick, or after it was made when
-- the tick had passed then (a missed tick run late).
local old = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', string.format('%d', now - tonumber(ARGV[9])), 'LIMIT', 0, 16)
if #old > 0 then redis.call('ZREM', KEYS[3], unpack(old)) end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('ZADD', KEYS[3], claimed, ARGV[2])
  return 1
end
if tonumber(ARGV[6]) <= redis.call('HLEN', KEYS[1]) then return -2 end
local wake = redis.call('ZCOUNT', KEYS[2], '-inf', ARGV[3]) == 0
redis.call('HSET', KEYS[1], ARGV[1], '1|' .. string.format('%d', now) .. ARGV[4] .. ARGV[5])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('ZADD', KEYS[3], claimed, ARGV[2])
if wake then redis.call('PUBLISH', ARGV[7], ARGV[8]) end
return 1
