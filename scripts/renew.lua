#!lua flags=allow-oom
--[[ renew.lua — keep the owner's lease on a pending idempotency record alive while its work runs.
  KEYS (n=1)
    [1] prefix..key   STRING  a record (docs/non-go.md, "Key layout
                              per store")
  ARGV (n=2)
    [1] token      the owner token the caller acquired with, 1..256 bytes
    [2] lease_ms   decimal integer ms the lease lasts from now (TIME), >= 1
                   (1..15 digits, no sign: "-1" is BADARG)
  Returns   1 the record is pending and owned by token: lease_ms is now
              lease_ms from now, and the key lives at least until then. Also
              when the lease had already passed, as long as no acquire.lua
              took the record over: the lease is a field, not the key's
              expiry (unlike extend.lua's: extend answers 0 once its lease
              ran out)
            0 the key is absent (deleted or expired; nothing created)
            -1 the record has another owner, or is no longer pending
              (nothing changed)
  Errors    BADARG <what>    KEYS is not exactly 1 key of 1..2048 bytes:
                             checked first, before ARGV; nothing read or written
            BADARG <what>    before any write; nothing written
            CORRUPT <what>   the key is not a well-formed record (as
                             acquire.lua defines it); nothing written
  Writes    SETRANGE of the 8 bytes of lease_ms in place (only when the
            caller owns the pending record); PEXPIREAT the key to max(expires_ms,
            lease_ms) when that moves it (expires_ms not 0)
  Expiry    the records' expiry rule (acquire.lua, renew.lua, update.lua):
            expires_ms is the retention the record was given (created_ms +
            TTL, or what update.lua set); the key expires then, except while
            the record is pending with a lease past it: then the key lives
            until lease_ms. So a live owner never loses its record to expiry,
            however short the TTL. expires_ms itself is not moved: the final
            write (update.lua) puts the key back on it
  Atomicity the checks precede the first write
  Memory    flags=allow-oom: SETRANGE overwrites the 8 bytes of lease_ms in the
            header, so the value keeps its length and a live owner keeps its
            lease when maxmemory is reached under noeviction; its PEXPIREAT
            moves an expiry the key already has (expires_ms is not 0)
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
-- <snippet:record_string>
-- A record is one string (layout 1), struct format '>c4ddddBc0Bc0Hc0Hc0'
-- followed by the payload: the 4 bytes "ro1 "; created_ms, updated_ms,
-- expires_ms and lease_ms as big-endian IEEE doubles (integer ms since the
-- epoch, 0..2^53-1, 0 = none; lease_ms at byte offset 28); then the fence
-- (canonical decimal, 1..19 digits) and status (1..64 bytes), each after a
-- one-byte length, fp and token (0..256 bytes), each after a big-endian
-- two-byte length; then the payload, raw, to the end of the value.
-- parse_record answers the fields in reply order {status, payload,
-- created_ms, updated_ms, expires_ms, lease_ms, fence, fp, token}, the times
-- numbers; or nil and CORRUPT for anything else (record_value is its inverse).
local function parse_record(v)
  local ok, m, c, u, e, l, f, s, p, tok, pos = pcall(struct.unpack, '>c4ddddBc0Bc0Hc0Hc0', v)
  if not ok or (m ~= 'ro1 ' and m ~= 'ro1w') then
    return nil, redis.error_reply('CORRUPT the key holds something other than a record')
  end
  if not (c >= 0 and c <= 9007199254740991 and c % 1 == 0 and u >= 0 and u <= 9007199254740991
    and u % 1 == 0 and e >= 0 and e <= 9007199254740991 and e % 1 == 0 and l >= 0
    and l <= 9007199254740991 and l % 1 == 0) or #f > 19 or not string.find(f, '^[1-9]%d*$')
    or #s < 1 or #s > 64 or #p > 256 or #tok > 256 then
    return nil, redis.error_reply('CORRUPT bad record header')
  end
  return {s, string.sub(v, pos), c, u, e, l, f, p, tok, m == 'ro1w' or nil}
end
-- </snippet>
-- <snippet:load_record>
-- The record at k: its fields as parse_record answers them; nil when the key
-- is absent; nil and CORRUPT when it holds anything else (another type, or a
-- string that is not a record).
local function load_record(k)
  local v = redis.pcall('GET', k)
  if not v then
    return nil
  elseif type(v) == 'table' then
    return nil, redis.error_reply('CORRUPT the key holds something other than a record')
  end
  return parse_record(v)
end
-- </snippet>

if #token < 1 or #token > 256 then
  return redis.error_reply('BADARG token must be 1..256 bytes')
end
local lease = int_arg(ARGV[2])
if not lease or lease == '0' then
  return redis.error_reply('BADARG lease_ms must be a decimal integer >= 1')
end

local r, bad = load_record(key)
if bad then
  return bad
end
if not r then
  return 0
end
if r[1] ~= 'pending' or r[9] ~= token then
  return -1
end
local was = r[6]
r[6] = now_ms() + tonumber(lease)
-- lease_ms is the 8 bytes at offset 28: overwritten in place.
redis.call('SETRANGE', key, 28, struct.pack('>d', r[6]))
-- The expiry rule: the key lives until max(expires_ms, lease_ms).
local e = r[5]
if e ~= 0 and math.max(e, r[6]) ~= math.max(e, was) then
  redis.call('PEXPIREAT', key, math.max(e, r[6]))
end
return 1
