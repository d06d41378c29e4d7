-- PLACEHOLDER for the canonical Lua twin of RL.FIXED (clients/lua/fixed.lua, written by the
-- Lua package's author); it follows the shared calling convention so that the clients can be
-- built and tested against it:
--   EVALSHA <sha> 1 key limit window_ms [ALIGN] [COST n] [NOW ms]
-- answering RL.FIXED's five integers: allowed, limit, remaining, retry_after_ms, reset_after_ms.
-- State: a hash with the window's count (c) and end (e), expiring at the end.
local key = KEYS[1]
local limit, window = tonumber(ARGV[1]), tonumber(ARGV[2])
local align, cost, now = false, 1, nil
local i = 3
while ARGV[i] do
  local w = string.upper(ARGV[i])
  if w == 'ALIGN' then align = true; i = i + 1
  elseif w == 'COST' then cost = tonumber(ARGV[i + 1]); i = i + 2
  elseif w == 'NOW' then now = tonumber(ARGV[i + 1]); i = i + 2
  else return redis.error_reply("ERR unknown option '" .. ARGV[i] .. "'") end
end
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local count, stop = 0, nil
local st = redis.call('HMGET', key, 'c', 'e')
if st[1] and tonumber(st[2]) > now then
  count, stop = tonumber(st[1]), tonumber(st[2])
end
if cost > limit then
  local reset = stop and (stop - now) or 0
  return {0, limit, math.max(limit - count, 0), -1, reset}
end
if not stop then
  if align then stop = now - (now % window) + window else stop = now + window end
  if cost == 0 then return {1, limit, limit, 0, 0} end
end
if count + cost > limit then
  return {0, limit, math.max(limit - count, 0), stop - now, stop - now}
end
if cost > 0 then
  redis.call('HSET', key, 'c', count + cost, 'e', stop)
  redis.call('PEXPIRE', key, stop - now)
end
return {1, limit, limit - count - cost, 0, stop - now}
