#!lua flags=allow-oom
--[[ renew.lua — keep the owner's lease on a pending idempotency record alive while its work runs.
  KEYS (n=1)
    [1] prefix..key   HASH  status, payload, created_ms, updated_ms, expires_ms,
                            lease_ms, fence, fp, token
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
            CORRUPT <what>   the key is not a well-formed record hash (see
                             record_hash below); nothing written
  Writes    HSET lease_ms (only when the caller owns the pending record);
            PEXPIREAT the key to max(expires_ms, lease_ms) when that moves it
            (expires_ms not 0)
  Expiry    the records' expiry rule (acquire.lua, renew.lua, update.lua):
            expires_ms is the retention the record was given (created_ms +
            TTL, or what update.lua set); the key expires then, except while
            the record is pending with a lease past it: then the key lives
            until lease_ms. So a live owner never loses its record to expiry,
            however short the TTL. expires_ms itself is not moved: the final
            write (update.lua) puts the key back on it
  Atomicity the checks precede the first write
  Memory    flags=allow-oom: its HSET overwrites the existing lease_ms field with
            a deadline of at most 16 digits, usually as long as the one it
            replaces (13 digits from 2001 to 2286); it grows by up to 15 bytes
            only when the record had no lease ("0") or lease_ms passes 263
            years. Its PEXPIREAT moves an expiry the key already has (expires_ms
            is not 0). So a live owner keeps its lease when maxmemory is reached
            under noeviction
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
-- <snippet:record_hash>
-- A record's nine fields in reply order, and a tenth, watch (nil unless
-- watch.lua marked the pending record), read in one HMGET; nil when the key
-- is absent; an error reply (CORRUPT) for a key of another type, a missing
-- field or a malformed one. Well-formed: status not empty; the four times
-- decimal ms 0..2^53-1 (at most 16 digits: a 15-digit duration added to now
-- fits); the fence a canonical decimal 1..9999999999999999999 (no leading
-- zero, at most 19 digits, so it never leaves uint64; a record at the largest
-- fence is never taken over).
local function load_record(k)
  local r = redis.pcall('HMGET', k, 'status', 'payload', 'created_ms', 'updated_ms',
    'expires_ms', 'lease_ms', 'fence', 'fp', 'token', 'watch')
  if r.err then
    return nil, redis.error_reply('CORRUPT the key holds something other than a record hash')
  end
  for i = 1, 9 do
    if not r[i] then
      if redis.call('EXISTS', k) == 0 then
        return nil
      end
      return nil, redis.error_reply('CORRUPT the record hash lacks a field')
    end
  end
  for i = 3, 6 do
    local v = r[i]
    if #v < 1 or #v > 16 or not string.find(v, '^%d+$') or tonumber(v) > 9007199254740991 then
      return nil, redis.error_reply('CORRUPT bad status, time field or fence')
    end
  end
  if r[1] == '' or #r[7] > 19 or not string.find(r[7], '^[1-9]%d*$') then
    return nil, redis.error_reply('CORRUPT bad status, time field or fence')
  end
  return r
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
local until_ms = now_ms() + tonumber(lease)
redis.call('HSET', key, 'lease_ms', string.format('%d', until_ms))
-- The expiry rule: the key lives until max(expires_ms, lease_ms).
local e, was = tonumber(r[5]), tonumber(r[6])
if e ~= 0 and math.max(e, until_ms) ~= math.max(e, was) then
  redis.call('PEXPIREAT', key, string.format('%d', math.max(e, until_ms)))
end
return 1
