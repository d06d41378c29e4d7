-- RL.TOKEN in Lua: the twin of the module's token bucket, for servers where MODULE LOAD is
-- not allowed (the client packages run it with fallback="lua"). It takes the words of
--
--   RL.TOKEN key limit window_ms [BURST b] [COST n] [NOW ms]
--
-- as EVALSHA <sha> 1 <key> <limit> <window_ms> [BURST b] [COST n] [NOW ms], and answers as the
-- module does (docs/commands.md, RL.TOKEN): {allowed, limit, remaining, retry_after_ms,
-- reset_after_ms}, the same integers for the same calls at the same NOW, and the same errors
-- for bad input, word for word (ERR limit must be an integer from 1 to 2147483647, ERR
-- unknown option 'X', ...). tests/it/lua_twins.rs runs random call sequences on both, call by
-- call. A window_ms is a duration as the module takes it: milliseconds, or an integer with a
-- unit (250ms, 60s, 5m, 1h, 1d).
--
-- The bucket is the module's GCRA (src/core/gcra): time is counted in ticks of 1/limit ms, so
-- one token is exactly window_ms ticks, and the state is the debt, how far in ticks the
-- theoretical arrival time runs ahead of the latest call. A request of COST n needs
-- debt + n*window_ms ticks within BURST*window_ms. When a call changes window_ms, the units
-- owed carry over, re-timed at the new rate (rounded up); a new limit or BURST applies at
-- once. A call behind the key's latest time is decided at that time, and its waits are
-- measured from its own (src/core/mod.rs, Decision::seen_from_behind). Ticks go past 2^53
-- (BURST*window_ms reaches 5.8e18), where a Lua number is no longer exact: below 2^52 the
-- arithmetic is on Lua numbers, above on integers of 16-bit limbs, exact either way.
--
-- State: a string under the key, "RL.TOKEN:1" then five doubles (struct '>ddddd'): the latest
-- time, the debt's high and low 32 bits, and the limit and window_ms it is counted in, 50
-- bytes. A call that takes tokens sets it with its expiry in one SET ... PXAT: the key
-- expires when the bucket is full again, or, after a NOW behind the server clock, as much
-- later as the state is behind it, as the module sets it; after such a call the key's PTTL is
-- reset_after_ms. A refused call or COST 0 writes nothing; a missing key answers as a full
-- bucket.
--
-- Cost per call: O(1): a GET, and a TIME and a SET when it takes tokens. About 75,000
-- instructions of the server (callgrind), 7 times RL.TOKEN's; a few times more past 2^52
-- ticks.
--
-- Where it differs from the module:
-- - The key is a string, not a module key: TYPE says string, the module's commands answer
--   WRONGTYPE on it, and it is not in INFO ratelimit, keyspace events, RL.TOP or RL.ALL. The
--   other twins on it answer WRONGTYPE key holds a RL.TOKEN limiter, not RL.FIXED.
-- - A reply integer past 2^53 (a wait or a reset of 285,000 years or more: a BURST of
--   billions at a token an hour or slower) is a Lua number, the nearest to the module's
--   integer (and at most 2^63 - 1024 where the module answers 2^63 - 1). Decisions and the
--   key's expiry stay exact.
-- - NOW is not bounded: the module refuses a NOW more than ratelimit.now-max-ahead-ms
--   (default 1000) ahead of the server clock, a setting a script cannot read; the twin takes
--   any NOW, as the module set to -1 does. Pass NOW only from trusted code.
-- - It replicates as its effects (SET ... PXAT), and is not refused under maxmemory until it
--   writes (the module's command is deny-oom). It needs Redis 6.2 or later (SET ... PXAT);
--   tests/it/lua_twins.rs runs on Redis 7.0 and 8.2 and on Valkey 9.1.

local TAG, COMMAND = 'RL.TOKEN:1', 'RL.TOKEN'
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

local limit = int(ARGV[1], 1, '2147483647', 2147483647)
if not limit then
  return range_error('limit', 1, '2147483647')
end
local window = duration(ARGV[2], '2678400000', 2678400000)
if not window then
  return duration_error('window_ms', 1, '2678400000')
end
-- Options in any order, each at most once.
local burst, cost, cost_word, now
local i = 3
while i <= #ARGV do
  local word = ARGV[i]
  local keyword = word:upper()
  if keyword == 'BURST' or keyword == 'COST' or keyword == 'NOW' then
    if (keyword == 'BURST' and burst) or (keyword == 'COST' and cost) or (keyword == 'NOW' and now) then
      return redis.error_reply('ERR option ' .. keyword .. ' given more than once')
    end
    local value = ARGV[i + 1]
    if not value then
      return redis.error_reply('ERR option ' .. keyword .. ' needs a value')
    end
    if keyword == 'BURST' then
      burst = int(value, 1, '2147483647', 2147483647)
      if not burst then
        return range_error('BURST', 1, '2147483647')
      end
    elseif keyword == 'COST' then
      cost, cost_word = int(value, 0, '9223372036854775807', 9223372036854775807), value
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
burst, cost = burst or limit, cost or 1
-- The caller's time: its NOW, or the server clock (read when needed: the key's expiry
-- follows it).
local server
if not now then
  local t = redis.call('TIME')
  server = t[1] * 1000 + (t[2] - t[2] % 1000) / 1000
  now = server
