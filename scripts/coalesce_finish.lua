#!lua flags=allow-oom
--[[ coalesce_finish.lua — end the caller's run of a coalescing key, and hand it the key's next when one is due.
  KEYS (n=1)
    [1] prefix..key   HASH  tok, lease, fence, run, next, due, first, last
                            (see coalesce_trigger.lua)
  ARGV (n=6)
    [1] token         the caller's owner token, 1..256 bytes
    [2] fence         the fence of the run that ends, as granted (decimal)
    [3] outcome       "done" (fn succeeded, or failed for good: nothing to
                      retry) or "retry" (fn failed: its payload is kept as the
                      key's next unless a later trigger replaced it)
    [4] retry_ms      decimal integer ms a retried payload waits before it is due
    [5] lease_ms      decimal integer ms the caller's lease lasts if it is
                      handed the next, >= 1 (1..15 digits, no sign: "-1" is BADARG)
    [6] throttle_ms   decimal integer ms: at most one run start per this long
                      (the key, idle, is kept until last + throttle_ms so a
                      trigger still sees the last start), 0 = no throttle
  Returns   {1, fence, payload}  the next was due: the caller holds a new lease
              (same token, lease = now + lease_ms, a new fence) and runs payload
            {0, wait_ms}  a next is pending and due in wait_ms (>= 1): the key
              is left without a holder, for a take then
            {-1}  idle: nothing pending; the key is deleted (or, with
              throttle_ms, kept without a holder until last + throttle_ms)
  Errors    BADARG <what>    KEYS is not exactly 1 key of 1..2048 bytes:
                             checked first, before ARGV; nothing read or written
            BADARG <what>    before any write; nothing written (also
                             for a count of ARGV other than the header's)
            CORRUPT <what>   the key holds something other than a coalescing
                             hash; nothing written
            STALE_OWNER <what>  the key is not held by token at fence (the
                             lease passed and another caller took the key, or
                             this run already finished); nothing written
            FULL <what>      the key's fence is at its largest; nothing written
  Writes    handed over: HSET tok, lease, fence, run, last; HDEL next, due, first
            pending: HSET next, due, first (a retried payload); HDEL tok, lease, run
            idle: DEL, or HDEL tok, lease, run and PEXPIREAT last + throttle_ms
  Atomicity every check precedes the first write
  Memory    flags=allow-oom: a run that ended must be able to say so when
            maxmemory is reached under noeviction; its HSET moves a payload
            the key already holds (run to next, or next to run) and rewrites
            fields of the same size, and PEXPIREAT only sets an expiry
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
  return redis.error_reply('BADARG want 6 arguments: token, fence, outcome, retry_ms, lease_ms, throttle_ms')
end
local token, fence, outcome = ARGV[1], ARGV[2], ARGV[3]
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
if #fence < 1 or #fence > 19 or string.find(fence, '[^0-9]') then
  return redis.error_reply('BADARG fence must be 1..19 decimal digits')
end
if outcome ~= 'done' and outcome ~= 'retry' then
  return redis.error_reply('BADARG outcome must be "done" or "retry"')
end
local retry, lease, throttle = int_arg(ARGV[4]), int_arg(ARGV[5]), int_arg(ARGV[6])
if not (retry and throttle) then
  return redis.error_reply('BADARG retry_ms and throttle_ms must be decimal integers >= 0')
end
if not lease or lease == '0' then
  return redis.error_reply('BADARG lease_ms must be a decimal integer >= 1')
end

local s, bad = load_state(key)
if bad then
  return bad
end
if s[1] ~= token or s[3] ~= fence then
  return redis.error_reply('STALE_OWNER the key is not held by this run')
end
local now = now_ms()
local payload, due, first = s[5], s[6], s[7]
if not payload and outcome == 'retry' then
  payload, due, first = s[4], now + tonumber(retry), now
end
local nextFence
if payload and due <= now then
  nextFence = next_fence(fence)
  if not nextFence then
    return redis.error_reply('FULL the fence is at its largest')
  end
  redis.call('HSET', key, 'lease', string.format('%d', now + tonumber(lease)), 'fence', nextFence,
    'run', payload, 'last', string.format('%d', now))
  redis.call('HDEL', key, 'next', 'due', 'first')
  return {1, nextFence, payload}
end
if payload then
  redis.call('HSET', key, 'next', payload, 'due', string.format('%d', due), 'first', string.format('%d', first))
  redis.call('HDEL', key, 'tok', 'lease', 'run')
  return {0, due - now}
end
throttle = tonumber(throttle)
if throttle > 0 and s[8] + throttle > now then
  redis.call('HDEL', key, 'tok', 'lease', 'run')
  redis.call('PEXPIREAT', key, string.format('%d', s[8] + throttle))
else
  redis.call('DEL', key)
end
return {-1}
