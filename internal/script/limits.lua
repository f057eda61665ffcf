-- The limits: helpers of the scripts that enforce a topic's global limits
-- (at most N running, at most N started per period, for the topic or per
-- value of a job header) or free a slot, put after the prelude and before
-- the script's own source by script.NewLimited. The keys live under the
-- bucket's limit prefix p (keys.Bucket.LimitPrefix: same hash tag, same
-- slot as the rest of the bucket):
--   p..'run'          ZSET lease -> fetch ms, every delivery fetched under a limit
--   p..'keyof'        HASH lease -> its key value (per-key MaxRunning only)
--   p..'krun:'..v     ZSET lease -> fetch ms, per key value v
--   p..'rlog'         LIST the starts of the last period, one entry per
--                     fetch, oldest first (limit_log); expires after it
--   p..'krlog:'..v    LIST the same per key value v
--   p..'rate'         ZSET lease -> start ms: the previous version's log,
--   p..'krate:'..v    one member per start; read while it exists, and
--                     written too until the namespace is at the start
--                     log's format (limit_mirror)
--   p..'park:'..v     LIST ids held for key value v, oldest first
--   p..'parked'       ZSET key value -> when its parked ids may be tried
--                     again, ms; LIMIT_HOLD while they wait for a slot
--   p..'pvals'        ZSET key value -> 0, every value with parked ids, in
--                     byte order for List (its score never changes)
--   p..'phead'        HASH key value -> entries trimmed from the head of
--                     its park list: an entry's place (index + this)
--                     stays while it waits, for List's cursor
--   p..'held'         STRING set while a topic-wide MaxRunning held a
--                     fetch back: the next freed slot is announced
--   p..'rfull'        STRING set while the topic-wide rate's window is
--                     full, expiring when its oldest start leaves it: the
--                     ready jobs wait for the rate meanwhile (Stats)
-- and, in the bucket's state HASH, field LIMIT_KEY_HEADER ("\0khdr"): the
-- header whose values 'keyof' and 'krun:'..v count, and field LIMIT_FLAG
-- ("\0parked"): the spec
-- the ids parked in the bucket were parked under, while any may be. A
-- fetch with no limits per key value, or limited per another header,
-- gives them back to the ready list (limit_giveback), whatever their
-- values' due times; one under other limits per the same header makes
-- their values due (limit_rewake): no id waits for a slot no limit
-- guards. Field LIMIT_CURSOR ("\0parkcur") is where such a sweep over
-- the values goes on.
-- A lease is "<token>@<consumer>\n<id>": the delivery's state value, then
-- its id, so that a lease is live exactly while the job's state names its
-- delivery. Every key empties and vanishes when its key value is idle.
local LIMIT_HOLD = 9000000000000000
local LIMIT_FLAG = '\0parked'
local LIMIT_KEY_HEADER = '\0khdr'
-- LIMIT_POLL is how soon (ms) a key value held up only by leases no value
-- of the fetch's header accounts for is tried again: the outcomes that
-- free such leases wake no value.
local LIMIT_POLL = 100
-- limit_foreign counts, for a fetch under a per-key MaxRunning, the leases
-- of the bucket that no value of its header accounts for: deliveries
-- fetched under other limits (topic-wide, a rate alone), whose values the
-- fetch does not know. Each counts against every value's room, so that a
-- changed limit never lets more run than it allows (limit_keyed).
local limit_foreign = 0
local LIMIT_CURSOR = '\0parkcur'
-- limit_score reads a ZSET score, as "9e+15" too (some servers write it
-- so, and not every Lua reads it).
local function limit_score(s)
  local n = tonumber(s)
  if n then return n end
  local m, e = string.match(s, '^([-%d.]+)[eE]%+?(-?%d+)$')
  return tonumber(m) * 10 ^ tonumber(e)
end
-- limit_spec reads a spec "max|n|per ms|header" (0 = no such limit, header
-- '' = topic-wide); nil for '' (no limits: the one check a topic without
-- limits pays).
local function limit_spec(s)
  if s == nil or s == '' then return nil end
  local max, n, per, header = string.match(s, '^(%d+)|(%d+)|(%d+)|(.*)$')
  if not max then error('bad limit spec ' .. s) end
  return {max = tonumber(max), n = tonumber(n), per = tonumber(per), header = header, raw = s}
