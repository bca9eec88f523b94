#!lua flags=allow-oom
--[[ extend_many.lua — keep many leases of one hash slot alive: extend.lua for each, in order.
  KEYS (n=1..500)
    [1..] prefix..message_id   STRING  "1" (processed) or "~<token>" (in flight);
                               every key in ONE hash slot (CROSSSLOT otherwise,
                               before the script runs: nothing written)
  ARGV (n>=2)
    [1] lease_ms   decimal integer ms every lease lasts from now, >= 1
                   (1..15 digits, no sign: "-1" is BADARG)
    [2..] token    the lease token KEYS[i-1] was claimed with (without "~"),
                   1..256 bytes
  Returns   an array with one element per key, in KEYS order, as extend.lua:
            1 the value is "~<token>": its expiry is now lease_ms from now;
            0 the key is absent or holds another value (that lease was lost;
            nothing changed). A key of another type gets a CORRUPT element
            instead, and the other keys are still extended
  Errors    BADARG <what>    KEYS is not 1..500 keys, each of 1..2048 bytes:
                             checked first, before ARGV; nothing read or written
            BADARG <what>    before any write; nothing written (also for a
                             count of ARGV other than 1 + the number of keys)
            CORRUPT <what>   an element, not the reply: that key only
  Writes    PEXPIRE key lease_ms for every key whose lease the caller holds
  Atomicity every check precedes the first PEXPIRE; one script call
  Memory    flags=allow-oom: its PEXPIRE calls only move existing expiries, so live
            owners keep their leases when maxmemory is reached under noeviction
  Caller    flags=no-wait,eval: the leases' heartbeats, as extend.lua. The
            caller never waits for replicas after it, and sends it as EVAL
            with its source, never EVALSHA
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
  return redis.error_reply('BADARG want 1 + #KEYS arguments: lease_ms, a token per key')
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
-- <snippet:claim_value>
-- A claim's value: false when the key is absent, and an error reply when it
-- holds another type (CORRUPT, not Redis's WRONGTYPE).
local function load_claim(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then
    return nil, redis.error_reply('CORRUPT the key holds something other than a claim string')
  end
  return v
end
-- </snippet>

local lease = int_arg(ARGV[1])
if not lease or lease == '0' then
  return redis.error_reply('BADARG lease_ms must be a decimal integer >= 1')
end
for i = 2, #ARGV do
  if #ARGV[i] < 1 or #ARGV[i] > 256 then
    return redis.error_reply('BADARG every token must be 1..256 bytes')
  end
end

local out = {}
for i = 1, #KEYS do
  local v, bad = load_claim(KEYS[i])
  if bad then
    out[i] = bad
  elseif v ~= '~' .. ARGV[i + 1] then
    out[i] = 0
  else
    out[i] = redis.call('PEXPIRE', KEYS[i], lease)
  end
end
return out
