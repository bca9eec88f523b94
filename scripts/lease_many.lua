#!lua
--[[ lease_many.lua — lease many message ids of one hash slot, each its own token: claim.lua for each.
  KEYS (n=1..500)
    [1..] prefix..message_id   STRING  "1" (processed) or "~<token>" (in flight, leased);
                               every key in ONE hash slot (ids sharing a {hash tag}
                               on a cluster; any keys on a standalone or Sentinel
                               server). Redis refuses keys of several slots with
                               CROSSSLOT before the script runs: nothing written
  ARGV (n>=2)
    [1] lease_ms      decimal integer ms every lease lasts, >= 1
                      (1..15 digits, no sign: "-1" is BADARG)
    [2..] value       "~<token>" for KEYS[i-1], token 1..256 bytes: each key its
                      own lease token
  Returns   an array with one element per key, in KEYS order, as claim.lua:
            a lease won: its fence, a string: the server's clock in ns since
            the epoch at µs precision plus the number of keys won before it in
            this call (0..499), a canonical 19-digit decimal uint64, so each key
            won gets a fence of its own, above every fence granted for that key
            before (the clock's limits: docs/guarantees.md, "Fences");
            0 exists and is processed (any value not starting with "~");
            -N exists and is in flight: N >= 1 is the ms left on the holder's
            lease (PTTL; 1 when less is left). A key given twice: its first
            occurrence may take it, the later ones then see it in flight
            (first wins). A key of another type gets a CORRUPT element
            instead, is left as it is, and the other keys are claimed
  Errors    BADARG <what>    KEYS is not 1..500 keys, each of 1..2048 bytes:
                             checked first, before ARGV; nothing read or written
            BADARG <what>    before any write; nothing written (also for a
                             count of ARGV other than 1 + the number of keys)
            CORRUPT <what>   an element, not the reply: that key only
  Writes    SET key value NX GET PX lease_ms for every key (only when absent;
            GET reports the value found); PTTL (a read) for a key in flight;
            TIME (reads) once when a lease is won: the fence, and the clock
            read again until it leaves the fence's µs
  Atomicity the whole batch is one script call: every check precedes the first
            SET, and no other command runs between the SETs
  Complexity O(number of keys)
]]
-- <snippet:batch_keys>
-- 1..500 keys, each of 1..2048 bytes (a prefix of at most 1024 bytes and an
-- id of 1..1024, as the Go stores check), refused before anything else is read.
if #KEYS == 0 or #KEYS > 500 then
  return redis.error_reply('BADARG want 1..500 keys (KEYS), each of 1..2048 bytes')
end
for i = 1, #KEYS do
  if #KEYS[i] == 0 or #KEYS[i] > 2048 then
    return redis.error_reply('BADARG want 1..500 keys (KEYS), each of 1..2048 bytes')
  end
end
-- </snippet>
if #ARGV < 2 or #ARGV ~= #KEYS + 1 then
  return redis.error_reply('BADARG want 1 + #KEYS arguments: lease_ms, a value per key')
end

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

local lease = int_arg(ARGV[1])
if not lease or lease == '0' then
  return redis.error_reply('BADARG lease_ms must be a decimal integer >= 1')
end
for i = 2, #ARGV do
  local v = ARGV[i]
  if not (#v > 1 and #v <= 257 and string.byte(v, 1) == 126) then
    return redis.error_reply('BADARG every value must be "~<token>" (token 1..256 bytes)')
  end
end

-- <snippet:clock_fence>
-- The clock's fence: the server's time (TIME, the clock that expires keys,
-- read live) in ns since the epoch at µs precision, a canonical 19-digit
-- decimal string (the µs times 1000; exact past 2^53, and below the largest
-- fence, 19 nines, until the year 2286); and that time in ms. It returns only
-- once the clock has left that µs (at most 1000 more reads), so no later
-- script on this server reads it again: two grants on one key, even back to
-- back in one pipeline or MULTI, never share a fence.
local function clock_fence()
  local t = redis.call('TIME')
  for _ = 1, 1000 do
    local u = redis.call('TIME')
    if u[1] ~= t[1] or u[2] ~= t[2] then
      break
    end
  end
  return t[1] .. string.format('%06d', tonumber(t[2])) .. '000',
    tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- </snippet>

-- SET NX GET (Redis >= 7.0) creates and reports the previous value in one call.
-- pcall: a key of another type fails alone (SET NX GET writes nothing to it),
-- as it would in a batch of single calls, and the others are still claimed.
-- The keys won share one clock read; each adds its rank among them (< 500,
-- inside the µs the clock has left), so every fence is distinct.
local out, base, won = {}, nil, 0
for i = 1, #KEYS do
  local old = redis.pcall('SET', KEYS[i], ARGV[i + 1], 'NX', 'GET', 'PX', lease)
  if not old then
    base = base or string.sub(clock_fence(), 1, 16)
    out[i] = base .. string.format('%03d', won)
    won = won + 1
  elseif type(old) == 'table' then
    out[i] = redis.error_reply('CORRUPT the key holds a value that is not a string')
  elseif string.byte(old, 1) == 126 then
    local left = redis.call('PTTL', KEYS[i])
    if left < 1 then
      left = 1
    end
    out[i] = -left
  else
    out[i] = 0
  end
end
return out
