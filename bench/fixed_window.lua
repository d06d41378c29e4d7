-- Fixed window in Lua, the equivalent of
--   RL.FIXED key limit window_ms
-- with cost 1, for bench/bench.sh to compare against. Like the module (and unlike scripts
-- that read the reset time back from a TTL), it keeps the window's end in the value.
--
-- EVALSHA <sha> 1 key limit window_ms
-- Returns {allowed (1/0), limit, remaining, retry_after_ms, reset_after_ms}.
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local state = redis.call('HMGET', key, 'count', 'end')
local count = tonumber(state[1]) or 0
local window_end = tonumber(state[2]) or 0
if window_end <= now then
  count = 0
  window_end = now + window
end

if count + 1 > limit then
  return {0, limit, limit - count, window_end - now, window_end - now}
end

count = count + 1
redis.call('HSET', key, 'count', count, 'end', window_end)
redis.call('PEXPIREAT', key, window_end)
return {1, limit, limit - count, 0, window_end - now}
