-- RL.SLIDE in Lua: the twin of the module's exact sliding log, for servers where MODULE LOAD
-- is not allowed (the client packages run it with fallback="lua"). It takes the words of
--
--   RL.SLIDE key limit window_ms [limit window_ms ...] [COST n] [NOW ms]
--
-- as EVALSHA <sha> 1 <key> <limit> <window_ms> [<limit> <window_ms> ...] [COST n] [NOW ms],
-- up to 8 pairs, and answers as the module does (docs/commands.md, RL.SLIDE): {allowed,
-- limit, remaining, retry_after_ms, reset_after_ms}, the same integers for the same calls at
-- the same NOW, and the same errors for bad input, word for word (ERR limit must be an
-- integer from 1 to 4294967295, ERR at most 8 limit/window_ms pairs in one call, ...).
-- tests/it/lua_twins.rs runs random call sequences on both, call by call. A window_ms is a
-- duration as the module takes it: milliseconds, or an integer with a unit (250ms, 60s, 5m,
-- 1h, 1d).
--
-- A request is allowed if and only if, for every pair, the units recorded in
-- (now - window_ms, now] plus its cost fit within the limit; it is then recorded once, merged
-- into the record of its millisecond. A call behind the key's latest time is decided at that
-- time, and its waits are measured from its own (src/core/mod.rs,
-- Decision::seen_from_behind). Records leave once no window the key was used with since they
-- were made can count them: as the module, a key remembers up to three longer windows used
-- before, with their last use (its retention, src/core/retention.rs), and drops at the same
-- calls what none of them counts, so that a later call with another window counts exactly
-- what the module's would.
--
-- State: a sorted set under the key, a member per millisecond that holds requests, scored by
-- that millisecond: struct '>I4I4d', its running total of units modulo 2^32 (the units in a
-- window are the difference of two running totals; a key holds fewer than 2^32 units, as
-- in the module), its units and its time, 16 bytes. The last member, scored +inf, is the
-- header: "RL.SLIDE:1", then as doubles the longest window of the latest call that recorded
-- and the retention's (window_ms, last use) pairs, shortest first. The newest record's time
-- is the key's latest time. Memory: about 30 bytes a record while the set is a listpack (up
-- to zset-max-listpack-entries, 128 by default, header included), about 130 bytes past that
-- (MEMORY USAGE), where the module takes 8.
--
-- The key expires when its newest record leaves the longest window still kept, or, after a
-- NOW behind the server clock, as much later as the state is behind it, as the module sets
-- it: after a call that records, its PTTL is reset_after_ms. A refused call or COST 0 writes
-- nothing; a missing key answers as an empty log.
--
-- Cost per call: O(W log N + D) for W pairs, N records and D records dropped: a ZRANGE (the
-- header and the newest record), a ZRANGEBYSCORE a pair, and when it records a
-- ZREMRANGEBYSCORE, a ZADD (a ZREM too when it merges or changes the header), a TIME and a
-- PEXPIREAT. A refusal finds its wait with no more calls when the oldest record in the
-- window frees enough units, else by bisection on the ranks of at most the next
-- (units to free) records, O(log N) calls of O(log N). About 115,000 instructions of the
-- server for a call on a key of a thousand records (callgrind), 10 times RL.SLIDE's.
--
-- Where it differs from the module:
-- - The key is a sorted set, not a module key: TYPE says zset, the module's commands answer
--   WRONGTYPE on it, and it is not in INFO ratelimit, keyspace events, RL.TOP or RL.ALL. The
--   other twins on it answer WRONGTYPE key holds a RL.SLIDE limiter, not RL.FIXED.
-- - Memory: 4 to 16 times the module's (see State).
-- - NOW is not bounded: the module refuses a NOW more than ratelimit.now-max-ahead-ms
--   (default 1000) ahead of the server clock, a setting a script cannot read; the twin takes
--   any NOW, as the module set to -1 does. Pass NOW only from trusted code.
-- - It replicates as its effects (ZREMRANGEBYSCORE, ZREM, ZADD, PEXPIREAT), and is not
--   refused under maxmemory until it writes (the module's command is deny-oom). It needs
--   Redis 6.2 or later; tests/it/lua_twins.rs runs on Redis 7.0 and 8.2 and on Valkey 9.1.

local TAG, COMMAND = 'RL.SLIDE:1', 'RL.SLIDE'
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

local MOD = 4294967296 -- running totals wrap at 2^32
local MAX_UNITS = 4294967295 -- all the units a key holds
-- The highest score of a record (the latest NOW there can be): the header's is above it.
local TOP = '253402300799999'
-- Numbers go to commands as decimal text, written as integers (Lua's own conversion writes
-- 17 significant digits of a double, slower).
local function fmt(n)
  return string.format('%d', n)
end

-- The windows: pairs up to the first word that starts with a letter, then the options.
local first_option = #ARGV + 1
for k = 1, #ARGV do
  local b = ARGV[k]:byte(1)
  if b and ((b >= 65 and b <= 90) or (b >= 97 and b <= 122)) then
    first_option = k
    break
  end
end
local words = first_option - 1
if words == 0 then
  -- RL.SLIDE k abc 1000 or RL.SLIDE k COST 1: the limit is what is wrong.
  return range_error('limit', 1, '4294967295')
end
if words % 2 ~= 0 then
  return redis.error_reply("ERR wrong number of arguments for '" .. COMMAND .. "' command")
end
if words > 16 then
  return redis.error_reply('ERR at most 8 limit/window_ms pairs in one call')
end
local limits, windows, longest = {}, {}, 0
for k = 1, words, 2 do
  local limit = int(ARGV[k], 1, '4294967295', 4294967295)
  if not limit then
    return range_error('limit', 1, '4294967295')
  end
  local ms = duration(ARGV[k + 1], '2678400000', 2678400000)
  if not ms then
    return duration_error('window_ms', 1, '2678400000')
  end
  limits[#limits + 1], windows[#windows + 1] = limit, ms
  if ms > longest then
    longest = ms
  end
end
-- Options in any order, each at most once.
local cost, now
local i = first_option
while i <= #ARGV do
  local word = ARGV[i]
  local keyword = word:upper()
  if keyword == 'COST' or keyword == 'NOW' then
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

-- The header and the newest record, in one call. A record's member is its running total and
-- its units (32-bit integers) and its time (a double), 16 bytes; the header is the tag, then
-- as doubles the key's own longest window and the retention's (window_ms, last use) pairs,
-- 18 bytes and 16 a pair.
local tail = redis.pcall('ZRANGE', key, '-2', '-1')
if tail.err then
  return wrong_type()
end
local header, own, kept = tail[#tail], longest, 0
local newest, newest_member, cum_last, units_last -- nil: no record
local front_w, front_last = {}, {}
if header then
  local tag
  if #header >= 18 and (#header - 18) % 16 == 0 then
    tag, own = struct.unpack('>c10d', header)
  end
  if tag ~= TAG then
    return wrong_type()
  end
  kept = (#header - 18) / 16
  for k = 1, kept do
    front_w[k], front_last[k] = struct.unpack('>dd', header, 3 + 16 * k)
  end
  if #tail == 2 then
    newest_member = tail[1]
    cum_last, units_last, newest = struct.unpack('>I4I4d', newest_member)
  end
end
local latest = newest or 0

-- Decided at the key's latest time when the caller is behind it.
if latest > now then
  now = latest
end

local allowed = true
-- The tightest window (least remaining, ties to the longer) and the slowest refusing one
-- (never, -1, is the slowest).
local tight_remaining, tight_ms, tight_limit
local slow_wait, slow_limit
for k = 1, #windows do
  local limit, ms = limits[k], windows[k]
  -- The units recorded in (now - ms, now]: from the first record in it, whose running total
  -- less its units is the total before it.
  local used, base, first_at, first_cum = 0
  if newest then
    local first
    if now < ms then
      first = redis.call('ZRANGE', key, '0', '0')
    else
      first = redis.call('ZRANGEBYSCORE', key, fmt(now - ms + 1), TOP, 'LIMIT', '0', '1')
    end
    if first[1] then
      local units
      first_cum, units, first_at = struct.unpack('>I4I4d', first[1])
      base = (first_cum - units) % MOD
      used = (cum_last - base) % MOD
    end
  end
  local fits = used + cost <= limit
  allowed = allowed and fits
  local remaining = limit > used and limit - used or 0
  if not tight_remaining or remaining < tight_remaining
    or (remaining == tight_remaining and ms > tight_ms) then
    tight_remaining, tight_ms, tight_limit = remaining, ms, limit
  end
  if not fits then
    -- How long until cost more units fit: until the record whose leaving frees enough
    -- units leaves the window.
    local wait = -1
    if cost <= limit then
      local must_leave = used + cost - limit
      local at = first_at
      if (first_cum - base) % MOD < must_leave then
        -- Not the first record: every record holds a unit at least, so it is among the
        -- next must_leave - 1, found by bisection on their ranks.
        local start = now < ms and 0 or redis.call('ZCOUNT', key, '0', fmt(now - ms))
        local lo = start + 1
        local hi = redis.call('ZCARD', key) - 2
        if start + must_leave - 1 < hi then
          hi = start + must_leave - 1
        end
        local found_rank
        while lo < hi do
          local mid = (lo + hi - (lo + hi) % 2) / 2
          local cum, _, ts = struct.unpack('>I4I4d', redis.call('ZRANGE', key, fmt(mid), fmt(mid))[1])
          if (cum - base) % MOD >= must_leave then
            hi, found_rank, at = mid, mid, ts
          else
            lo = mid + 1
          end
        end
        if found_rank ~= lo then
          local _, _, ts = struct.unpack('>I4I4d', redis.call('ZRANGE', key, fmt(lo), fmt(lo))[1])
          at = ts
        end
      end
      wait = at + ms - now
    end
    if not slow_wait or (slow_wait ~= -1 and (wait == -1 or wait > slow_wait)) then
      slow_wait, slow_limit = wait, limit
    end
  end
end
local reply
if allowed then
  local reset = cost > 0 and longest or (newest and newest + longest > now and newest + longest - now or 0)
  reply = { 1, tight_limit, tight_remaining > cost and tight_remaining - cost or 0, 0, reset }
else
  local reset = newest and newest + longest > now and newest + longest - now or 0
  reply = { 0, slow_limit, tight_remaining, slow_wait, reset }
end
-- Waits measured from the caller's time.
local behind = latest - caller
if behind > 0 then
  if reply[4] > 0 then
    reply[4] = reply[4] + behind
  end
  if reply[5] > 0 then
    reply[5] = reply[5] + behind
  end
end
if not allowed or cost == 0 then
  return reply
end

-- Record. The retention: the windows kept before, and the key's own when the call's longest
-- is shorter, less those the call's window covers or that have passed since their last use;
-- a Pareto front (a longer window only if used less recently) of three at most, the two
-- used most recently merged when there would be four (core::retention::Front::record).
local new_w, new_last = front_w, front_last
if kept > 0 or (newest and own > longest) then
  local all = {}
  for k = 1, kept do
    all[#all + 1] = { front_w[k], front_last[k] }
  end
  if newest then
    all[#all + 1] = { own, newest }
  end
  local alive = {}
  for _, e in ipairs(all) do
    if e[1] > longest and e[2] + e[1] > now then
      alive[#alive + 1] = e
    end
  end
  table.sort(alive, function(a, b)
    return a[1] > b[1] or (a[1] == b[1] and a[2] > b[2])
  end)
  local front = {}
  for _, e in ipairs(alive) do
    if #front == 0 or e[2] > front[#front][2] then
      front[#front + 1] = e
    end
  end
  while #front > 3 do
    local a, b = front[#front], front[#front - 1]
    front[#front - 1] = { math.max(a[1], b[1]), math.max(a[2], b[2]) }
    front[#front] = nil
  end
  new_w, new_last = {}, {}
  for k = #front, 1, -1 do
    new_w[#new_w + 1], new_last[#new_last + 1] = front[k][1], front[k][2]
  end
  if #new_w > 0 and newest then
    -- Past 2^32 - 1 units kept, the key keeps only what the call's own windows count.
    local edge = now - new_w[#new_w]
    local first
    if edge < 0 then
      first = redis.call('ZRANGE', key, '0', '0')
    else
      first = redis.call('ZRANGEBYSCORE', key, fmt(edge + 1), TOP, 'LIMIT', '0', '1')
    end
    if first[1] then
      local cum, units = struct.unpack('>I4I4', first[1])
      if (cum_last - cum + units) % MOD + cost > MAX_UNITS then
        new_w, new_last = {}, {}
      end
    end
  end
end
-- What no window still counts goes.
local keep = #new_w > 0 and new_w[#new_w] or longest
if newest and now - keep >= 0 then
  redis.call('ZREMRANGEBYSCORE', key, '0', fmt(now - keep))
end
-- The record, merged into the newest in the same millisecond.
local member
if newest == now then
  member = struct.pack('>I4I4d', (cum_last + cost) % MOD, units_last + cost, now)
else
  member = struct.pack('>I4I4d', ((cum_last or 0) + cost) % MOD, cost, now)
end
local new_header = header
if #new_w > 0 or kept > 0 or own ~= longest or not header then
  local parts = { struct.pack('>c10d', TAG, longest) }
  for k = 1, #new_w do
    parts[#parts + 1] = struct.pack('>dd', new_w[k], new_last[k])
  end
  new_header = table.concat(parts)
end
if newest == now then
  if new_header ~= header then
    redis.call('ZREM', key, newest_member, header)
  else
    redis.call('ZREM', key, newest_member)
  end
elseif header and new_header ~= header then
  redis.call('ZREM', key, header)
end
if new_header ~= header then
  redis.call('ZADD', key, fmt(now), member, 'inf', new_header)
else
  redis.call('ZADD', key, fmt(now), member)
end
-- The key expires when the newest record leaves the longest window still kept, as much
-- later as it is behind the server clock.
local empty_at = now + longest
for k = 1, #new_w do
  local at = (new_last[k] < now and new_last[k] or now) + new_w[k]
  if at > empty_at then
    empty_at = at
  end
end
if not server then
  local t = redis.call('TIME')
  server = t[1] * 1000 + (t[2] - t[2] % 1000) / 1000
end
local lag = (caller > server and caller or server) - now
redis.call('PEXPIREAT', key, fmt(empty_at + (lag > 0 and lag or 0)))
reply[5] = empty_at - caller
return reply
