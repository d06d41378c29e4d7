-- Sub-interval counters in Lua, the equivalent of
--   RL.SUBWIN key limit window_ms resolution_ms
-- with cost 1, for bench/bench.sh to compare against: the usual script, a hash of counts
-- keyed by sub-interval number, summed on every call, with the trailing sub-interval
-- weighted like the module does. Its retry_after is only the time to the next sub-interval
-- (cheaper than the module's exact wait), which favours the script.
--
-- EVALSHA <sha> 1 key limit window_ms resolution_ms
-- Returns {allowed (1/0), limit, remaining, retry_after_ms, reset_after_ms}.
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local res = tonumber(ARGV[3])
local n = window / res

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local current = math.floor(now / res)
local offset = now % res

local fields = redis.call('HGETALL', key)
local full, trail, newest = 0, 0, -1
local stale = {}
for i = 1, #fields, 2 do
  local index = tonumber(fields[i])
  local count = tonumber(fields[i + 1])
  if index > current - n then
    full = full + count
    if index > newest then newest = index end
  elseif index == current - n then
    trail = trail + count
    if index > newest then newest = index end
  else
    stale[#stale + 1] = fields[i]
  end
end
if #stale > 0 then
  redis.call('HDEL', key, unpack(stale))
end
local used = full + math.ceil(trail * (res - 1 - offset) / res)

if used + 1 > limit then
  local reset = newest >= 0 and (newest + n + 1) * res - 1 - now or 0
  return {0, limit, limit - used, res - offset, reset}
end

redis.call('HINCRBY', key, current, 1)
local empty_at = (current + n + 1) * res - 1
redis.call('PEXPIREAT', key, empty_at)
return {1, limit, limit - used - 1, 0, empty_at - now}
