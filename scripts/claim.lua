#!lua
--[[ claim.lua — claim a message id: exactly one caller creates it.
  KEYS (n=1)
    [1] prefix..message_id   STRING  "1" (processed) or "~<token>" (in flight, leased)
  ARGV (n=2)
    [1] ttl_ms   decimal integer ms, 0 = no expiry (a "~" lease needs ttl_ms > 0)
                 (1..15 digits, no sign: "-1" is BADARG)
    [2] value    "1" to mark the id processed, or "~<token>" to lease it
  Returns   1  created (the caller won)
            0  exists and is processed (any value not starting with "~", so keys
               written by `SET key 1 NX PX ttl` count as processed)
            -N exists and is in flight: N >= 1 is the ms left on the holder's
               lease (PTTL; 1 when less is left, or the "~" value has no
               expiry), so any negative reply means in flight and -reply is
               when a redelivery is worth trying
  Errors    BADARG <what>    KEYS is not exactly 1 key of 1..2048 bytes:
                             checked first, before ARGV; nothing read or written
            BADARG <what>    before any write; nothing written (also
                             for a count of ARGV other than the header's)
            CORRUPT <what>   the key holds something other than a string; nothing written
  Writes    SET KEYS[1] value NX GET [PX ttl_ms] (only when the key is absent;
            GET reports the value found); PTTL (a read) when it is in flight
  Atomicity all checks precede the single SET NX GET (which, on a key of
            another type, fails and writes nothing: then CORRUPT)
  Complexity O(1)
]]
-- <snippet:one_key>
-- Exactly one key of 1..2048 bytes (a prefix of at most 1024 bytes and an id
-- of 1..1024, as the Go stores check), refused before anything else is read.
if #KEYS ~= 1 or #KEYS[1] == 0 or #KEYS[1] > 2048 then
  return redis.error_reply('BADARG want exactly 1 key (KEYS) of 1..2048 bytes')
end
-- </snippet>
if #ARGV ~= 2 then
  return redis.error_reply('BADARG want 2 arguments: ttl_ms, value')
end
local value = ARGV[2]

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

local ttl = int_arg(ARGV[1])
if not ttl then
  return redis.error_reply('BADARG ttl_ms must be a decimal integer >= 0')
end
if value ~= '1' and not (#value > 1 and #value <= 257 and string.byte(value, 1) == 126) then
  return redis.error_reply('BADARG value must be "1" or "~<token>" (token 1..256 bytes)')
end
if value ~= '1' and ttl == '0' then
  return redis.error_reply('BADARG a "~" lease needs ttl_ms > 0')
end

-- SET NX GET (Redis >= 7.0) creates the key and reports the value it found in
-- one call. On a key of another type it fails with WRONGTYPE and writes
-- nothing (NX: the key exists); pcall answers that with CORRUPT. (One call
-- instead of a GET and a SET, which puts claim.lua level with a minimal
-- SET NX PX script: BENCHMARKS.md, "What was changed, and what it bought".)
local old
if ttl ~= '0' then
  old = redis.pcall('SET', KEYS[1], value, 'NX', 'GET', 'PX', ttl)
else
  old = redis.pcall('SET', KEYS[1], value, 'NX', 'GET')
end
if not old then
  return 1
end
if type(old) == 'table' then
  return redis.error_reply('CORRUPT the key holds something other than a claim string')
end
-- "~<token>" is in flight; any other value ("1", as SET NX dedupers write) is processed.
-- In flight answers how long the holder's lease has left, so the caller can
-- come back then rather than at its broker's retry rate.
if string.byte(old, 1) == 126 then
  local left = redis.call('PTTL', KEYS[1])
  if left < 1 then
    left = 1
  end
  return -left
end
return 0
