#!lua
--[[ acquire.lua — acquire an idempotency record: create it, take over a pending one whose lease passed, or report it.
  KEYS (n=1)
    [1] prefix..key   STRING  "ro1 " created_ms updated_ms expires_ms lease_ms
                              fence, lengths of status, fp, token; then status,
                              fp, token, payload (layout 1: docs/non-go.md,
                              "Key layout per store"); a layout-0 HASH is
                              read too
  ARGV (n=4)
    [1] ttl_ms        decimal integer ms a new record lives, 0 = no expiry
    [2] token         the caller's owner token, 1..256 bytes
    [3] fingerprint   the request's fingerprint, 0..256 bytes ('' = none)
    [4] lease_ms      decimal integer ms the caller's lease lasts, 0 = no lease
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
  Errors    BADARG <what>     before any write; nothing written (also
                             for a count of ARGV other than the header's)
            MISMATCH <what>   the caller's and the record's fingerprints are both
                              non-empty and differ; nothing written
            CORRUPT <what>    the key holds something other than a record;
                              nothing written
  Writes    new record: SET NX GET, with PXAT expires_ms when ttl_ms > 0 (the
            create and the read of what was there in one command)
            takeover: SET KEEPTTL of the record with token, lease_ms,
            updated_ms, fence + 1 and fp (the record's first non-empty
            fingerprint sticks); a layout-0 hash is rewritten in layout 1
  Atomicity every check precedes the first write; SET NX writes nothing when
            the key exists
  Complexity O(1) (plus the size of the payload in the reply)
]]
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
-- match instead of three calls. Measured with bin/benchcmp -server-time-only:
-- claim.lua 1.43x -> 1.26x the minimal script's server time, 12% less.)
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
-- A record is one string (layout 1): "ro1 ", then created_ms, updated_ms,
-- expires_ms and lease_ms (16 digits each, ms since the epoch, 0 = none), the
-- fence (19 digits, 1..9999999999999999999) and the byte lengths of status
-- (2 digits, 1..64), fp and token (3 digits each, 0..256), each field followed
-- by one space: 103 bytes; then status, fp, token and the payload, raw (the
-- payload is the rest of the value, so it may hold any byte). parse_record
-- answers its fields in reply order {status, payload, created_ms, updated_ms,
-- expires_ms, lease_ms, fence, fp, token}, the times numbers, the fence its
-- canonical decimal; or nil and CORRUPT for anything else. record_value is its
-- inverse.
local function parse_record(v)
  local c, u, e, l, f, sl, fl, tl = string.match(v, '^ro1 (%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d) (%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d) (%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d) (%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d) (%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d) (%d%d) (%d%d%d) (%d%d%d) ')
  if not c then
    return nil, redis.error_reply('CORRUPT the key holds something other than a record')
  end
  c, u, e, l = tonumber(c), tonumber(u), tonumber(e), tonumber(l)
  sl, fl, tl = tonumber(sl), tonumber(fl), tonumber(tl)
  local fs = string.find(f, '[1-9]')
  if not fs or sl < 1 or sl > 64 or fl > 256 or tl > 256 or #v < 103 + sl + fl + tl
    or c > 9007199254740991 or u > 9007199254740991 or e > 9007199254740991
    or l > 9007199254740991 then
    return nil, redis.error_reply('CORRUPT bad record header')
  end
  local i = 104 + sl
  local j = i + fl
  local k = j + tl
  return {string.sub(v, 104, i - 1), string.sub(v, k), c, u, e, l, string.sub(f, fs),
    string.sub(v, i, j - 1), string.sub(v, j, k - 1)}
end
local function record_value(r)
  return string.format('ro1 %016d %016d %016d %016d %s%s %02d %03d %03d ', r[3], r[4],
    r[5], r[6], string.rep('0', 19 - #r[7]), r[7], #r[1], #r[8], #r[9])
    .. r[1] .. r[8] .. r[9] .. r[2]
end
-- </snippet>
-- <snippet:record_hash>
-- A record of layout 0, the nine-field hash written before layout 1 (status,
-- payload, created_ms, updated_ms, expires_ms, lease_ms, fence, fp, token),
-- read in one HMGET into parse_record's form; nil and CORRUPT for a key of
-- another type, a missing field or a malformed one (status not 1..64 bytes, fp
-- or token over 256; a time not decimal ms 0..2^53-1; a fence not a canonical
-- decimal of at most 19 digits).
-- Every write script rewrites such a record in layout 1.
local function load_hash(k)
  local r = redis.pcall('HMGET', k, 'status', 'payload', 'created_ms', 'updated_ms',
    'expires_ms', 'lease_ms', 'fence', 'fp', 'token')
  if r.err then
    return nil, redis.error_reply('CORRUPT the key holds something other than a record')
  end
  for i = 1, 9 do
    if not r[i] then
      return nil, redis.error_reply('CORRUPT the record hash lacks a field')
    end
  end
  for i = 3, 6 do
    local v = r[i]
    if #v < 1 or #v > 16 or not string.find(v, '^%d+$') or tonumber(v) > 9007199254740991 then
      return nil, redis.error_reply('CORRUPT bad status, time field or fence')
    end
    r[i] = tonumber(v)
  end
  if r[1] == '' or #r[1] > 64 or #r[8] > 256 or #r[9] > 256 or #r[7] > 19
    or not string.find(r[7], '^[1-9]%d*$') then
    return nil, redis.error_reply('CORRUPT bad status, time field or fence')
  end
  return r
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

local v = redis.pcall('GET', key)
if not v then
  local now = now_ms()
  local lease_until, expires = 0, 0
  if lease ~= '0' then lease_until = now + tonumber(lease) end
  if ttl ~= '0' then expires = now + tonumber(ttl) end
  if expires == 0 then
    redis.call('SET', key, record_value({'pending', '', now, now, 0, lease_until, '1', fp, token}))
  else
    redis.call('SET', key, record_value({'pending', '', now, now, expires, lease_until, '1', fp, token}), 'PXAT', expires)
  end
  return {1, 'pending', '', now, now, expires, lease_until, '1', fp, token}
end
local r, bad
if type(v) == 'table' then
  r, bad = load_hash(key)
else
  r, bad = parse_record(v)
end
if bad then
  return bad
end
if fp ~= '' and r[8] ~= '' and fp ~= r[8] then
  return redis.error_reply('MISMATCH the key was acquired with a different fingerprint')
end
-- Not pending, no lease, a lease that still runs, or the largest fence: reported.
if r[1] ~= 'pending' or r[6] == 0 or r[7] == '9999999999999999999' then
  return {0, r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], ''}
end

local now = now_ms()
local lease_until = lease == '0' and 0 or now + tonumber(lease)
if r[6] > now then
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
r[4], r[6], r[7], r[9] = now, lease_until, fence, token
redis.call('SET', key, record_value(r), 'KEEPTTL')
return {1, r[1], r[2], r[3], now, r[5], lease_until, fence, r[8], token}
