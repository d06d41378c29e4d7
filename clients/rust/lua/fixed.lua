-- RL.FIXED in Lua: the twin of the module's fixed window, for servers where MODULE LOAD is
-- not allowed (the client packages run it with fallback="lua"). It takes the words of
--
--   RL.FIXED key limit window_ms [ALIGN] [COST n] [NOW ms]
--
-- as EVALSHA <sha> 1 <key> <limit> <window_ms> [ALIGN] [COST n] [NOW ms], and answers as the
-- module does (docs/commands.md, RL.FIXED): {allowed, limit, remaining, retry_after_ms,
-- reset_after_ms}, the same integers for the same calls at the same NOW, and the same errors
-- for bad input, word for word (ERR limit must be an integer from 1 to 4294967295, ERR
-- unknown option 'X', ...). tests/it/lua_twins.rs runs random call sequences on both, call by
-- call. A window_ms is a duration as the module takes it: milliseconds, or an integer with a
-- unit (250ms, 60s, 5m, 1h, 1d).
--
-- A window opens at the first request after the previous one has ended, or, with ALIGN, at
-- the multiple of window_ms since the epoch that holds that request. Its end is kept in the
-- state, so every call in one window reports the same absolute reset. A call recorded in an
-- open window with a longer window_ms moves its end later (to the window's start plus the
-- longer window; with ALIGN, to the end of the longer period holding the call, when that
-- period holds the whole window); a shorter one never moves it. A new limit applies at once.
-- A call behind the key's latest time is decided at that time, and its waits are measured
-- from its own (src/core/mod.rs, Decision::seen_from_behind).
--
-- State: a string under the key, "RL.FIXED:1" then four doubles (struct '>dddd'): the
-- latest time, the window's end, its count and its length (from its start to its end),
-- 42 bytes. A call that records sets it with its expiry in one SET ... PXAT: the key expires
-- when the window ends, or, after a NOW behind the server clock, as much later as the state
-- is behind it, as the module sets it; after such a call the key's PTTL is reset_after_ms. A
-- refused call or COST 0 writes nothing; a missing key answers as a window not yet open.
--
-- Cost per call: O(1): a GET, and a TIME and a SET when it records. About 70,000
-- instructions of the server (callgrind), 7 times RL.FIXED's.
--
-- Where it differs from the module:
-- - The key is a string, not a module key: TYPE says string, the module's commands answer
--   WRONGTYPE on it, and it is not in INFO ratelimit, keyspace events, RL.TOP or RL.ALL. The
--   other twins on it answer WRONGTYPE key holds a RL.FIXED limiter, not RL.TOKEN.
-- - NOW is not bounded: the module refuses a NOW more than ratelimit.now-max-ahead-ms
--   (default 1000) ahead of the server clock, a setting a script cannot read; the twin takes
--   any NOW, as the module set to -1 does. Pass NOW only from trusted code.
-- - It replicates as its effects (SET ... PXAT), and is not refused under maxmemory until it
--   writes (the module's command is deny-oom). It needs Redis 6.2 or later (SET ... PXAT);
--   tests/it/lua_twins.rs runs on Redis 7.0 and 8.2 and on Valkey 9.1.

local TAG, COMMAND = 'RL.FIXED:1', 'RL.FIXED'
local key = KEYS[1]
if #KEYS ~= 1 or #ARGV < 2 then
  return redis.error_reply("ERR wrong number of arguments for '" .. COMMAND .. "' command")
end

-- The grammar's primitives, as the module's (src/core/args.rs). A decimal integer from min to
-- max written as Redis writes integers (no sign, no leading zero), max given as its decimal
-- text and as a number (the text is exact past 2^53); nil when it is not one.
local function int(word, min, max, max_number)
  if not (word:find('^[1-9]%d*$') or word == '0') or #word > #max then
    return nil
  end
  local v = tonumber(word)
  if v < min then
    return nil
  end
  if #word == #max then
    if #max < 16 then
      if v > max_number then
        return nil
      end
    else
      -- Digits of the same length compare as numbers, byte by byte.
      for k = 1, #max do
        local a, b = word:byte(k), max:byte(k)
        if a ~= b then
          if a > b then
            return nil
          end
          break
        end
      end
    end
  end
  return v
end

local function range_error(name, min, max)
  return redis.error_reply('ERR ' .. name .. ' must be an integer from ' .. min .. ' to ' .. max)
end

-- A duration: an integer of milliseconds, or an integer with a unit (ms, s, m, h, d, in any
-- case: 250ms, 60s, 5m, 1h, 1d), as the module reads one; nil when it is not one in
-- 1..max_number.
local UNITS = { ms = 1, s = 1000, m = 60000, h = 3600000, d = 86400000 }
local function duration(word, max, max_number)
  if word:find('%d$') then
    return int(word, 1, max, max_number)
  end
  local digits, unit = word:match('^(%d+)(%a+)$')
  local per = unit and UNITS[unit:lower()]
  if not per or not (digits:find('^[1-9]%d*$') or digits == '0') or #digits > 20 then
    return nil
  end
  local v = tonumber(digits) * per
  if v < 1 or v > max_number then
    return nil
  end
  return v
end

local function duration_error(name, min, max)
  return redis.error_reply('ERR ' .. name .. ' must be a duration from ' .. min .. ' to ' .. max
    .. ' ms: an integer of ms, or with a unit (250ms, 60s, 5m, 1h, 1d)')
end

-- The error for a word that is no option, quoting its first 64 characters as the module
-- does: read as UTF-8, each invalid sequence replaced by U+FFFD (String::from_utf8_lossy).
local function unknown_option(word)
  local out, chars, i, len = {}, 0, 1, #word
  while i <= len and chars < 64 do
    local b = word:byte(i)
    local need, lo, hi = -1, 0x80, 0xBF
    if b < 0x80 then
      need = 0
    elseif b >= 0xC2 and b <= 0xDF then
      need = 1
    elseif b == 0xE0 then
      need, lo = 2, 0xA0
    elseif (b >= 0xE1 and b <= 0xEC) or b == 0xEE or b == 0xEF then
      need = 2
    elseif b == 0xED then
      need, hi = 2, 0x9F
    elseif b == 0xF0 then
      need, lo = 3, 0x90
    elseif b >= 0xF1 and b <= 0xF3 then
      need = 3
    elseif b == 0xF4 then
      need, hi = 3, 0x8F
    end
    local j = 1
    while j <= need do
      local c = word:byte(i + j)
      if not c or c < lo or c > hi then
        break
      end
      lo, hi = 0x80, 0xBF
      j = j + 1
    end
    if need >= 0 and j > need then
      out[#out + 1] = word:sub(i, i + need)
      i = i + need + 1
    else
      out[#out + 1] = '\239\191\189'
      i = i + j
    end
    chars = chars + 1
  end
  return redis.error_reply("ERR unknown option '" .. table.concat(out) .. "'")
end

-- The error for a key this twin cannot use: another twin's, or another type.
local function wrong_type()
  local held = redis.pcall('GET', key)
  local tag
  if type(held) == 'string' then
    tag = held:match('^(RL%.%u+):1')
  else
    local last = redis.pcall('ZRANGE', key, -1, -1)
    if type(last) == 'table' and not last.err and last[1] and last[1]:find('^RL%.SLIDE:1') then
      tag = 'RL.SLIDE'
    end
  end
  if tag and tag ~= COMMAND then
    return redis.error_reply('WRONGTYPE key holds a ' .. tag .. ' limiter, not ' .. COMMAND)
  end
  return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end

local limit = int(ARGV[1], 1, '4294967295', 4294967295)
if not limit then
  return range_error('limit', 1, '4294967295')
end
local window = duration(ARGV[2], '2678400000', 2678400000)
if not window then
  return duration_error('window_ms', 1, '2678400000')
end
-- Options in any order, each at most once.
local align, cost, now
local i = 3
while i <= #ARGV do
  local word = ARGV[i]
  local keyword = word:upper()
  if keyword == 'ALIGN' then
    if align then
      return redis.error_reply('ERR option ALIGN given more than once')
    end
    align = true
    i = i + 1
  elseif keyword == 'COST' or keyword == 'NOW' then
    if (keyword == 'COST' and cost) or (keyword == 'NOW' and now) then
      return redis.error_reply('ERR option ' .. keyword .. ' given more than once')
    end
    local value = ARGV[i + 1]
    if not value then
      return redis.error_reply('ERR option ' .. keyword .. ' needs a value')
    end
    if keyword == 'COST' then
      cost = int(value, 0, '9223372036854775807', 9223372036854775807)
      if not cost then
        return range_error('COST', 0, '9223372036854775807')
      end
    else
      now = int(value, 0, '253402300799999', 253402300799999)
      if not now then
        return range_error('NOW', 0, '253402300799999')
      end
    end
    i = i + 2
  else
    return unknown_option(word)
  end
end
cost = cost or 1
-- The caller's time: its NOW, or the server clock (read when needed: the key's expiry
-- follows it).
local server
if not now then
  local t = redis.call('TIME')
  server = t[1] * 1000 + (t[2] - t[2] % 1000) / 1000
  now = server
end
local caller = now

-- The state: none yet is a window that never opened.
local latest, wend, count, length = 0, 0, 0, window
local held = redis.pcall('GET', key)
if type(held) == 'table' then
  return wrong_type()
elseif held then
  local tag
  if #held == 42 then
    tag, latest, wend, count, length = struct.unpack('>c10dddd', held)
  end
  if tag ~= TAG then
    return wrong_type()
  end
end

-- Decided at the key's latest time when the caller is behind it.
if latest > now then
  now = latest
end
local open = now < wend
local counted = open and count or 0
local allowed = counted + cost <= limit
local start = wend - length
if start < 0 then
  start = 0
end
local ends
if not open then
  ends = align and (now - now % window + window) or (now + window)
elseif allowed and cost > 0 then
  -- A longer window recorded in the open one may end it later, never earlier.
  local longer
  if align then
    local period = now - now % window
    longer = period <= start and period + window or 0
  else
    longer = start + window
  end
  ends = longer > wend and longer or wend
else
  ends = wend
end
local after = allowed and counted + cost or counted
local retry
if allowed then
  retry = 0
elseif cost > limit then
  retry = -1
else
  retry = ends - now
end
local reset = after > 0 and ends - now or 0
-- Waits measured from the caller's time.
local behind = latest - caller
if behind > 0 then
  if retry > 0 then
    retry = retry + behind
  end
  if reset > 0 then
    reset = reset + behind
  end
end
if not allowed or cost == 0 then
  return { allowed and 1 or 0, limit, limit > after and limit - after or 0, retry, reset }
end

-- Record. The key expires when the window ends, as much later as it is behind the server
-- clock.
if not server then
  local t = redis.call('TIME')
  server = t[1] * 1000 + (t[2] - t[2] % 1000) / 1000
end
local lag = (caller > server and caller or server) - now
redis.call('SET', key, struct.pack('>c10dddd', TAG, now, ends, after, open and ends - start or window),
  'PXAT', string.format('%d', ends + (lag > 0 and lag or 0)))
return { 1, limit, limit - after, 0, ends - caller }