end
-- limit_value is the value of header in envelope env ('' when the job has
-- no such header), read from its headers block: "<len>:<key><len>:<value>"...
local function limit_value(env, header)
  local nl = string.find(env, '\n', 1, true)
  if not nl then return '' end
  local hlen = string.match(string.sub(env, 1, nl - 1), '^1|[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|(%d+)$')
  if not hlen then return '' end
  local pos, stop = nl + 1, nl + tonumber(hlen)
  local function field()
    local c = string.find(env, ':', pos, true)
    if not c or c > stop then return nil end
    local len = tonumber(string.sub(env, pos, c - 1))
    if not len then return nil end
    local s = string.sub(env, c + 1, c + len)
    pos = c + len + 1
    return s
  end
  while pos <= stop do
    local k, v = field(), field()
    if k == nil or v == nil then return '' end
    if k == header then return v end
  end
  return ''
end
-- limit_lease is the lease of delivery token of id to consumer cid.
local function limit_lease(token, cid, id) return token .. '@' .. cid .. '\n' .. id end
-- limit_free removes leases (at most a script's batch) wherever they are
-- counted, and makes the parked ids of each key value freed due now.
-- Returns how many key values it freed that had parked ids, and how many
-- leases it removed. A bucket that never ran under a limit has no 'run'
-- key: one EXISTS, unless the caller read it already (known).
local function limit_free(p, leases, now, known)
  if #leases == 0 then return 0, 0 end
  if not known and redis.call('EXISTS', p .. 'run') == 0 then return 0, 0 end
  local freed = redis.call('ZREM', p .. 'run', unpack(leases))
  local vals = redis.call('HMGET', p .. 'keyof', unpack(leases))
  local order, by = {}, {}
  for i, v in ipairs(vals) do
    if v then
      if not by[v] then by[v] = {}; order[#order + 1] = v end
      by[v][#by[v] + 1] = leases[i]
    end
  end
  if #order == 0 then return 0, freed end
  redis.call('HDEL', p .. 'keyof', unpack(leases))
  local woke = 0
  for _, v in ipairs(order) do
    redis.call('ZREM', p .. 'krun:' .. v, unpack(by[v]))
    local at = redis.call('ZSCORE', p .. 'parked', v)
    if at and limit_score(at) > now then
      redis.call('ZADD', p .. 'parked', now, v)
      woke = woke + 1
    end
  end
  return woke, freed
end
-- limit_release is limit_free for the scripts that end deliveries: when it
-- freed a slot while jobs wait for one (a fetch was held back by the
-- topic's MaxRunning and the ready list readyk holds jobs, or a key value
-- it freed has parked ids), it announces the bucket on the ready channel
-- (message msg), so that the consumers fetch again. now is the
-- script's time, ms rounded down (nil: read it); known says the caller
-- found the 'run' key.
local function limit_release(p, leases, readyk, channel, msg, now, known)
  local woke, freed = limit_free(p, leases, now or now_ms_floor(), known)
  if freed == 0 then return end
  if woke > 0 or (redis.call('DEL', p .. 'held') == 1 and redis.call('LLEN', readyk) > 0) then
    redis.call('PUBLISH', channel, msg)
  end
end
-- limit_heal frees up to 16 of the oldest leases of ZSET z whose delivery
-- has ended without freeing it: the job's state in HASH state no longer
-- names the delivery, and the delivery's member is gone from its
-- consumer's in-flight set (the bucket's key beside p). A delivery whose
-- job was deleted (or fenced off) while its handler runs still holds its
-- member, and its slot, until its outcome: the handler still runs. A slot
-- some path could not free (a restart that kept a lease but not its
-- in-flight member, say) comes back at the first fetch that finds the
-- limit reached. Returns how many it freed.
local function limit_heal(p, z, state, now)
  local old = redis.call('ZRANGE', z, 0, 15)
  if #old == 0 then return 0 end
  local ids, own = {}, {}
  for i, l in ipairs(old) do
    local s, id = string.match(l, '^([^\n]*)\n(.*)$')
    ids[i], own[i] = id or l, s or ''
  end
  local st = redis.call('HMGET', state, unpack(ids))
  local tag = string.sub(p, 1, #p - #'limit:')
  local stale = {}
  for i = 1, #old do
    if st[i] ~= own[i] then
      local token, cid = string.match(own[i], '^(%d+)@(.*)$')
      if not token or redis.call('ZSCORE', tag .. 'inflight:' .. cid, token .. ':' .. ids[i]) == false then
        stale[#stale + 1] = old[i]
      end
    end
  end
  if #stale > 0 then
    limit_free(p, stale, now)
    redis.call('ZREM', z, unpack(stale))
  end
  return #stale
end
-- limit_logs caches what limit_log read, per log key, for the rest of the
-- script.
local limit_logs = {}
-- limit_mirror is whether the fetch writes its starts to the previous
-- version's ZSET too (limit_log_add): until the namespace is at the start
-- log's format (keys.FormatStartLog), which it switches to only when no
-- client of that version is alive, so that such a client counts every
-- start, whatever the ZSET holds. The script sets it from its ARGV
-- (limit_set_mode). Whatever it is, a fetch reads both.
local limit_mirror = true
-- limit_set_mode reads the mode "mirror" or "log" (the start log only).
local function limit_set_mode(m)
  if m == 'mirror' then limit_mirror = true
  elseif m == 'log' then limit_mirror = false
  else error('bad start log mode ' .. tostring(m)) end
end
-- limit_entry reads an entry of a start log,
-- "ms:start:count:mstart:mcount:exp": the fetch's time, the log's running
-- count of starts before it and its own, the same of the starts it also
-- wrote to the previous version's ZSET (mirrored), and when the log key
-- expires (its last PEXPIRE).
local function limit_entry(e)
  local ms, a, c, ma, mc, exp = string.match(e, '^(%d+):(%d+):(%d+):(%d+):(%d+):(%d+)$')
  if not ms then error('bad rate log entry ' .. e) end
  return {ms = tonumber(ms), start = tonumber(a), count = tonumber(c), mstart = tonumber(ma), mcount = tonumber(mc), exp = tonumber(exp)}
end
-- limit_log reads the starts of the last per ms in start log lg (a LIST,
-- one entry per fetch that started jobs: limit_entry, in the order of
-- their times, which limit_log_add keeps even when the clock steps back),
-- dropping the expired entries from its head: the first four are read
-- at once (a busy log loses a few a fetch); when all four are expired,
-- the log is deleted when its newest entry is expired too (the whole log
-- is), else the first entry within the period is found by halving, with
-- LINDEX (at most 64 steps, 17 for 100,000 entries): every expired entry
-- goes, however many, and none is counted. And in old, the previous
-- version's ZSET of one member per start (trimmed the same way), which
-- exists only while a client of that version starts jobs, or for a
-- period after a fetch mirrored its starts there. Returns {n = the
-- starts counted, oldest = ms of the oldest or nil, last = ms of the
-- newest entry or nil, nxt, mnxt = the running counts the next entry
-- starts at, exp = the key's expiry}. The ZSET's members that no entry
-- marks mirrored (the starts of a client of that version) are counted
-- beside the log's.
local function limit_log(lg, old, per, now)
  local cut = now - per
  local head, tail, from = nil, nil, 0
  for i, e in ipairs(redis.call('LRANGE', lg, 0, 3)) do
    local en = limit_entry(e)
    if en.ms > cut then head = en; break end
    from = i
  end
  if from == 4 then
    tail = limit_entry(redis.call('LINDEX', lg, -1))
    if tail.ms <= cut then
      redis.call('DEL', lg)
      tail, from = nil, 0
    else
      -- Entry lo - 1 is expired, entry hi (head) is not.
      local lo, hi = 4, redis.call('LLEN', lg) - 1
      head = tail
      for _ = 1, 64 do
        if lo >= hi then break end
        local mid = math.floor((lo + hi) / 2)
        local en = limit_entry(redis.call('LINDEX', lg, mid))
        if en.ms > cut then hi, head = mid, en else lo = mid + 1 end
      end
      from = hi
    end
  end
  if from > 0 then redis.call('LTRIM', lg, from, -1) end
  local r = {n = 0, nxt = 0, mnxt = 0, exp = 0}
  if head then
    tail = tail or limit_entry(redis.call('LINDEX', lg, -1))
    r.nxt, r.mnxt, r.exp, r.last = tail.start + tail.count, tail.mstart + tail.mcount, tail.exp, tail.ms
    r.n, r.oldest = r.nxt - head.start, head.ms
  end
  if redis.call('EXISTS', old) == 1 then
    redis.call('ZREMRANGEBYSCORE', old, '-inf', cut)
    local others = redis.call('ZCARD', old) - (r.mnxt - (head and head.mstart or 0))
    if others > 0 then
      r.n = r.n + others
      local first = redis.call('ZRANGE', old, 0, 0, 'WITHSCORES')
      if first[2] then r.oldest = math.min(r.oldest or math.huge, limit_score(first[2])) end
    end
  end
  limit_logs[lg] = r
  return r
end
-- limit_log_wait is, when the starts r counts (limit_log) plus extra reach
-- n, in how many ms the oldest of them leaves the period per; nil below n.
local function limit_log_wait(r, n, per, extra, now)
  if r.n + extra < n then return nil end
  return math.max(1, (r.oldest or now) + per - now)
end
-- limit_log_add records count starts at now (the fetch's leases, t:
-- score, member pairs) in start log lg, as one entry, and, until the
-- namespace is at the start log's format (limit_mirror), in the previous
-- version's ZSET old too, marked mirrored in the entry so that they are
-- counted once. The log
-- must outlive its last entry by per: its expiry is pushed to two periods
-- from now when less than one is left, so a busy log costs a PEXPIRE a
-- period, not one a fetch (an idle one lingers up to two periods).
local function limit_log_add(lg, old, per, t, now)
  local r = limit_logs[lg]
  local count = #t / 2
  local mc = limit_mirror and count or 0
  local exp = r.exp
  if exp - now < per then exp = now + 2 * per end
  -- Never before the newest entry (a clock stepped back): the log stays
  -- in order, and such a start counts a little longer, never shorter.
  local at = math.max(now, r.last or now)
  redis.call('RPUSH', lg, string.format('%d:%d:%d:%d:%d:%d', at, r.nxt, count, r.mnxt, mc, exp))
  if exp ~= r.exp then redis.call('PEXPIREAT', lg, exp) end
  if limit_mirror then
    if at ~= now then
      for i = 1, #t, 2 do t[i] = at end
    end
    redis.call('ZADD', old, unpack(t))
    redis.call('PEXPIRE', old, per)
  end
  r.n, r.nxt, r.mnxt, r.exp, r.last = r.n + count, r.nxt + count, r.mnxt + mc, exp, at
  r.oldest = r.oldest or at
end
-- limit_mark_full notes that the topic-wide rate's window of prefix p is
-- full for the next ms: Stats then counts the ready jobs as waiting. A
-- flag, not a count: it changes no decision of a fetch.
local function limit_mark_full(p, ms)
  redis.call('SET', p .. 'rfull', '1', 'PX', math.max(1, math.ceil(ms)))
end
-- limit_room is how many more deliveries the running ZSET run (at most
-- spec.max, 0 for no such limit) and the start log lg (spec.n per
-- spec.per ms; old is the previous version's, limit_log) allow now, and,
-- when the rate allows none, in how many ms it allows one; math.huge with
-- no limit. A running limit found reached is healed first (limit_heal).
local function limit_room(p, run, lg, old, spec, state, now, extra)
  extra = extra or 0
  local room, wait = math.huge, nil
  if spec.max > 0 then
    local c = redis.call('ZCARD', run)
    if c + extra >= spec.max then c = c - limit_heal(p, run, state, now) end
    room = spec.max - c - extra
    -- Held by leases of no known value: their ends wake nothing, so poll.
    if extra > 0 and room <= 0 then wait = LIMIT_POLL end
  end
  if spec.n > 0 then
    local r = limit_log(lg, old, spec.per, now)
    local rw = limit_log_wait(r, spec.n, spec.per, 0, now)
    if rw then wait = math.min(wait or rw, rw) end
    room = math.min(room, spec.n - r.n)
  end
  return room, wait
end
-- limit_rate_wait is, when the rate of key value v is full once extra
-- more start now, in how many ms it allows one again; nil when it is not
-- full (or there is no rate): then only a slot can hold the value up.
local function limit_rate_wait(p, spec, v, extra, now)
  if spec.n == 0 then return nil end
  local lg = p .. 'krlog:' .. v
  local r = limit_logs[lg] or limit_log(lg, p .. 'krate:' .. v, spec.per, now)
  return limit_log_wait(r, spec.n, spec.per, extra, now)
end
-- limit_key_room is limit_room for key value v.
local function limit_key_room(p, spec, v, state, now)
  return limit_room(p, p .. 'krun:' .. v, p .. 'krlog:' .. v, p .. 'krate:' .. v, spec, state, now, limit_foreign)
end
-- limit_keyed sets limit_foreign for a fetch under a per-key MaxRunning
-- (lk.spec): the leases in 'run' beyond those 'keyof' gives a value of
-- its header, after freeing the stale ones among the oldest (limit_heal).
-- It notes the header 'keyof' is of in lk.kh (nil when it did not read
-- it: no lease is held). Returns true when 'keyof' holds values of
-- another header (a per-key MaxRunning on another header holds slots):
-- the fetch then takes nothing until those deliveries end, and their
-- values never mix with its own. Three reads while leases are held, one
-- (ZCARD) while none is.
local function limit_keyed(lk)
  limit_foreign = 0
  local p, spec = lk.p, lk.spec
  local total = redis.call('ZCARD', p .. 'run')
  if total == 0 then return false end
  local keyed = redis.call('HLEN', p .. 'keyof')
  local other = false
  if keyed > 0 then
    lk.kh = redis.call('HGET', lk.state, LIMIT_KEY_HEADER)
    -- No header noted: a version that kept none wrote them, under the
    -- same header, as it assumed.
    other = lk.kh and lk.kh ~= spec.header
  end
  -- Leases this fetch cannot count per value: the stale ones among the
  -- oldest go first, so that a lease no delivery will ever free (a
  -- restart that kept it without its in-flight member) holds nothing up.
  if (other or keyed < total) and limit_heal(p, p .. 'run', lk.state, lk.now) > 0 then
    total = redis.call('ZCARD', p .. 'run')
    keyed = redis.call('HLEN', p .. 'keyof')
    other = other and keyed > 0
  end
  if other then return true end
  limit_foreign = math.max(0, total - keyed)
  return false
end
-- limit_take notes in back at most n ids parked for key value v that are
-- still ready (their state in HASH state says so: a parked job deleted,
-- rescheduled or replaced since is stale, and skipped), reading at most
-- n + 256 entries, and notes in trims how many entries of the park list
-- it read. It writes nothing: limit_push gives the ids back, then trims.
-- Returns how many ids it noted, and how many entries the list keeps
-- after its trim.
local function limit_take(p, v, state, n, back, trims)
  local plist = p .. 'park:' .. v
  local left = redis.call('LLEN', plist)
  if n <= 0 or left == 0 then return 0, left end
  local got = redis.call('LRANGE', plist, 0, n + 255)
  local st = redis.call('HMGET', state, unpack(got))
  local live, used = 0, 0
  for i, id in ipairs(got) do
    if live == n then break end
    used = i
    if is_ready(st[i]) then
      live = live + 1
      back[#back + 1] = id
    end
  end
  if used > 0 then trims[#trims + 1] = {plist, used, v} end
  return live, left - used
end
-- limit_push gives the ids in back to the head of the ready list readyk,
-- oldest first, where the fetch reads them first, and only then trims
-- from the park lists the entries read (trims): an error or a kill
-- between the two leaves an id in both places, never in neither (the
-- second entry a fetch meets is stale, and dropped).
local function limit_push(p, readyk, state, back, trims)
  if #back > 0 then
    local rev = {}
    for i = #back, 1, -1 do rev[#rev + 1] = back[i] end
    redis.call('LPUSH', readyk, unpack(rev))
    -- The entries behind keep their places (keys.ReadyHeadField).
    redis.call('HINCRBY', state, '\0readyhead', -#back)
  end
  for _, t in ipairs(trims) do
    redis.call('LTRIM', t[1], t[2], -1)
    redis.call('HINCRBY', p .. 'phead', t[3], t[2])
  end
end
-- limit_gone forgets key values vals whose park lists emptied: their
-- entries in 'parked', 'pvals' and 'phead'.
local function limit_gone(p, vals)
  if #vals == 0 then return end
  redis.call('ZREM', p .. 'parked', unpack(vals))
  redis.call('ZREM', p .. 'pvals', unpack(vals))
  redis.call('HDEL', p .. 'phead', unpack(vals))
end
-- limit_sweep_vals is the next at most n key values with parked ids of a
-- sweep over them all, in byte order ('pvals'), from where the last call
-- left it (state field LIMIT_CURSOR): values parked again behind the
-- cursor meanwhile are not read again, so a sweep ends. Values parked by
-- a version that kept no 'pvals' are added to it first.
local function limit_sweep_vals(p, state, n)
  local cur = redis.call('HGET', state, LIMIT_CURSOR)
  local vals = redis.call('ZRANGEBYLEX', p .. 'pvals', cur and ('[' .. cur) or '-', '+', 'LIMIT', 0, n)
  if #vals == 0 and not cur then
    local olds = redis.call('ZRANGE', p .. 'parked', 0, n - 1)
    if #olds > 0 then
      local za = {}
      for _, v in ipairs(olds) do za[#za + 1] = 0; za[#za + 1] = v end
      redis.call('ZADD', p .. 'pvals', unpack(za))
      vals = redis.call('ZRANGEBYLEX', p .. 'pvals', '-', '+', 'LIMIT', 0, n)
    end
  end
  return vals
end
-- limit_sweep_on notes where the sweep goes on (value nextv, inclusive),
-- or that it ended (nextv nil).
local function limit_sweep_on(state, nextv)
  if nextv then
    redis.call('HSET', state, LIMIT_CURSOR, nextv)
  else
    redis.call('HDEL', state, LIMIT_CURSOR)
  end
end
-- limit_giveback gives back to the head of the ready list at most most
-- parked ids, whatever their values wait for, from at most 8 values of a
-- sweep (limit_sweep_vals): a fetch with no limit per key value
-- (topic-wide, or none) parks nothing, and the ids parked under a limit
-- per key value wait there for no slot it guards; a fetch limited per
-- another header reads their values anew. Returns how many ids it gave
-- back, and whether the sweep ended.
local function limit_giveback(p, readyk, state, most)
  local vals = limit_sweep_vals(p, state, 8)
  local back, trims, emptied, nextv = {}, {}, {}, nil
  for _, v in ipairs(vals) do
    local _, left = limit_take(p, v, state, most - #back, back, trims)
    if left > 0 then
      nextv = v -- the fetch's room ran out within v: on from v
      break
    end
    emptied[#emptied + 1] = v
  end
  if not nextv and #vals == 8 then nextv = vals[8] .. '\0' end
  limit_push(p, readyk, state, back, trims)
  limit_gone(p, emptied)
  limit_sweep_on(state, nextv)
  return #back, nextv == nil
end
-- limit_unlimit is limit_giveback for a fetch without limits: once the
-- sweep ended, no id is parked, and the flag goes. Returns how many ids it
-- gave back.
local function limit_unlimit(p, readyk, state, most)
  local n, done = limit_giveback(p, readyk, state, most)
  if done then redis.call('HDEL', state, LIMIT_FLAG) end
  return n
end
-- limit_unpark gives the ids parked for key values that may run again
-- (due in 'parked', at most 8 values, at most most ids in all, each value
-- at most its room) back to the head of the ready list, oldest first,
-- where the fetch reads them first, and notes each value's room in room
-- (so that the ids given back use it, and, when none is left parked, new
-- ones too). A value whose ids still wait is parked again: until its rate
-- allows one (a time), or until a slot of it frees (LIMIT_HOLD), when the
-- ids given back use its room; otherwise (stale ids read, or the fetch's
-- budget spent) it stays due. Returns how many ids it gave back.
local function limit_unpark(p, spec, readyk, state, now, most, room, waits)
  local due = redis.call('ZRANGEBYSCORE', p .. 'parked', '-inf', now, 'LIMIT', 0, 8)
  local back, trims, gone, again = {}, {}, {}, {}
  for _, v in ipairs(due) do
    local r, wait = limit_key_room(p, spec, v, state, now)
    local n = math.max(0, math.min(r, most - #back))
    local live, left = limit_take(p, v, state, n, back, trims)
    if left == 0 then
      gone[#gone + 1] = v
      room[v], waits[v] = r, wait
    else
      room[v], waits[v] = live, wait
      if live >= r then
        -- Its room is used up: until its rate lets one go, or a slot frees.
        wait = wait or limit_rate_wait(p, spec, v, live, now)
        again[#again + 1] = wait and (now + wait) or LIMIT_HOLD
        again[#again + 1] = v
      end
    end
    if #back >= most then break end
  end
  -- The values' entries change only once their ids are back.
  limit_push(p, readyk, state, back, trims)
  limit_gone(p, gone)
  if #again > 0 then redis.call('ZADD', p .. 'parked', unpack(again)) end
  return #back
end
-- limit_park sets ids aside for key value v (at its limit), behind those
-- already parked; a value newly parked waits until wait ms from now (its
-- rate) or for a slot (wait nil).
local function limit_park(p, v, ids, wait, now)
  redis.call('RPUSH', p .. 'park:' .. v, unpack(ids))
  if redis.call('ZSCORE', p .. 'parked', v) == false then
    redis.call('ZADD', p .. 'parked', wait and (now + wait) or LIMIT_HOLD, v)
    redis.call('ZADD', p .. 'pvals', 0, v)
  end
end
-- limit_next is in how many ms a parked key value falls due, or nil when
-- none waits for a time.
local function limit_next(p, now)
  local first = redis.call('ZRANGE', p .. 'parked', 0, 0, 'WITHSCORES')
  if first[1] == nil or limit_score(first[2]) >= LIMIT_HOLD then return nil end
  return math.max(0, limit_score(first[2]) - now)
end
-- limit_rewake makes at most 64 key values of a sweep (limit_sweep_vals)
-- due now, so that limits per key value that changed (another max or
-- rate, the same header) apply to the ids parked under the old ones at
-- once: a value held for a slot the new limits leave free runs without
-- waiting for one to free. Returns whether the sweep ended.
local function limit_rewake(p, state, now)
  local vals = limit_sweep_vals(p, state, 64)
  if #vals > 0 then
    local za = {}
    for _, v in ipairs(vals) do za[#za + 1] = now; za[#za + 1] = v end
    redis.call('ZADD', p .. 'parked', 'XX', unpack(za))
  end
  local nextv = #vals == 64 and (vals[64] .. '\0') or nil
  limit_sweep_on(state, nextv)
  return nextv == nil
end
-- limit_open starts a fetch under spec (nil: no limits, and nil back) in
-- the bucket of limit prefix p, ready list readyk and state HASH state,
-- for at most want jobs; flag is the state's LIMIT_FLAG (false when no id
-- is parked). Ids parked under other limits are sorted again: topic-wide,
-- or per another header, they go back to the ready list
-- (limit_giveback); per the same header their values fall due
-- (limit_rewake). Either sweeps the values a batch a fetch; the flag names
-- these limits once it ended. Topic-wide, it returns how many the
-- limits let the fetch take, and when that is none because of the rate,
-- the ms until the rate allows one. Per key value, it then gives back the
-- parked ids that may run again (limit_unpark), and the fetch reads as
-- many as it would. The third value is the fetch's limit state, for
-- limit_admit, limit_record and limit_close.
local function limit_open(p, spec, readyk, state, want, flag)
  if spec == nil then return want, nil, nil end
  local now = now_ms_floor()
  -- nowtext is the score of every lease the fetch records (a number among
  -- a command's arguments is formatted anew for each).
  local lk = {p = p, spec = spec, state = state, now = now, nowtext = string.format('%d', now), room = {}, wait = {}, took = {}, val = {}, park = {}, order = {}, flag = flag}
  if spec.header == '' then
    if flag then limit_unlimit(p, readyk, state, want) end
    local room, wait = limit_room(p, p .. 'run', p .. 'rlog', p .. 'rate', spec, state, now)
    if wait then limit_mark_full(p, wait) end
    if room < want and not wait then redis.call('SET', p .. 'held', '1') end
    return math.max(0, math.min(want, room)), wait, lk
  end
  local blocked = spec.max > 0 and limit_keyed(lk)
  if flag and flag ~= spec.raw then
    -- Parked per another header, their values name other partitions:
    -- they go back to the ready list, where this fetch reads their own.
    local old = string.match(flag, '^%d+|%d+|%d+|(.*)$')
    local done
    if old == spec.header then
      done = limit_rewake(p, state, now)
    else
      local _
      _, done = limit_giveback(p, readyk, state, want)
    end
    if done then
      redis.call('HSET', state, LIMIT_FLAG, spec.raw)
      lk.flag = spec.raw
    end
  end
  -- Held by another header's values: the sweep above goes on, nothing
  -- is taken, and the consumer fetches again in LIMIT_POLL ms.
  if blocked then return 0, LIMIT_POLL, lk end
  limit_unpark(p, spec, readyk, state, now, want, lk.room, lk.wait)
  return want, nil, lk
end
-- limit_admit tells whether the fetch may take the job id of envelope env
-- (always, topic-wide: the fetch asked for no more than the limits let
-- it). Per key value, a job whose value has no room left, or whose value
-- has ids parked before it, is set aside, for limit_close to park.
local function limit_admit(lk, env, id)
  if lk == nil or lk.spec.header == '' then return true end
  local v = limit_value(env, lk.spec.header)
  local room = lk.room[v]
  if room == nil then
    room, lk.wait[v] = limit_key_room(lk.p, lk.spec, v, lk.state, lk.now)
    local at = redis.call('ZSCORE', lk.p .. 'parked', v)
    if at then
      if room > 0 and limit_score(at) >= LIMIT_HOLD then
        -- Held for a slot that is free (its ids given back were not
        -- taken: the fetch stopped short of them): they fall due now.
        redis.call('ZADD', lk.p .. 'parked', lk.now, v)
      end
      room = 0
    end
  end
  if room > 0 then
    lk.room[v] = room - 1
    lk.took[v] = (lk.took[v] or 0) + 1
    lk.val[id] = v
    return true
  end
  lk.room[v] = 0
  if not lk.park[v] then lk.park[v] = {}; lk.order[#lk.order + 1] = v end
  lk.park[v][#lk.park[v] + 1] = id
  return false
end
-- limit_record records the lease of the delivery token of id to consumer
-- cid, which the fetch took.
local function limit_record(lk, token, cid, id)
  if lk == nil then return end
  local lease, v = limit_lease(token, cid, id), lk.val[id] or ''
  if not lk.took_by then lk.took_by, lk.took_order = {}, {} end
  if not lk.took_by[v] then lk.took_by[v] = {}; lk.took_order[#lk.took_order + 1] = v end
  local t = lk.took_by[v]
  t[#t + 1] = lk.nowtext
  t[#t + 1] = lease
end
-- limit_flush writes the leases limit_record noted, one command per key
-- (and per key value) for the whole fetch: in the running set, and where
-- the limits count them (the rate windows, which expire a period after
-- their last start; the key value's running set and the lease's value).
local function limit_flush(lk)
  if lk == nil or not lk.took_by then return end
  local p, spec = lk.p, lk.spec
  for _, v in ipairs(lk.took_order) do
    local t = lk.took_by[v]
    redis.call('ZADD', p .. 'run', unpack(t))
    if spec.header == '' then
      if spec.n > 0 then
        limit_log_add(p .. 'rlog', p .. 'rate', spec.per, t, lk.now)
        local w = limit_log_wait(limit_logs[p .. 'rlog'], spec.n, spec.per, 0, lk.now)
        if w then limit_mark_full(p, w) end
      end
    else
      if spec.max > 0 then
        local kv = {}
        for i = 2, #t, 2 do kv[#kv + 1] = t[i]; kv[#kv + 1] = v end
        if lk.kh ~= spec.header then
          redis.call('HSET', lk.state, LIMIT_KEY_HEADER, spec.header)
          lk.kh = spec.header
        end
        redis.call('HSET', p .. 'keyof', unpack(kv))
        redis.call('ZADD', p .. 'krun:' .. v, unpack(t))
      end
      if spec.n > 0 then
        local lg = p .. 'krlog:' .. v
        if not limit_logs[lg] then limit_log(lg, p .. 'krate:' .. v, spec.per, lk.now) end
        limit_log_add(lg, p .. 'krate:' .. v, spec.per, t, lk.now)
      end
    end
  end
end
-- limit_close parks the ids limit_admit set aside, and gives the fetch's
-- first reply value: flag, or, when flag is 0 (nothing more to read now)
-- and a key value's ids fall due at a time, -1 - the ms until then, so
-- that the consumer fetches again at that time.
local function limit_close(lk, flag)
  if lk == nil then return flag end
  for _, v in ipairs(lk.order) do
    local wait = lk.wait[v] or limit_rate_wait(lk.p, lk.spec, v, lk.took[v] or 0, lk.now)
    limit_park(lk.p, v, lk.park[v], wait, lk.now)
  end
  -- A first id parked names the limits; ids parked under others name
  -- theirs until limit_rewake has woken them all.
  if #lk.order > 0 and not lk.flag then
    redis.call('HSET', lk.state, LIMIT_FLAG, lk.spec.raw)
  end
  if flag ~= 0 or lk.spec.header == '' then return flag end
  local next = limit_next(lk.p, lk.now)
  if next == nil then return flag end
  return -1 - next
end
-- The script's own source follows.
