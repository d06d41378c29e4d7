-- PLACEHOLDER for the canonical Lua twin of RL.SLIDE (clients/lua/slide.lua, written by the
-- Lua package's author); it follows the shared calling convention so that the clients can be
-- built and tested against it:
--   EVALSHA <sha> 1 key limit window_ms [limit window_ms ...] [COST n] [NOW ms]
-- answering RL.SLIDE's five integers. State: a hash of millisecond -> units recorded then.
local key = KEYS[1]
local windows, cost, now = {}, 1, nil
local i = 1
while ARGV[i] do
  local w = string.upper(ARGV[i])
  if w == 'COST' then cost = tonumber(ARGV[i + 1]); i = i + 2
  elseif w == 'NOW' then now = tonumber(ARGV[i + 1]); i = i + 2
  else
    table.insert(windows, {tonumber(ARGV[i]), tonumber(ARGV[i + 1])})
    i = i + 2
  end
end
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local longest = 0
for _, w in ipairs(windows) do longest = math.max(longest, w[2]) end
-- The records, oldest first, dropping those no window counts any more.
local flat = redis.call('HGETALL', key)
local recs = {}
for j = 1, #flat, 2 do
  local t, n = tonumber(flat[j]), tonumber(flat[j + 1])
  if t > now - longest then table.insert(recs, {t, n}) else redis.call('HDEL', key, flat[j]) end
end
table.sort(recs, function(a, b) return a[1] < b[1] end)
-- Per window: units in (now - w, now], and the wait until cost fits.
local best, refused = nil, false
for _, w in ipairs(windows) do
  local limit, span = w[1], w[2]
  local used = 0
  for _, r in ipairs(recs) do if r[1] > now - span then used = used + r[2] end end
  local wait = 0
  if cost > limit then
    wait = -1
  elseif used + cost > limit then
    local left = used
    for _, r in ipairs(recs) do
      if r[1] > now - span then
        left = left - r[2]
        if left + cost <= limit then wait = r[1] + span - now; break end
      end
    end
  end
  local remaining = math.max(limit - used, 0)
  local entry = {limit = limit, span = span, wait = wait, remaining = remaining, used = used}
  if wait ~= 0 then
    local worse = (not refused) or wait == -1 and best.wait ~= -1
      or (best.wait ~= -1 and wait > best.wait)
    if worse then best = entry end
    refused = true
  elseif not refused then
    local after = remaining - cost
    if not best or after < best.remaining - cost
      or (after == best.remaining - cost and span > best.span) then
      best = entry
    end
  end
end
local newest = recs[#recs] and recs[#recs][1] or nil
local function reset_at(last)
  if not last then return 0 end
  return math.max(last + longest - now, 0)
end
if refused then
  return {0, best.limit, best.remaining, best.wait, reset_at(newest)}
end
if cost > 0 then
  redis.call('HINCRBY', key, tostring(now), cost)
  newest = now
  redis.call('PEXPIRE', key, longest)
end
return {1, best.limit, best.remaining - cost, 0, reset_at(newest)}
