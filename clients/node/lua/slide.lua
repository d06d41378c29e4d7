-- PLACEHOLDER for clients/lua/slide.lua (the canonical Lua twins are written elsewhere in
-- the repository; `npm run sync-lua` copies them here, and test/lua.test.js checks that the
-- copies are byte-identical).
--
-- RL.SLIDE's twin on plain Redis types: EVALSHA sha 1 key limit window_ms [limit window_ms ...] [COST n] [NOW ms]
-- answers [allowed, limit, remaining, retry_after_ms, reset_after_ms] of the deciding window.
-- The key is a sorted set of records "<ms>:<units>:<seq>" scored by their time.
local windows = {}
local cost, now = 1, nil
local i = 1
while i <= #ARGV do
  local word = string.upper(ARGV[i])
  if word == 'COST' then
    cost = tonumber(ARGV[i + 1])
  elseif word == 'NOW' then
    now = tonumber(ARGV[i + 1])
  else
    local l, w = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
    if not l or not w or l < 1 or w < 1 then
      return redis.error_reply("ERR unknown option '" .. ARGV[i] .. "'")
    end
    windows[#windows + 1] = { l, w }
  end
  i = i + 2
end
if #windows == 0 or not cost or cost < 0 then
  return redis.error_reply('ERR wrong number of arguments for RL.SLIDE')
end
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local longest = 0
for _, lw in ipairs(windows) do
  if lw[2] > longest then longest = lw[2] end
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - longest)
local records = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local times, units, seq = {}, {}, 0
for j = 1, #records, 2 do
  local n, s = string.match(records[j], '^%d+:(%d+):(%d+)$')
  times[#times + 1] = tonumber(records[j + 1])
  units[#units + 1] = tonumber(n)
  if tonumber(s) > seq then seq = tonumber(s) end
end
local newest = times[#times]
local function reset_for(extra)
  local last = newest
  if extra then last = now end
  if not last then return 0 end
  return last + longest - now
end
-- Per window: units used, remaining, and the wait until `cost` more fit.
local decide, decide_wait, decide_left, allowed = nil, -2, nil, true
for _, lw in ipairs(windows) do
  local l, w = lw[1], lw[2]
  local used = 0
  for j = 1, #times do
    if times[j] > now - w then used = used + units[j] end
  end
  local left = math.max(l - used, 0)
  local wait = 0
  if cost > l then
    wait = -1
  elseif used + cost > l then
    local need = used + cost - l
    for j = 1, #times do
      if times[j] > now - w then
        need = need - units[j]
        if need <= 0 then
          wait = times[j] + w - now
          break
        end
      end
    end
  end
  if wait ~= 0 then
    allowed = false
    -- refused: the window needing the longest wait, never (-1) the longest of all
    local longer = (wait == -1 and decide_wait ~= -1) or (decide_wait ~= -1 and wait > decide_wait)
    if decide_wait == -2 or longer then
      decide, decide_wait, decide_left = lw, wait, left
    end
  elseif allowed and (decide == nil or left - cost < decide_left
    or (left - cost == decide_left and w > decide[2])) then
    decide, decide_left = lw, left - cost
  end
end
if not allowed then
  return { 0, decide[1], decide_left, decide_wait, reset_for(false) }
end
if cost == 0 then return { 1, decide[1], decide_left, 0, reset_for(false) } end
redis.call('ZADD', KEYS[1], now, now .. ':' .. cost .. ':' .. (seq + 1))
local reset = reset_for(true)
redis.call('PEXPIRE', KEYS[1], reset)
return { 1, decide[1], decide_left, 0, reset }
