#!lua
--[[ coalesce_trigger.lua — trigger a coalescing key: run now, or keep the payload as the key's next.
  KEYS (n=1)
    [1] prefix..key   HASH  tok, lease, fence, run (the running run's payload),
                            next, due, first (the pending next), last
                            (docs/non-go.md, "Coalescing")
  ARGV (n=6)
    [1] token         the caller's owner token, 1..256 bytes
    [2] lease_ms      decimal integer ms the caller's lease lasts if it runs, >= 1
                      (1..15 digits, no sign: "-1" is BADARG)
    [3] debounce_ms   decimal integer ms: run once the key has been quiet this
                      long, 0 = no debounce
    [4] max_wait_ms   decimal integer ms: with debounce, the longest a pending
                      next waits from its first trigger, 0 = no limit
    [5] throttle_ms   decimal integer ms: at most one run start per this long,
                      0 = no throttle
    [6] payload       the trigger's payload, any bytes (may be empty)
  Returns   {1, fence}  no run holds the key and the next is due: the caller
              holds the lease (tok, lease = now + lease_ms) with fence, a
              19-digit decimal string, and runs its own payload; any pending
              next is replaced by it (it arrived later)
            {0, wait_ms}  the payload is kept as the key's next, replacing an
              earlier one that has not started; wait_ms (>= 1) is when a take
              is worth trying: the holder's lease left, or the time until
              the next is due (debounce, throttle), whichever is later
  Errors    BADARG <what>    KEYS is not exactly 1 key of 1..2048 bytes:
                             checked first, before ARGV; nothing read or written
            BADARG <what>    before any write; nothing written (also
                             for a count of ARGV other than the header's)
            CORRUPT <what>   the key holds something other than a coalescing
                             hash; nothing written
            FULL <what>      the key's fence is at its largest; nothing written
  Writes    kept: HSET next, due, first; PERSIST (a pending next never expires)
            run: HSET tok, lease, fence, run, last; HDEL next, due, first; PERSIST
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
if #ARGV ~= 6 then
  return redis.error_reply('BADARG want 6 arguments: token, lease_ms, debounce_ms, max_wait_ms, throttle_ms, payload')
end
local token, payload = ARGV[1], ARGV[6]
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
local lease, debounce, maxwait, throttle = int_arg(ARGV[2]), int_arg(ARGV[3]), int_arg(ARGV[4]), int_arg(ARGV[5])
if not lease or lease == '0' then
  return redis.error_reply('BADARG lease_ms must be a decimal integer >= 1')
end
if not (debounce and maxwait and throttle) then
  return redis.error_reply('BADARG debounce_ms, max_wait_ms and throttle_ms must be decimal integers >= 0')
end
debounce, maxwait, throttle = tonumber(debounce), tonumber(maxwait), tonumber(throttle)

local s, bad = load_state(key)
if bad then
  return bad
end
local now = now_ms()
-- The pending next's first trigger: debounce's maximum wait counts from it.
local first = now
if s[5] then
  first = s[7]
end
local due = now
if debounce > 0 then
  due = now + debounce
  if maxwait > 0 and first + maxwait < due then
    due = math.max(first + maxwait, now)
  end
end
if throttle > 0 and s[8] > 0 and s[8] + throttle > due then
  due = s[8] + throttle
end
local held = s[1] and s[2] > now
local fence
if not held and due <= now then
  -- Nobody holds the key (or its holder's lease passed: a crashed run,
  -- whose triggers this run covers, since it starts after them) and the
  -- next is due: the caller runs.
  fence = next_fence(s[3])
  if not fence then
    return redis.error_reply('FULL the fence is at its largest')
  end
end
if not fence then
  redis.call('HSET', key, 'next', payload, 'due', string.format('%d', due), 'first', string.format('%d', first))
  redis.call('PERSIST', key)
  local wake = due
  if held and s[2] > wake then
    wake = s[2]
  end
  return {0, wake - now}
end
redis.call('HSET', key, 'tok', token, 'lease', string.format('%d', now + tonumber(lease)), 'fence', fence,
  'run', payload, 'last', string.format('%d', now))
redis.call('HDEL', key, 'next', 'due', 'first')
redis.call('PERSIST', key)
return {1, fence}
