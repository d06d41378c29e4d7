-- PLACEHOLDER for clients/lua/token.lua (the canonical Lua twins are written elsewhere in
-- the repository; `npm run sync-lua` copies them here, and test/lua.test.js checks that the
-- copies are byte-identical).
--
-- RL.TOKEN's twin on plain Redis types: EVALSHA sha 1 key limit window_ms [BURST b] [COST n] [NOW ms]
-- answers [allowed, burst, remaining, retry_after_ms, reset_after_ms]. GCRA: the key holds
-- the theoretical arrival time in units of 1/limit ms, so one token is window_ms units.
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local cost, now, burst = 1, nil, nil
local i = 3
while i <= #ARGV do
  local word = string.upper(ARGV[i])
  if word == 'BURST' then
    burst = tonumber(ARGV[i + 1])
  elseif word == 'COST' then
    cost = tonumber(ARGV[i + 1])
  elseif word == 'NOW' then
    now = tonumber(ARGV[i + 1])
  else
    return redis.error_reply("ERR unknown option '" .. ARGV[i] .. "'")
  end
  i = i + 2
end
burst = burst or limit
if not limit or not window or not cost or limit < 1 or window < 1 or burst < 1 or cost < 0 then
  return redis.error_reply('ERR limit, window_ms, BURST and COST must be integers')
end
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local unit = now * limit
local tau = burst * window
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < unit then tat = unit end
local function ceil_ms(units) return math.ceil(units / limit) end
local left = math.floor((tau - (tat - unit)) / window)
if left < 0 then left = 0 end
if cost > burst then return { 0, burst, left, -1, ceil_ms(tat - unit) } end
local new_tat = tat + cost * window
if new_tat - unit > tau then
  return { 0, burst, left, ceil_ms(new_tat - tau - unit), ceil_ms(tat - unit) }
end
if cost == 0 then return { 1, burst, left, 0, ceil_ms(tat - unit) } end
local reset = ceil_ms(new_tat - unit)
redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', reset)
return { 1, burst, math.floor((tau - (new_tat - unit)) / window), 0, reset }
