-- PLACEHOLDER for the canonical Lua twin of RL.TOKEN (clients/lua/token.lua, written by the
-- Lua package's author); it follows the shared calling convention so that the clients can be
-- built and tested against it:
--   EVALSHA <sha> 1 key limit window_ms [BURST b] [COST n] [NOW ms]
-- answering RL.TOKEN's five integers. GCRA: the key holds the theoretical arrival time (ms).
local key = KEYS[1]
local limit, window = tonumber(ARGV[1]), tonumber(ARGV[2])
local burst, cost, now = limit, 1, nil
local i = 3
while ARGV[i] do
  local w = string.upper(ARGV[i])
  if w == 'BURST' then burst = tonumber(ARGV[i + 1]); i = i + 2
  elseif w == 'COST' then cost = tonumber(ARGV[i + 1]); i = i + 2
  elseif w == 'NOW' then now = tonumber(ARGV[i + 1]); i = i + 2
  else return redis.error_reply("ERR unknown option '" .. ARGV[i] .. "'") end
end
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local interval = window / limit
local tat = tonumber(redis.call('GET', key) or now)
if tat < now then tat = now end
local function whole(ms) return math.ceil(ms - 1e-9) end
local held = tat - now
local remaining = math.floor((burst * interval - held) / interval + 1e-9)
if remaining < 0 then remaining = 0 end
if cost > burst then return {0, burst, remaining, -1, whole(held)} end
local new_tat = tat + cost * interval
local allow_at = new_tat - burst * interval
if allow_at > now then
  return {0, burst, remaining, whole(allow_at - now), whole(held)}
end
if cost > 0 then
  redis.call('SET', key, string.format('%.3f', new_tat), 'PX', whole(new_tat - now))
end
return {1, burst, math.floor((burst * interval - (new_tat - now)) / interval + 1e-9), 0, whole(new_tat - now)}
