-- PLACEHOLDER twin of RL.TOKEN, written by the Python client's helper to the shared calling
-- convention until the canonical clients/lua/token.lua lands (the lead replaces this file;
-- the clients' copies are then refreshed, and their tests check they are byte-identical).
--
-- EVALSHA <sha> 1 key limit window_ms [BURST b] [COST n] [NOW ms]
-- Returns the five integers of RL.TOKEN: allowed, limit (the bucket size), remaining,
-- retry_after_ms, reset_after_ms. A GCRA: the key holds the theoretical arrival time in
-- units of 1/limit ms (one token is window_ms units), so that whole rates stay exact.
local key = KEYS[1]
local function int(word, what, min, max)
  local n = tonumber(word)
  if not n or n ~= math.floor(n) or n < min or n > max then
    error({err = 'ERR ' .. what .. ' must be an integer from ' .. min .. ' to ' .. max})
  end
  return n
end
local limit = int(ARGV[1], 'limit', 1, 2147483647)
local window = int(ARGV[2], 'window_ms', 1, 2678400000)
local burst, cost, now = limit, 1, nil
local i = 3
while i <= #ARGV do
  local word = string.upper(ARGV[i])
  if word == 'BURST' then
    burst, i = int(ARGV[i + 1], 'BURST', 1, 2147483647), i + 2
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

-- Times relative to `now`, in units of 1/limit ms. The key holds the TAT as "ms fraction"
-- (the fraction in units, below limit), so that no number in a call passes 2^53.
local function ceil_ms(units) return math.ceil(units / limit) end
local capacity = burst * window
local ahead = 0 -- how far the bucket's TAT is ahead of now, in units
local stored = redis.call('GET', key)
if stored then
  local sep = string.find(stored, ' ', 1, true)
  local tat_ms, tat_frac = tonumber(string.sub(stored, 1, sep - 1)), tonumber(string.sub(stored, sep + 1))
  ahead = math.max(0, (tat_ms - now) * limit + tat_frac)
end
if cost > burst then
  return {0, burst, math.floor((capacity - ahead) / window), -1, ceil_ms(ahead)}
end
local after = ahead + cost * window
if after > capacity then
  return {0, burst, math.floor((capacity - ahead) / window), ceil_ms(after - capacity), ceil_ms(ahead)}
end
if cost > 0 then
  local value = string.format('%d %d', now + math.floor(after / limit), after % limit)
  redis.call('SET', key, value, 'PX', math.max(1, ceil_ms(after)))
  ahead = after
end
return {1, burst, math.floor((capacity - ahead) / window), 0, ceil_ms(ahead)}
