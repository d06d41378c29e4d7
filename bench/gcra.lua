-- GCRA in Lua, the equivalent of
--   RL.TOKEN key limit window_ms BURST burst             (max_delay 0)
--   RL.LEAKY key limit window_ms BURST burst MAXDELAY ms  (max_delay > 0: schedules)
-- with cost 1, for bench/bench.sh to compare against. It keeps the theoretical arrival time
-- (TAT) in a string key, in float milliseconds, as hand-written versions usually do.
--
-- EVALSHA <sha> 1 key limit window_ms burst max_delay_ms
-- Returns {allowed (1/0), limit, remaining, retry_after_ms, reset_after_ms}.
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local max_delay = tonumber(ARGV[4])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local interval = window / limit
local capacity = burst * interval + max_delay

local tat = tonumber(redis.call('GET', key)) or now
if tat < now then tat = now end
local new_tat = tat + interval
local delay = new_tat - burst * interval - now

if delay > max_delay then
  local remaining = math.floor((capacity - (tat - now)) / interval)
  return {0, math.floor(capacity / interval), math.max(0, remaining), math.ceil(delay - max_delay), math.ceil(tat - now)}
end

local ttl = math.max(1, math.ceil(new_tat - now))
redis.call('SET', key, string.format('%.3f', new_tat), 'PX', ttl)
local remaining = math.floor((capacity - (new_tat - now)) / interval)
return {1, math.floor(capacity / interval), remaining, math.max(0, math.ceil(delay)), ttl}
