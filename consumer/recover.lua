-- Returns at most ARGV[2] deliveries of one consumer's in-flight set of one
-- bucket to where they can run again. A delivery counts only while the
-- job's state still names it (token and consumer); any other member (the
-- job was deleted, re-added, or handed to someone else) is just removed.
--   mode "recover" (the consumer went silent): each job counts a recovery
--   and goes to the ready list; one recovered more than ARGV[3] times is
--   poison and goes to the dead set. Nothing is done while the set's newest
--   delivery is younger than ARGV[9] ms (the consumer fetched recently, so
--   it is alive: it came back while being reaped), nor while the
--   consumer's lease on this bucket (KEYS[10]) lasts: it still reaches
--   this node and runs these jobs, though the alive set's node may not
--   hear it. Checked here, with the read of the set, so that no renewal
--   lands between the check and the recovery. No lease key (a client that
--   never renews one) is no lease.
--   mode "rollback" (the consumer shuts down): each job goes back to its
--   bucket due now, nothing counted.
-- KEYS[1] -> the consumer's in-flight ZSET ("<token>:<id>" -> fetch ms)
-- KEYS[2] -> ready LIST
-- KEYS[3] -> pool HASH
-- KEYS[4] -> bucket ZSET
-- KEYS[5] -> dead ZSET
-- KEYS[6] -> reasons HASH (why each dead job died)
-- KEYS[7] -> state HASH
-- KEYS[8] -> errors HASH
-- KEYS[9] -> limit key prefix (limits.lua): the leases of the deliveries
--   handled are freed, so a dead consumer's slots return with its jobs
-- Uses limits.lua.
-- KEYS[10] -> the consumer's lease on this bucket, STRING: when it ends,
--   unix ms, by this node's clock (lease.lua; recover only)
-- KEYS[11] -> due HASH (the older format's due times, fetch.lua): a job
--   put back in the ready list loses its own, if the older format left
--   one, so that the fetch that takes it again reports no lateness from
--   an earlier job's due time
-- ARGV[1] -> mode: recover or rollback
-- ARGV[2] -> most deliveries to handle (at most 1000)
-- ARGV[3] -> most recoveries of a job
-- ARGV[4] -> most jobs the dead set keeps
-- ARGV[5] -> ready channel
-- ARGV[6] -> wake channel
-- ARGV[7] -> bucket address
-- ARGV[8] -> the consumer's id
-- ARGV[9] -> recover only: quiet time, ms
-- ARGV[10] -> recover only: the time of the reaper's look that found the
--   consumer silent, unix ms; deliveries fetched later are left alone (it
--   came back and fetched them, or a late fetch landed: a later look
--   takes those) and the set counts as active
-- Returns {deliveries handled, deliveries left in the set, jobs sent to the
-- dead set, 1 when skipped because the consumer is active (or leased)
-- else 0}. A rerun after a lost reply finds the members it handled gone
-- and writes nothing more.
local now = now_ms_ceil()
local recover = ARGV[1] == 'recover'
local members
if recover then
  local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if newest[1] ~= nil then
    local lease = tonumber(redis.call('GET', KEYS[10]) or '')
    if tonumber(newest[2]) > now - tonumber(ARGV[9]) or (lease and lease > now) then
      return {0, redis.call('ZCARD', KEYS[1]), 0, 1}
    end
  end
  members = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[10], 'LIMIT', 0, tonumber(ARGV[2]))
  if #members == 0 then
    local left = redis.call('ZCARD', KEYS[1])
    if left > 0 then return {0, left, 0, 1} end
    return {0, 0, 0, 0}
  end
else
  members = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)
  if #members == 0 then return {0, 0, 0, 0} end
end
-- Reads first: nothing below can fail after a write.
local ids, tokens = {}, {}
for i, m in ipairs(members) do
  local token, id = string.match(m, '^(%d+):(.*)$')
  tokens[i], ids[i] = token or '', id or m
end
local envs = redis.call('HMGET', KEYS[3], unpack(ids))
local states = redis.call('HMGET', KEYS[7], unpack(ids))
local ready, rst, sdel, dead = {}, {}, {}, 0
local done = {}
for i, id in ipairs(ids) do
  local env = envs[i]
  if env and not done[id] and states[i] == tokens[i] .. '@' .. ARGV[8] then
    done[id] = true
    if not recover then
      sdel[#sdel + 1] = id
      redis.call('ZADD', KEYS[4], now, id)
    else
      local head, rec, tail = string.match(env, '^(1|%d+|%d+|)(%d+)(|.*)$')
      local count = 1
      if rec then
        count = tonumber(rec) + 1
        redis.call('HSET', KEYS[3], id, head .. count .. tail)
      end
      if rec == nil or count > tonumber(ARGV[3]) then
        sdel[#sdel + 1] = id
        redis.call('ZADD', KEYS[5], now, id)
        if rec == nil then
          redis.call('HSET', KEYS[6], id, 'corrupt envelope')
        else
          redis.call('HSET', KEYS[6], id, 'recovered ' .. count .. ' times: its consumers kept dying (poison job)')
        end
        dead = dead + 1
      else
        ready[#ready + 1] = id
        rst[#rst + 1] = id
        rst[#rst + 1] = 'r'
      end
    end
  end
end
redis.call('ZREM', KEYS[1], unpack(members))
local leases = {}
for i = 1, #members do leases[i] = limit_lease(tokens[i], ARGV[8], ids[i]) end
if #sdel > 0 then redis.call('HDEL', KEYS[7], unpack(sdel)) end
if #ready > 0 then
  redis.call('HSET', KEYS[7], unpack(rst))
  redis.call('HDEL', KEYS[11], unpack(ready))
  redis.call('RPUSH', KEYS[2], unpack(ready))
  redis.call('PUBLISH', ARGV[5], ARGV[7])
end
if not recover and #sdel > 0 then redis.call('PUBLISH', ARGV[6], ARGV[7]) end
if dead > 0 then
  trim_dead(KEYS[5], tonumber(ARGV[4]), {KEYS[3], KEYS[6], KEYS[8]})
end
limit_release(KEYS[9], leases, KEYS[2], ARGV[5], ARGV[7])
return {#members, redis.call('ZCARD', KEYS[1]), dead, 0}
