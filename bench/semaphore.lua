-- Counting semaphore in Lua on a sorted set of leases scored by their ends, the script
-- usually pasted for "at most N at once": the equivalent of
--   RL.ACQUIRE key limit lease_ms ID id
-- with cost 1, for bench/bench.sh and bench/instr.sh to compare against. A lease is
-- released with a plain `ZREM key id` (the twin of RL.RELEASE key id).
--
-- EVALSHA <sha> 1 key limit lease_ms id
-- Returns {allowed (1/0), limit, remaining, retry_after_ms, reset_after_ms}.
--
-- Leases whose end has passed are dropped, the rest counted; a new lease is added with its
-- end as its score, and the key lives as long as that lease (every lease has the same
-- length, so the newest ends last).
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local lease = tonumber(ARGV[2])
local id = ARGV[3]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local count = redis.call('ZCARD', key)

if count < limit then
  redis.call('ZADD', key, now + lease, id)
  redis.call('PEXPIRE', key, lease)
  return {1, limit, limit - count - 1, 0, lease}
end

-- Refused: a unit frees when the earliest lease ends; the key is empty when it expires.
local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
local reset = redis.call('PTTL', key)
if reset < 0 then reset = 0 end
return {0, limit, 0, tonumber(first[2]) - now, reset}
