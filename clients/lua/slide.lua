-- PLACEHOLDER twin of RL.SLIDE, written by the Python client's helper to the shared calling
-- convention until the canonical clients/lua/slide.lua lands (the lead replaces this file;
-- the clients' copies are then refreshed, and their tests check they are byte-identical).
--
-- EVALSHA <sha> 1 key limit window_ms [limit window_ms ...] [COST n] [NOW ms]
-- Returns the five integers of RL.SLIDE: allowed, limit, remaining, retry_after_ms,
-- reset_after_ms. The log is a list of "ms:units", oldest first, one entry per millisecond
-- that holds requests; only allowed requests are recorded.
local key = KEYS[1]
local function int(word, what, min, max)
  local n = tonumber(word)
  if not n or n ~= math.floor(n) or n < min or n > max then
    error({err = 'ERR ' .. what .. ' must be an integer from ' .. min .. ' to ' .. max})
  end
  return n
end
local windows, cost, now = {}, 1, nil
local i = 1
while i <= #ARGV and tonumber(ARGV[i]) do
  local limit = int(ARGV[i], 'limit', 1, 4294967295)
  local window = int(ARGV[i + 1], 'window_ms', 1, 2678400000)
  windows[#windows + 1] = {limit, window}
  i = i + 2
end
if #windows == 0 or #windows > 8 then
  return redis.error_reply("ERR wrong number of arguments for 'RL.SLIDE' command")
end
while i <= #ARGV do
  local word = string.upper(ARGV[i])
  if word == 'COST' then
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

local longest = 0
for _, w in ipairs(windows) do
  if w[2] > longest then longest = w[2] end
end
-- Read the log, dropping what no window of this call can count.
local times, units = {}, {}
for _, entry in ipairs(redis.call('LRANGE', key, 0, -1)) do
  local sep = string.find(entry, ':', 1, true)
  local ms, n = tonumber(string.sub(entry, 1, sep - 1)), tonumber(string.sub(entry, sep + 1))
  if ms > now - longest then
    times[#times + 1], units[#units + 1] = ms, n
  end
end
if #times > 0 and times[#times] > now then now = times[#times] end -- time never runs backwards

-- Per window: units in (now - window, now], and when `cost` more would fit.
local refused, worst, tightest = false, nil, nil
for _, w in ipairs(windows) do
  local limit, window = w[1], w[2]
  local used, first = 0, nil
  for j = 1, #times do
    if times[j] > now - window then
      used = used + units[j]
      first = first or j
    end
  end
  local retry = 0
  if cost > limit then
    retry = -1
  elseif used + cost > limit then
    local need, j = used + cost - limit, first
    while need > 0 do
      need = need - units[j]
      retry = times[j] + window - now
      j = j + 1
    end
  end
  local r = {limit = limit, window = window, used = used, retry = retry}
  if retry ~= 0 then
    refused = true
    if not worst or retry == -1 and worst.retry ~= -1 or worst.retry ~= -1 and retry > worst.retry then
      worst = r
    end
  end
  local left = limit - used - cost
  if not tightest or left < tightest.limit - tightest.used - cost
    or left == tightest.limit - tightest.used - cost and window > tightest.window then
    tightest = r
  end
end

local function reset_after()
  if #times == 0 then return 0 end
  return times[#times] + longest - now
end
if refused then
  return {0, worst.limit, math.max(0, worst.limit - worst.used), worst.retry, reset_after()}
end
if cost > 0 then
  if #times > 0 and times[#times] == now then
    units[#units] = units[#units] + cost
  else
    times[#times + 1], units[#units + 1] = now, cost
  end
  local entries = {}
  for j = 1, #times do entries[j] = times[j] .. ':' .. units[j] end
  redis.call('DEL', key)
  for j = 1, #entries, 1000 do
    redis.call('RPUSH', key, unpack(entries, j, math.min(j + 999, #entries)))
  end
  redis.call('PEXPIRE', key, reset_after())
end
return {1, tightest.limit, tightest.limit - tightest.used - cost, 0, reset_after()}
