-- Stops one tick of a generation a change of its schedule ended: it
-- claims the tick for that generation (so a pass of it that writes later,
-- one whose process hung or died, finds the claim and writes nothing),
-- and removes the tick's job while it waits (wherever it was moved to, in
-- the bucket or in the ready list), when its instant came after the change
-- and the job is not one the current generation claimed.
-- KEYS[1] -> pool HASH
-- KEYS[2] -> bucket ZSET
-- KEYS[3] -> state HASH
-- KEYS[4] -> ticks ZSET: the claims
-- KEYS[5] -> errors HASH
-- ARGV[1] -> job id, "<schedule>@<tick ms>"
-- ARGV[2] -> the generation ended
-- ARGV[3] -> the change's instant, unix ms
-- ARGV[4] -> tick instant, unix ms
-- ARGV[5] -> the schedule's current generation, or "" when deleted
-- Returns 1 when it removed the job; 2 when the tick had its run (its job
-- was due before the change and stays, or runs, ran or is retried): the
-- caller moves a cursor left before it; 0 otherwise (one the ended
-- generation never added, a job of the current generation). A rerun
-- answers 2 again for a tick marked as run.
-- O(log n); a rerun, or a second client stopping the same tick, finds its
-- mark ("<claim>!") and writes nothing. Members of the ticks ZSET it
-- writes: the claim, the mark, and "<job id>#*" for a tick that had its
-- run; scored max(tick, change, the claim's score), so none is pruned
-- before the claim, and a "#*" mark is never lowered.
if #ARGV ~= 5 then return redis.error_reply('schedule_drop.lua: ' .. #ARGV .. ' arguments, want 5') end
for i, what in pairs({[3] = 'change', [4] = 'tick'}) do
  if not string.find(ARGV[i], '^%d+$') or #ARGV[i] > #MAX_DUE_MS_TEXT or tonumber(ARGV[i]) > MAX_DUE_MS then
    return redis.error_reply('schedule_drop.lua: ' .. what .. ' ' .. ARGV[i] .. ' is no whole number of ms from 0 to ' .. MAX_DUE_MS_TEXT)
  end
end
if ARGV[2] == '' then return redis.error_reply('schedule_drop.lua: no generation') end
local tick, change = tonumber(ARGV[4]), tonumber(ARGV[3])
local claim = ARGV[1] .. '#' .. ARGV[2]
-- The mark of this stop: a rerun, or a second client stopping the same
-- tick, finds it and writes nothing; a job of the tick's id waiting by
-- then is another generation's (added after this stop removed the
-- ended one's), and stays.
local stopped = claim .. '!'
if redis.call('ZSCORE', KEYS[4], stopped) ~= false then
  if redis.call('ZSCORE', KEYS[4], ARGV[1] .. '#*') ~= false then return 2 end
  return 0
end
-- The marks live as long as the claim: a claim made late (a missed tick
-- added after its instant) is scored by when it was made, and a mark
-- scored by the tick alone would be pruned before it, letting a stale
-- rerun of this stop remove a newer generation's job of the tick.
local held = redis.call('ZSCORE', KEYS[4], claim)
-- The claim existed: the ended generation added the tick's job (or found
-- one of its id waiting). Else it never did, and what waits is not its.
local wrote = held ~= false
local score = string.format('%d', math.max(tick, change, wrote and tonumber(held) or 0))
if not wrote then redis.call('ZADD', KEYS[4], score, claim) end
redis.call('ZADD', KEYS[4], score, stopped)
if not wrote then return 0 end
-- A tick due before the change is the ended generation's to run: its job
-- stays, and the tick had its run (a newer generation whose cursor was
-- left before it adds no second job). One the ended generation never
-- added (its pass is late or died) is claimed above, so that pass writes
-- nothing, and a newer generation adds it.
if tick <= change then
  redis.call('ZADD', KEYS[4], 'GT', score, ARGV[1] .. '#*')
  return 2
end
if ARGV[5] ~= '' and redis.call('ZSCORE', KEYS[4], ARGV[1] .. '#' .. ARGV[5]) ~= false then return 0 end
-- A job of the tick's id that failed before (it has a last error) is a
-- retry of a run the tick already had: it stays. Any other is the tick's
-- job still waiting, at its instant or moved since (rescheduled by an
-- operator, or given back by a handler's Rejoin): it goes.
local failed = redis.call('HEXISTS', KEYS[5], ARGV[1]) == 1
local due = redis.call('ZSCORE', KEYS[2], ARGV[1])
if due ~= false then
  if failed then
    redis.call('ZADD', KEYS[4], 'GT', score, ARGV[1] .. '#*') -- see below
    return 2
  end
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 1
end
-- Due and not fetched yet: a ready state, in either format ("r<due ms>",
-- or "r"; keys.Bucket.State), of a job that never failed (a retry's job
-- has a last error). The stale ready entry is dropped by the next fetch,
-- as for a deleted job.
if not failed and is_ready(redis.call('HGET', KEYS[3], ARGV[1])) then
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 1
end
-- The ended generation's job of the tick runs, ran or is retried: its
-- tick had its run, and no later generation adds it again
-- (schedule_tick.lua reads this mark). GT: a mark another stop left is
-- never shortened.
redis.call('ZADD', KEYS[4], 'GT', score, ARGV[1] .. '#*')
return 2
