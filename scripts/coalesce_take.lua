#!lua
--[[ coalesce_take.lua — take a coalescing key's pending next to run it, once no run holds the key and the next is due.
  KEYS (n=1)
    [1] prefix..key   HASH  tok, lease, fence, run, next, due, first, last
                            (see coalesce_trigger.lua)
  ARGV (n=2)
    [1] token      the caller's owner token, 1..256 bytes
    [2] lease_ms   decimal integer ms the caller's lease lasts if it takes, >= 1
                   (1..15 digits, no sign: "-1" is BADARG)
  Returns   {1, fence, payload}  taken: the caller holds the lease (tok, lease
              = now + lease_ms, fence a 19-digit decimal string) and runs
              payload: the pending next, or, when there is none, the payload
              of a run whose holder's lease passed before it finished (a
              crashed run is run again)
            {0, wait_ms}  a next is pending but a run holds the key or the
              next is not due yet: try again in wait_ms (>= 1)
            {-1}  nothing to run (no key, or no next and no crashed run)
  Errors    BADARG <what>    KEYS is not exactly 1 key of 1..2048 bytes:
                             checked first, before ARGV; nothing read or written
            BADARG <what>    before any write; nothing written (also
                             for a count of ARGV other than the header's)
            CORRUPT <what>   the key holds something other than a coalescing
                             hash; nothing written
            FULL <what>      the key's fence is at its largest; nothing written
  Writes    taken: HSET tok, lease, fence, run, last; HDEL next, due, first
  Atomicity every check precedes the first write
  Complexity O(1) (plus the size of the payload)
]]
-- <snippet:one_key>
-- Exactly one key of 1..2048 bytes (a prefix of at most 1024 bytes and an id
-- of 1..1024, as the Go stores check), refused before anything else is read.
if #KEYS ~= 1 or #KEYS[1] == 0 or #KEYS[1] > 2048 then
  return redis.error_reply('BADARG want exactly 1 key (KEYS) of 1..2048 bytes')
end
-- </snippet>
if #ARGV ~= 2 then
  return redis.error_reply('BADARG want 2 arguments: token, lease_ms')
end
local token = ARGV[1]
local key = KEYS[1]

-- <snippet:int_arg>
-- A decimal integer argument (ms, or a count) of 1..15 digits, exact as a Lua
-- number, made canonical ("007" -> "7": Redis refuses "007" as a PX or
-- PEXPIRE argument, which would be an error after a write); nil if s is not one.
-- (A canonical s, what every client sends, is returned as is: one pattern
-- match instead of three calls; the server time it saves is measured in
-- BENCHMARKS.md, "What was changed, and what it bought".)
local function int_arg(s)
  if #s > 15 then
    return nil
  elseif s == '0' or string.find(s, '^[1-9]%d*$') then
    return s
  elseif not string.find(s, '^%d+$') then
    return nil
  end
  return string.format('%d', tonumber(s))
end
-- </snippet>
-- <snippet:now_ms>
-- Now in ms since the epoch, from the server's clock: the one that expires keys.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- </snippet>
-- <snippet:coalesce_state>
-- A coalescing key's hash, read in one HMGET into {tok, lease, fence, run,
-- next, due, first, last}: tok, fence, run and next strings or false; lease,
-- due, first and last numbers (ms since the epoch, 0 when absent). nil and
-- CORRUPT for a key of another type or a malformed field (a time not 1..15
-- decimal digits, a fence not a canonical decimal of 1..19 digits).
local function load_state(k)
  local s = redis.pcall('HMGET', k, 'tok', 'lease', 'fence', 'run', 'next', 'due', 'first', 'last')
  if s.err then
    return nil, redis.error_reply('CORRUPT the key holds something other than a coalescing hash')
  end
  for _, i in ipairs({2, 6, 7, 8}) do
    local v = s[i] or '0'
    if #v > 15 or string.find(v, '[^0-9]') or v == '' then
      return nil, redis.error_reply('CORRUPT bad time field')
    end
    s[i] = tonumber(v)
  end
  if s[3] and (#s[3] > 19 or not string.find(s[3], '^[1-9][0-9]*$')) then
    return nil, redis.error_reply('CORRUPT bad fence')
  end
  return s
end
-- </snippet>
-- <snippet:next_fence>
-- The fence of a new lease: the server's TIME in ns at µs precision (19
-- decimal digits until the year 2286), or the stored fence + 1 when that is
-- larger (a clock stepped back, or a fence granted in the same µs), so that
-- the fences granted for a key never decrease, across deletes and
-- restarts too as long as the clock does not go back. Compared as decimal
-- strings, length first (exact past 2^53). nil at the largest fence,
-- 9999999999999999999.
local function next_fence(stored)
  local t = redis.call('TIME')
  local clock = string.format('%s%06d000', t[1], tonumber(t[2]))
  if not stored or #stored < #clock or (#stored == #clock and stored < clock) then
    return clock
  end
  if stored == '9999999999999999999' then
    return nil
  end
  -- stored + 1 on the decimal string: the trailing 9s become 0s.
  local i = #stored
  while string.byte(stored, i) == 57 do
    i = i - 1
  end
  if i == 0 then
    return '1' .. string.rep('0', #stored)
  end
  return string.sub(stored, 1, i - 1) .. string.char(string.byte(stored, i) + 1) .. string.rep('0', #stored - i)
end
-- </snippet>

if #token < 1 or #token > 256 then
  return redis.error_reply('BADARG token must be 1..256 bytes')
end
local lease = int_arg(ARGV[2])
if not lease or lease == '0' then
  return redis.error_reply('BADARG lease_ms must be a decimal integer >= 1')
end

local s, bad = load_state(key)
if bad then
  return bad
end
local now = now_ms()
local held = s[1] and s[2] > now
-- A run whose holder's lease passed before it finished is pending too: its
-- triggers were acknowledged, and no run covering them completed.
local payload = s[5] or (not held and s[4])
if not payload then
  return {-1}
end
if held or s[6] > now then
  local wake = s[6]
  if held and s[2] > wake then
    wake = s[2]
  end
  return {0, wake - now}
end
local fence = next_fence(s[3])
if not fence then
  return redis.error_reply('FULL the fence is at its largest')
end
redis.call('HSET', key, 'tok', token, 'lease', string.format('%d', now + tonumber(lease)), 'fence', fence,
  'run', payload, 'last', string.format('%d', now))
redis.call('HDEL', key, 'next', 'due', 'first')
return {1, fence, payload}
