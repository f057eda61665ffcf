-- Returns at most ARGV[2] ids of one consumer's in-flight list of one bucket
-- to where they can run again.
--   mode "recover" (the consumer crashed): each job counts a recovery and
--   goes to the ready list; one recovered more than ARGV[3] times is poison
--   and goes to the dead set.
--   mode "rollback" (the consumer shuts down): each job goes back to its
--   bucket due now, nothing counted.
-- Ids whose job was deleted are dropped; an id whose job is back in its
-- bucket already (deleted and added again) is left there.
-- KEYS[1] -> the consumer's in-flight LIST
-- KEYS[2] -> ready LIST
-- KEYS[3] -> pool HASH
-- KEYS[4] -> bucket ZSET
-- KEYS[5] -> dead ZSET
-- KEYS[6] -> reasons HASH (why each dead job died)
-- ARGV[1] -> mode: recover or rollback
-- ARGV[2] -> most ids to handle
-- ARGV[3] -> most recoveries of a job
-- ARGV[4] -> most jobs the dead set keeps
-- ARGV[5] -> ready channel
-- ARGV[6] -> wake channel
-- ARGV[7] -> bucket address
-- Returns {ids handled, ids left in the list, ids sent to the dead set}.
local ids = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)
if #ids == 0 then return {0, 0, 0} end
redis.call('LTRIM', KEYS[1], #ids, -1)
local t = redis.call('TIME')
local now = math.ceil((tonumber(t[1]) * 1000000 + tonumber(t[2])) / 1000)
local envs = redis.call('HMGET', KEYS[3], unpack(ids))
local ready, dead = {}, 0
for i, id in ipairs(ids) do
  local env = envs[i]
  if env and redis.call('ZSCORE', KEYS[4], id) == false then
    if ARGV[1] == 'rollback' then
      redis.call('ZADD', KEYS[4], now, id)
    else
      local head, rec, tail = string.match(env, '^(1|%d+|%d+|)(%d+)(|.*)$')
      local count = 1
      if rec then
        count = tonumber(rec) + 1
        redis.call('HSET', KEYS[3], id, head .. count .. tail)
      end
      if rec == nil or count > tonumber(ARGV[3]) then
        redis.call('ZADD', KEYS[5], now, id)
        if rec == nil then
          redis.call('HSET', KEYS[6], id, 'corrupt envelope')
        else
          redis.call('HSET', KEYS[6], id, 'recovered ' .. count .. ' times: its consumers kept dying (poison job)')
        end
        dead = dead + 1
      else
        ready[#ready + 1] = id
      end
    end
  end
end
if #ready > 0 then
  redis.call('RPUSH', KEYS[2], unpack(ready))
  redis.call('PUBLISH', ARGV[5], ARGV[7])
end
if ARGV[1] == 'rollback' then redis.call('PUBLISH', ARGV[6], ARGV[7]) end
if dead > 0 then
  local over = math.min(redis.call('ZCARD', KEYS[5]) - tonumber(ARGV[4]), 1000)
  if over > 0 then
    local old = redis.call('ZRANGE', KEYS[5], 0, over - 1)
    redis.call('HDEL', KEYS[3], unpack(old))
    redis.call('HDEL', KEYS[6], unpack(old))
    redis.call('ZREMRANGEBYRANK', KEYS[5], 0, over - 1)
  end
end
return {#ids, redis.call('LLEN', KEYS[1]), dead}
