-- PLACEHOLDER twin of RL.FIXED, written by the Python client's helper to the shared calling
-- convention until the canonical clients/lua/fixed.lua lands (the lead replaces this file;
-- the clients' copies are then refreshed, and their tests check they are byte-identical).
--
-- EVALSHA <sha> 1 key limit window_ms [ALIGN] [COST n] [NOW ms]
-- Returns the five integers of RL.FIXED: allowed, limit, remaining, retry_after_ms,
-- reset_after_ms. The count and the window's end live in a hash; the key expires at the end.
local key = KEYS[1]
local function int(word, what, min, max)
  local n = tonumber(word)
  if not n or n ~= math.floor(n) or n < min or n > max then
    error({err = 'ERR ' .. what .. ' must be an integer from ' .. min .. ' to ' .. max})
  end
  return n
end
local limit = int(ARGV[1], 'limit', 1, 4294967295)
local window = int(ARGV[2], 'window_ms', 1, 2678400000)
local align, cost, now = false, 1, nil
local i = 3
while i <= #ARGV do
  local word = string.upper(ARGV[i])
  if word == 'ALIGN' then
    align, i = true, i + 1
  elseif word == 'COST' then
    cost, i = int(ARGV[i + 1], 'COST', 0, 4294967295), i + 2
  elseif word == 'NOW' then
    now, i = int(ARGV[i + 1], 'NOW', 0, 9007199254740991), i + 2
  else
    return redis.error_reply("ERR unknown option '" .. ARGV[i] .. "'")
  end
end
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local state = redis.call('HMGET', key, 'count', 'end')
local count, window_end = tonumber(state[1]), tonumber(state[2])
if not count or not window_end or window_end <= now then
  count, window_end = 0, nil
end
local reset = window_end and window_end - now or 0
if cost > limit then
  return {0, limit, math.max(0, limit - count), -1, reset}
end
if count + cost > limit then
  return {0, limit, math.max(0, limit - count), reset, reset}
end
if cost == 0 then
  return {1, limit, limit - count, 0, reset}
end
if not window_end then
  if align then
    window_end = (math.floor(now / window) + 1) * window
  else
    window_end = now + window
  end
end
count = count + cost
redis.call('HSET', key, 'count', count, 'end', window_end)
redis.call('PEXPIRE', key, window_end - now)
return {1, limit, limit - count, 0, window_end - now}
