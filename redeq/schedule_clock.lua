-- Records a pass of a client's schedule loop and tells the latest spans
-- during which no client ran one: ticks in them were missed (catch-up).
-- KEYS[1] -> clock HASH (seen; spans: "<from>:<to>,..." oldest first;
--            down_from, down_to: the latest span, as earlier versions
--            read it)
-- ARGV[1] -> a gap between passes longer than this, ms, is a span when no
--            client ran
-- Returns {now ms, from, to, from, to, ...}: the latest spans (unix ms,
-- from exclusive, to inclusive), at most 8, oldest first; none when no
-- span is known. With no pass ever recorded, every instant before now
-- counts as missed. A rerun records the same pass again. Several spans
-- are kept, not the latest alone: a schedule no pass handled between two
-- outages has the missed ticks of both.
if not string.find(ARGV[1], '^%d+$') then return redis.error_reply('schedule_clock.lua: gap ' .. ARGV[1] .. ' is no whole number') end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local r = redis.call('HMGET', KEYS[1], 'seen', 'spans', 'down_from', 'down_to')
local seen = tonumber(r[1] or '')
local list = {}
if r[2] then
  for f, to in string.gmatch(r[2], '(%d+):(%d+)') do list[#list + 1] = {f, to} end
elseif r[3] and r[4] then
  list[1] = {r[3], r[4]} -- written by an earlier version
end
local from
if seen == nil then
  from = '0'
elseif now - seen > tonumber(ARGV[1]) then
  from = r[1]
end
if from then
  local to = string.format('%d', now)
  list[#list + 1] = {from, to}
  while #list > 8 do table.remove(list, 1) end
  local parts = {}
  for i, s in ipairs(list) do parts[i] = s[1] .. ':' .. s[2] end
  redis.call('HSET', KEYS[1], 'spans', table.concat(parts, ','), 'down_from', from, 'down_to', to)
end
if seen == nil or now > seen then redis.call('HSET', KEYS[1], 'seen', string.format('%d', now)) end
local out = {now}
for _, s in ipairs(list) do
  out[#out + 1] = tonumber(s[1])
  out[#out + 1] = tonumber(s[2])
end
return out
