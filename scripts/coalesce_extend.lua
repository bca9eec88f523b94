#!lua flags=allow-oom
--[[ coalesce_extend.lua — keep the caller's lease on a coalescing key alive while its run goes on.
  KEYS (n=1)
    [1] prefix..key   HASH  tok, lease, fence, run, next, due, first, last
                            (see coalesce_trigger.lua)
  ARGV (n=2)
    [1] token      the caller's owner token, 1..256 bytes
    [2] lease_ms   decimal integer ms the lease lasts from now, >= 1
                   (1..15 digits, no sign: "-1" is BADARG)
  Returns   1 the key is held by token: its lease is now + lease_ms (also
              after the lease passed, as long as nobody took the key)
            0 the key is absent or held by another token, or by none (the
              lease was lost; nothing changed)
  Errors    BADARG <what>    KEYS is not exactly 1 key of 1..2048 bytes:
                             checked first, before ARGV; nothing read or written
            BADARG <what>    before any write; nothing written (also
                             for a count of ARGV other than the header's)
            CORRUPT <what>   the key holds something other than a coalescing
                             hash; nothing written
  Writes    HSET lease (only when the caller holds the key)
  Atomicity the check precedes the single HSET
  Memory    flags=allow-oom: its HSET rewrites the lease field with a time of
            the same size, so a live owner keeps its lease when maxmemory is
            reached under noeviction
  Caller    flags=no-wait,eval: a lease heartbeat. The caller never waits
            for replicas after it (a lost extension only shortens a lease,
            and a beat held up by WAIT would cancel the work while the lease
            is held), and sends it as EVAL with its source, never EVALSHA (a
            NOSCRIPT after a restart or failover costs a second round trip
            that a beat may not have)
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

if #token < 1 or #token > 256 then
  return redis.error_reply('BADARG token must be 1..256 bytes')
end
local lease = int_arg(ARGV[2])
if not lease or lease == '0' then
  return redis.error_reply('BADARG lease_ms must be a decimal integer >= 1')
end

local tok = redis.pcall('HGET', key, 'tok')
if type(tok) == 'table' and tok.err then
  return redis.error_reply('CORRUPT the key holds something other than a coalescing hash')
end
if tok ~= token then
  return 0
end
redis.call('HSET', key, 'lease', string.format('%d', now_ms() + tonumber(lease)))
return 1
