-- Records a pass of a client's schedule loop and tells the latest span
-- during which no client ran one: ticks in it were missed (catch-up).
-- KEYS[1] -> clock HASH (seen, down_from, down_to)
-- ARGV[1] -> a gap between passes longer than this, ms, is a span when no
--            client ran
-- Returns {now ms, down_from ms, down_to ms}, -1 for both without such a
-- span. With no pass ever recorded, every instant before now counts as
-- missed. A rerun records the same pass again.
if not string.find(ARGV[1], '^%d+$') then return redis.error_reply('schedule_clock.lua: gap ' .. ARGV[1] .. ' is no whole number') end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local r = redis.call('HMGET', KEYS[1], 'seen', 'down_from', 'down_to')
local seen = tonumber(r[1] or '')
if seen == nil then
  redis.call('HSET', KEYS[1], 'down_from', '0', 'down_to', string.format('%d', now))
  r[2], r[3] = '0', string.format('%d', now)
elseif now - seen > tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'down_from', r[1], 'down_to', string.format('%d', now))
  r[2], r[3] = r[1], string.format('%d', now)
end
if seen == nil or now > seen then redis.call('HSET', KEYS[1], 'seen', string.format('%d', now)) end
return {now, tonumber(r[2] or '-1'), tonumber(r[3] or '-1')}
