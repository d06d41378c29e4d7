-- Two token buckets (GCRA) decided together in Lua, all or nothing: the equivalent of
--   RL.ALL 2 key1 key2 TOKEN limit1 window1 TOKEN limit2 window2 COST cost2
-- (BURST = limit, the first at cost 1), for bench/bench.sh and bench/instr.sh to compare
-- against. Each bucket keeps its theoretical arrival time (TAT) in a string key, in float
-- milliseconds, as bench/gcra.lua does; both are checked before either is written.
--
-- EVALSHA <sha> 2 key1 key2 limit1 window1 limit2 window2 cost2
-- Returns {allowed (1/0), limit, remaining, retry_after_ms, reset_after_ms} of the bucket
-- that decided (refused: the longest wait; allowed: the least remaining).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local costs = {1, tonumber(ARGV[5])}
local limits = {tonumber(ARGV[1]), tonumber(ARGV[3])}
local windows = {tonumber(ARGV[2]), tonumber(ARGV[4])}

local checked = {}
local allowed = true
for i = 1, 2 do
  local limit, cost = limits[i], costs[i]
  local interval = windows[i] / limit
  local capacity = limit * interval
  local tat = tonumber(redis.call('GET', KEYS[i])) or now
  if tat < now then tat = now end
  local new_tat = tat + cost * interval
  local wait = new_tat - capacity - now
  local c = {limit = limit, interval = interval, capacity = capacity, tat = tat, new_tat = new_tat}
  if wait > 0 then
    allowed = false
    c.allowed = false
    c.retry = math.ceil(wait)
    c.remaining = math.max(0, math.floor((capacity - (tat - now)) / interval))
    c.reset = math.ceil(tat - now)
  else
    c.allowed = true
    c.retry = 0
    c.remaining = math.floor((capacity - (new_tat - now)) / interval)
    c.reset = math.max(1, math.ceil(new_tat - now))
  end
  checked[i] = c
end

local best
if allowed then
  for i = 1, 2 do
    local c = checked[i]
    redis.call('SET', KEYS[i], string.format('%.3f', c.new_tat), 'PX', c.reset)
    if best == nil or c.remaining < best.remaining then best = c end
  end
else
  for i = 1, 2 do
    local c = checked[i]
    if not c.allowed and (best == nil or c.retry > best.retry) then best = c end
  end
end
local reset = math.max(checked[1].reset, checked[2].reset)
return {allowed and 1 or 0, best.limit, best.remaining, best.retry, reset}
