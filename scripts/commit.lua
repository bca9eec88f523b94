#!lua flags=allow-oom
--[[ commit.lua — turn the caller's lease into a processed claim.
  KEYS (n=1)
    [1] prefix..message_id   STRING  "1" (processed) or "~<token>" (in flight)
  ARGV (n=2)
    [1] token    the lease token the caller claimed with (without "~"), 1..256 bytes
    [2] ttl_ms   decimal integer ms the processed mark lives, 0 = no expiry
                 (1..15 digits, no sign: "-1" is BADARG)
  Returns   1 the value was "~<token>" and is now "1" with the new expiry
            2 the key was absent (the lease expired and nobody took the id):
              "1" is written with the new expiry (SET NX)
            0 the key already holds "1": processed, by another consumer or by
              an earlier attempt of this very commit (nothing changed)
            -1 the key holds any other value: another consumer's lease
               "~<other>", or a value other than "1" written by something
               else (which claim.lua counts as processed); nothing changed
  Errors    BADARG <what>    KEYS is not exactly 1 key of 1..2048 bytes:
                             checked first, before ARGV; nothing read or written
            BADARG <what>    before any write; nothing written (also
                             for a count of ARGV other than the header's)
            CORRUPT <what>   the key holds something other than a string; nothing written
  Writes    SET KEYS[1] "1" [PX ttl_ms] (own lease, or NX on an absent key)
  Atomicity all checks precede the single SET
  Memory    flags=allow-oom: the effect has already happened, so its commit is
            never refused when maxmemory is reached under noeviction; its SET shrinks
            "~<token>" to "1" (or writes one short key where the lease expired)
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
  return redis.error_reply('BADARG want 2 arguments: token, ttl_ms')
end
local token = ARGV[1]

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

if #token < 1 or #token > 256 then
  return redis.error_reply('BADARG token must be 1..256 bytes')
end
local ttl = int_arg(ARGV[2])
if not ttl then
  return redis.error_reply('BADARG ttl_ms must be a decimal integer >= 0')
end

local v, bad = load_claim(KEYS[1])
if bad then
  return bad
end
local reply = 1
if v == false then
  reply = 2
elseif v == '1' then
  return 0
elseif v ~= '~' .. token then
  return -1
end
-- A plain SET drops the lease's expiry; PX sets the dedupe window instead.
if ttl ~= '0' then
  redis.call('SET', KEYS[1], '1', 'PX', ttl)
else
  redis.call('SET', KEYS[1], '1')
end
return reply
