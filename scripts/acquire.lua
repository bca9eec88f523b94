#!lua
--[[ acquire.lua — acquire an idempotency record: create it, take over a pending one whose lease passed, or report it.
  KEYS (n=1)
    [1] prefix..key   STRING  "ro1 " created_ms updated_ms expires_ms lease_ms
                              fence, lengths of status, fp, token; then status,
                              fp, token, payload (docs/non-go.md, "Key
                              layout per store")
  ARGV (n=4)
    [1] ttl_ms        decimal integer ms a new record lives, 0 = no expiry
                      (1..15 digits, no sign: "-1" is BADARG)
    [2] token         the caller's owner token, 1..256 bytes
    [3] fingerprint   the request's fingerprint, 0..256 bytes ('' = none)
    [4] lease_ms      decimal integer ms the caller's lease lasts, 0 = no lease
                      (1..15 digits, no sign: "-1" is BADARG)
  Returns   {acquired, status, payload, created_ms, updated_ms, expires_ms,
             lease_ms, fence, fp, token}: 10 elements, acquired and the four
            times integers (ms since the epoch from TIME, 0 = none), the rest
            strings (fence a decimal uint64)
            acquired 1: a new record (pending, fence "1"), or a pending record
               whose lease passed, taken over (new token, fence + 1, new lease,
               created_ms and expires_ms kept); token is the caller's. A
               record at fence 9999999999999999999, the largest, is not taken
               over (acquired 0)
            acquired 0: the existing record, unchanged; token is '' (an owner's
               token is never shown to a non-owner). A pending record with
               lease_ms 0 has no lease and is never taken over
  Errors    BADARG <what>    KEYS is not exactly 1 key of 1..2048 bytes:
                             checked first, before ARGV; nothing read or written
            BADARG <what>     before any write; nothing written (also
                             for a count of ARGV other than the header's)
            MISMATCH <what>   the caller's and the record's fingerprints are both
                              non-empty and differ; nothing written
            CORRUPT <what>    the key holds something other than a record;
                              nothing written
  Writes    new record: SET, with PXAT max(expires_ms, lease_ms) when
            ttl_ms > 0
            takeover: SET of the record with token, lease_ms, updated_ms,
            fence + 1 and fp (the record's first non-empty fingerprint
            sticks), PXAT max(expires_ms, lease_ms) when that moves the key's
            expiry (expires_ms not 0), else KEEPTTL
  Expiry    the records' expiry rule (see renew.lua): the key lives until
            expires_ms, or until lease_ms while a pending owner's lease runs
            past it, so a TTL shorter than the lease never expires the record
            under its owner; expires_ms stays created_ms + TTL
  Atomicity every check precedes the first write
  Length    70 lines of code besides its snippets: creating, taking over (fence + 1
            on a decimal string, exact past 2^53) and reporting a record must be
            one step, or two callers could both take a lease over
  Complexity O(1) (plus the size of the payload in the reply)
]]
-- <snippet:one_key>
-- Exactly one key of 1..2048 bytes (a prefix of at most 1024 bytes and an id
-- of 1..1024, as the Go stores check), refused before anything else is read.
if #KEYS ~= 1 or #KEYS[1] == 0 or #KEYS[1] > 2048 then
  return redis.error_reply('BADARG want exactly 1 key (KEYS) of 1..2048 bytes')
end
-- </snippet>
if #ARGV ~= 4 then
  return redis.error_reply('BADARG want 4 arguments: ttl_ms, token, fingerprint, lease_ms')
end
local token, fp = ARGV[2], ARGV[3]
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
-- <snippet:record_value>
-- A record in parse_record's form as its layout-1 string.
local function record_value(r)
  return struct.pack('>c4ddddBc0Bc0Hc0Hc0', r[10] and 'ro1w' or 'ro1 ', r[3], r[4], r[5], r[6], #r[7], r[7],
    #r[1], r[1], #r[8], r[8], #r[9], r[9]) .. r[2]
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

local ttl, lease = int_arg(ARGV[1]), int_arg(ARGV[4])
if not ttl then
  return redis.error_reply('BADARG ttl_ms must be a decimal integer >= 0')
end
if #token < 1 or #token > 256 then
  return redis.error_reply('BADARG token must be 1..256 bytes')
end
if #fp > 256 then
  return redis.error_reply('BADARG fingerprint must be 0..256 bytes')
end
if not lease then
  return redis.error_reply('BADARG lease_ms must be a decimal integer >= 0')
end

-- The record first: the duplicate of a finished job (the common existing
-- record) then costs one GET and no clock read; a new record a GET, TIME and
-- one SET.
local r, bad = load_record(key)
if bad then
  return bad
end
if r then
  if fp ~= '' and r[8] ~= '' and fp ~= r[8] then
    return redis.error_reply('MISMATCH the key was acquired with a different fingerprint')
  end
  -- Not pending, no lease, or the largest fence: never taken over.
  if r[1] ~= 'pending' or r[6] == 0 or r[7] == '9999999999999999999' then
    return {0, r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], ''}
  end
  local now = now_ms()
  if r[6] > now then
    -- A pending record whose lease still runs.
    return {0, r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], ''}
  end
  -- Take over: fence + 1 on the decimal string, exact past 2^53.
  local fence, i = r[7], #r[7]
  while i > 0 and string.byte(fence, i) == 57 do
    i = i - 1
  end
  if i == 0 then
    fence = '1' .. string.rep('0', #fence)
  else
    fence = string.sub(fence, 1, i - 1) .. string.char(string.byte(fence, i) + 1)
      .. string.rep('0', #fence - i)
  end
  if r[8] == '' then
    r[8] = fp
  end
  -- The expiry rule: the key lives until max(expires_ms, lease_ms).
  local e, was = r[5], r[6]
  r[4], r[6], r[7], r[9] = now, lease == '0' and 0 or now + tonumber(lease), fence, token
  if e ~= 0 and math.max(e, r[6]) ~= math.max(e, was) then
    redis.call('SET', key, record_value(r), 'PXAT', math.max(e, r[6]))
  else
    redis.call('SET', key, record_value(r), 'KEEPTTL')
  end
  return {1, r[1], r[2], r[3], now, r[5], r[6], fence, r[8], token}
end

local now = now_ms()
local lease_until, expires = 0, 0
if lease ~= '0' then
  lease_until = now + tonumber(lease)
end
if ttl ~= '0' then
  expires = now + tonumber(ttl)
end
local rec = record_value({'pending', '', now, now, expires, lease_until, '1', fp, token})
if expires == 0 then
  redis.call('SET', key, rec)
else
  -- The expiry rule: a lease past the TTL keeps the key until it passes.
  redis.call('SET', key, rec, 'PXAT', math.max(expires, lease_until))
end
return {1, 'pending', '', now, now, expires, lease_until, '1', fp, token}