end
local caller = now

-- The state: none yet is a full bucket under the call's parameters. The debt is kept as
-- two 32-bit halves, exact past 2^53.
local latest, debt_high, debt_low, held_limit, held_window = 0, 0, 0, limit, window
local held = redis.pcall('GET', key)
if type(held) == 'table' then
  return wrong_type()
elseif held then
  local tag
  if #held == 50 then
    tag, latest, debt_high, debt_low, held_limit, held_window = struct.unpack('>c10ddddd', held)
  end
  if tag ~= TAG then
    return wrong_type()
  end
end

-- Decided at the key's latest time when the caller is behind it.
if latest > now then
  now = latest
end
local behind = latest - caller

-- The quotient and remainder of integers x and d, x below 2^52: exact, though x / d in
-- floating point may round up to the next integer.
local function divmod(x, d)
  local r = x % d
  if r < 0 then
    r = r + d
  elseif r >= d then
    r = r - d
  end
  return (x - r) / d, r
end

-- The debt now, in ticks of the call's parameters: what has drained since the latest call at
-- the held rate goes, and a change of window re-times what is owed (rounded up). Below 2^52
-- ticks every step is exact in Lua numbers; past that (a bucket of billions of tokens a
-- month, a cost past 2^52 ticks), in big integers below.
local TICKS = 4503599627370496 -- 2^52
local capacity, units = burst * window, cost * window
local debt
if debt_high < 1048576 and capacity < TICKS and units < TICKS then
  debt = debt_high * 4294967296 + debt_low
  local drained = (now - latest) * held_limit
  debt = debt > drained and debt - drained or 0
  if held_window ~= window and debt > 0 then
    local owed = debt * window
    if owed < TICKS then
      local q, r = divmod(owed, held_window)
      debt = r > 0 and q + 1 or q
    else
      debt = nil
    end
  end
end

if debt then
  local need = debt + units
  local allowed = need <= capacity
  local retry, after
  if allowed then
    retry, after = 0, need
  else
    retry, after = -1, debt
    if units <= capacity then
      local q, r = divmod(need - capacity, limit)
      retry = r > 0 and q + 1 or q
    end
  end
  local free = capacity > after and capacity - after or 0
  local remaining = divmod(free, window)
  local q, r = divmod(after, limit)
  local fill = r > 0 and q + 1 or q
  local reset = fill
  -- Waits measured from the caller's time.
  if behind > 0 then
    if retry > 0 then
      retry = retry + behind
    end
    if reset > 0 then
      reset = reset + behind
    end
  end
  if not allowed or cost == 0 then
    return { allowed and 1 or 0, burst, remaining, retry, reset }
  end
  -- Record. The key expires when the bucket is full again, as much later as it is behind
  -- the server clock.
  if not server then
    local t = redis.call('TIME')
    server = t[1] * 1000 + (t[2] - t[2] % 1000) / 1000
  end
  local lag = (caller > server and caller or server) - now
  local high, low = divmod(need, 4294967296)
  redis.call('SET', key, struct.pack('>c10ddddd', TAG, now, high, low, limit, window),
    'PXAT', string.format('%d', now + fill + (lag > 0 and lag or 0)))
  return { 1, burst, remaining, 0, now + fill - caller }
end

