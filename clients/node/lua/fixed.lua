-- PLACEHOLDER for clients/lua/fixed.lua (the canonical Lua twins are written elsewhere in
-- the repository; `npm run sync-lua` copies them here, and test/lua.test.js checks that the
-- copies are byte-identical).
--
-- RL.FIXED's twin on plain Redis types: EVALSHA sha 1 key limit window_ms [ALIGN] [COST n] [NOW ms]
-- answers [allowed, limit, remaining, retry_after_ms, reset_after_ms]. The key is a hash
-- {count, end}, expiring at the window's end.
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local cost, now, align = 1, nil, false
local i = 3
while i <= #ARGV do
  local word = string.upper(ARGV[i])
  if word == 'ALIGN' then
    align = true
    i = i + 1
  elseif word == 'COST' then
    cost = tonumber(ARGV[i + 1])
    i = i + 2
  elseif word == 'NOW' then
    now = tonumber(ARGV[i + 1])
    i = i + 2
  else
    return redis.error_reply("ERR unknown option '" .. ARGV[i] .. "'")
  end
end
if not limit or not window or not cost or limit < 1 or window < 1 or cost < 0 then
  return redis.error_reply('ERR limit, window_ms and COST must be integers')
end
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local count, stop = 0, 0
local state = redis.call('HMGET', KEYS[1], 'count', 'end')
if state[1] and tonumber(state[2]) > now then
  count = tonumber(state[1])
  stop = tonumber(state[2])
end
local left = math.max(limit - count, 0)
local reset = 0
if stop > 0 then reset = stop - now end
if cost > limit then return { 0, limit, left, -1, reset } end
if count + cost > limit then return { 0, limit, left, reset, reset } end
if cost == 0 then return { 1, limit, left, 0, reset } end
if stop == 0 then
  if align then stop = now - now % window + window else stop = now + window end
end
count = count + cost
redis.call('HSET', KEYS[1], 'count', count, 'end', stop)
redis.call('PEXPIREAT', KEYS[1], stop)
return { 1, limit, limit - count, 0, stop - now }
