-- Sliding-log rate limiter in Lua on a sorted set: the equivalent of
--   RL.SLIDE key limit window_ms
-- with one window and cost 1, for bench/bench.sh to compare against.
--
-- EVALSHA <sha> 1 key limit window_ms
-- Returns {allowed (1/0), limit, remaining, retry_after_ms, reset_after_ms}.
--
-- The log holds one member per allowed request, scored by its time in ms. A request at
-- `now` counts the members in (now - window, now]; only allowed requests are recorded.
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local count = redis.call('ZCARD', key)

if count < limit then
  -- Members must be unique: seconds and microseconds from TIME plus a random suffix.
  redis.call('ZADD', key, now, t[1] .. t[2] .. ':' .. math.random(1000000000))
  redis.call('PEXPIRE', key, window)
  return {1, limit, limit - count - 1, 0, window}
end

-- Refused: the request fits once the entry at rank (count - limit) leaves the window,
-- and the key is empty once its newest entry does: which is when the key expires,
-- since PEXPIRE was set when that entry was added.
local blocking = redis.call('ZRANGE', key, count - limit, count - limit, 'WITHSCORES')
local retry = tonumber(blocking[2]) + window - now
local reset = redis.call('PTTL', key)
if reset < 0 then reset = 0 end
return {0, limit, 0, retry, reset}