do
  -- Natural numbers of any size as little-endian arrays of 16-bit limbs, without high zero
  -- limbs (zero is {}): every product of a limb and a factor below 2^32, plus a carry, stays
  -- below 2^53, exact in a Lua number.
  local LIMB = 65536

  local function big(n) -- n: an integer from 0 to 2^53
    local a = {}
    while n > 0 do
      local r = n % LIMB
      a[#a + 1] = r
      n = (n - r) / LIMB
    end
    return a
  end

  local function cmp(a, b)
    if #a ~= #b then
      return #a < #b and -1 or 1
    end
    for i = #a, 1, -1 do
      if a[i] ~= b[i] then
        return a[i] < b[i] and -1 or 1
      end
    end
    return 0
  end

  local function add(a, b)
    local r, carry = {}, 0
    for i = 1, math.max(#a, #b) do
      local s = (a[i] or 0) + (b[i] or 0) + carry
      if s >= LIMB then
        r[i], carry = s - LIMB, 1
      else
        r[i], carry = s, 0
      end
    end
    if carry > 0 then
      r[#r + 1] = carry
    end
    return r
  end

  -- a - b, or zero when b is larger.
  local function sub(a, b)
    if cmp(a, b) <= 0 then
      return {}
    end
    local r, borrow = {}, 0
    for i = 1, #a do
      local s = a[i] - (b[i] or 0) - borrow
      if s < 0 then
        r[i], borrow = s + LIMB, 1
      else
        r[i], borrow = s, 0
      end
    end
    while #r > 0 and r[#r] == 0 do
      r[#r] = nil
    end
    return r
  end

  local function mul(a, m) -- m: an integer from 0 to 2^32 - 1
    if m == 0 then
      return {}
    end
    local r, carry = {}, 0
    for i = 1, #a do
      local p = a[i] * m + carry
      local lo = p % LIMB
      r[i], carry = lo, (p - lo) / LIMB
    end
    while carry > 0 do
      local lo = carry % LIMB
      r[#r + 1], carry = lo, (carry - lo) / LIMB
    end
    return r
  end

  -- The quotient and remainder of a by d, an integer from 1 to 2^32 - 1.
  local function divmod_big(a, d)
    local q, r = {}, 0
    for i = #a, 1, -1 do
      local x = r * LIMB + a[i]
      local qi = math.floor(x / d)
      r = x - qi * d
      -- The quotient of doubles may round up by one.
      if r < 0 then
        qi, r = qi - 1, r + d
      elseif r >= d then
        qi, r = qi + 1, r - d
      end
      q[i] = qi
    end
    for i = #q, 1, -1 do
      if q[i] ~= 0 then
        break
      end
      q[i] = nil
    end
    return q, r
  end

  -- a / d rounded up: a wait never ends too early.
  local function div_ceil(a, d)
    local q, r = divmod_big(a, d)
    if r > 0 then
      q = add(q, { 1 })
    end
    return q
  end

  local function from_decimal(s)
    local a = {}
    for i = 1, #s, 7 do
      local chunk = s:sub(i, i + 6)
      a = add(mul(a, 10 ^ #chunk), big(tonumber(chunk)))
    end
    return a
  end

  local function to_decimal(a)
    if #a == 0 then
      return '0'
    end
    local parts = {}
    while #a > 0 do
      local r
      a, r = divmod_big(a, 10000000)
      parts[#parts + 1] = r
    end
    local s = { string.format('%d', parts[#parts]) }
    for i = #parts - 1, 1, -1 do
      s[#s + 1] = string.format('%07d', parts[i])
    end
    return table.concat(s)
  end

  local U64_MAX = { 65535, 65535, 65535, 65535 }
  local I64_MAX = { 65535, 65535, 65535, 32767 }

  -- A reply integer: clamped to 2^63 - 1 as the module's, then the nearest Lua number (exact
  -- up to 2^53), at most the largest below 2^63.
  local function reply_int(a)
    if cmp(a, I64_MAX) > 0 then
      a = I64_MAX
    end
    local n = 0
    for i = #a, 1, -1 do
      n = n * LIMB + a[i]
    end
    return math.min(n, 9223372036854774784)
  end


  local U64_MAX = { 65535, 65535, 65535, 65535 }
  debt = add(mul(big(debt_high), 65536 * 65536), big(debt_low))
  debt = sub(debt, mul(big(now - latest), held_limit))
  if held_window ~= window and #debt > 0 then
    debt = div_ceil(mul(debt, window), held_window)
    if cmp(debt, U64_MAX) > 0 then
      debt = U64_MAX
    end
  end
  local capacity = mul(big(burst), window)
  -- nil when the request alone, or with the debt, is past 2^64 ticks.
  local cost = from_decimal(cost_word or '1')
  local units = mul(cost, window)
  if cmp(units, U64_MAX) > 0 then
    units = nil
  end
  local need = units and add(debt, units)
  if need and cmp(need, U64_MAX) > 0 then
    need = nil
  end
  local allowed = need ~= nil and cmp(need, capacity) <= 0
  local retry -- a number (0, -1) or a wait in ticks to round up
  if allowed then
    retry = 0
  elseif units and cmp(units, capacity) <= 0 then
    retry = div_ceil(sub(add(debt, units), capacity), limit)
  else
    retry = -1
  end
  local after = allowed and need or debt
  local remaining = divmod_big(sub(capacity, after), window)
  local reset = div_ceil(after, limit)
  -- Waits measured from the caller's time.
  if behind > 0 then
    if type(retry) == 'table' then
      retry = add(retry, big(behind))
    end
    if #reset > 0 then
      reset = add(reset, big(behind))
    end
  end
  local reply = {
    allowed and 1 or 0,
    burst,
    reply_int(remaining),
    type(retry) == 'table' and reply_int(retry) or retry,
    reply_int(reset),
  }
  if not allowed or #cost == 0 then
    return reply
  end
  -- Record, as above.
  if not server then
    local t = redis.call('TIME')
    server = t[1] * 1000 + (t[2] - t[2] % 1000) / 1000
  end
  local lag = (caller > server and caller or server) - now
  local empty_at = add(big(now), div_ceil(need, limit))
  local high, low = divmod_big(need, 65536 * 65536)
  redis.call('SET', key, struct.pack('>c10ddddd', TAG, now, reply_int(high), low, limit, window),
    'PXAT', to_decimal(add(empty_at, big(lag > 0 and lag or 0))))
  reply[5] = reply_int(sub(empty_at, big(caller)))
  return reply
end
