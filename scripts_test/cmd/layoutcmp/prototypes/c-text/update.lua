#!lua
--[[ update.lua — change an idempotency record's status, payload, expiry or lease, fenced by the owner's token.
  KEYS (n=1)
    [1] prefix..key   STRING  a record in layout 1 (docs/non-go.md,
                              "Key layout per store"); a layout-0 HASH is
                              read too
  ARGV (n>=3)
    [1] token     '' = unfenced (anyone may update); else the owner token the
                  caller acquired with (1..256 bytes)
    [2..] pairs   field, value, ... : at least one pair, each field at most once,
                  from: status      1..64 bytes
                        payload     0..1048576 bytes (1 MiB), binary-safe
                        expires_in_ms  decimal ms from now (the server's TIME)
                                    until the record expires; 0 = never expire;
                                    negative ("-1") = already past: delete it
                        lease_in_ms    decimal ms from now (TIME) until the
                                    owner's lease passes; 0 = no lease; negative
                                    = a lease already passed (open to takeover)
                  (durations, as in acquire.lua, never absolute times: at most
                  15 digits after an optional "-"; the record stores the
                  deadlines expires_ms and lease_ms, ms since the epoch)
  Returns   1 the record is updated (updated_ms is now, TIME; a status other
              than "pending" clears the lease: lease_ms 0)
            0 expires_in_ms was negative: the record expired at once and the
              key is deleted
            (Only a status: the caller gave every value it wrote. Sending the
            record back with its payload cost a quarter of the script's server
            time: 26.6 vs 19.3 µs per call for a 256-byte payload, measured
            in interleaved EVALSHA loops; read the record with get.lua.)
  Errors    BADARG <what>        before any write; nothing written (also
                             for a count of ARGV other than the header's)
            NOT_FOUND <what>     the key is absent; nothing created
            STALE_OWNER <what>   token given and the record's token differs
                                 (another caller took the record over); nothing written
            CORRUPT <what>       the key holds something other than a record;
                                 nothing written
  Writes    one SET of the record in layout 1 (a layout-0 hash is rewritten):
            KEEPTTL, or PXAT expires_ms, or no expiry for 0 when expires_in_ms
            is given; DEL instead when expires_in_ms is negative
  Atomicity every check precedes the first write
  Length    75 lines of code besides its snippets: four optional fields, each
            validated before the first write, and two durations turned into
            deadlines on the server's clock; one script, so a fenced change is
            all or nothing
  Complexity O(1) (plus the size of the payload)
]]
local token = ARGV[1]
local key = KEYS[1]

if #ARGV < 3 or #ARGV % 2 == 0 then
  return redis.error_reply('BADARG want token, then at least one field, value pair')
end

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
-- <snippet:load_record>
-- The record at k (layout 1, or layout 0 read with load_hash); nil when the
-- key is absent; nil and CORRUPT when it holds anything else.
local function load_record(k)
  local v = redis.pcall('GET', k)
  if not v then
    return nil
  elseif type(v) == 'table' then
    return load_hash(k)
  end
  return parse_record(v)
end
-- </snippet>

if #token > 256 then
  return redis.error_reply('BADARG token must be 0..256 bytes')
end
-- The fields given, nil when absent (locals: no table to build and collect).
local status, payload, expires, lease
for i = 2, #ARGV, 2 do
  local f, v = ARGV[i], ARGV[i + 1]
  local seen
  if f == 'status' then
    if #v < 1 or #v > 64 then
      return redis.error_reply('BADARG status must be 1..64 bytes')
    end
    seen, status = status, v
  elseif f == 'payload' then
    if #v > 1048576 then
      return redis.error_reply('BADARG payload must be at most 1048576 bytes')
    end
    seen, payload = payload, v
  elseif f == 'expires_in_ms' or f == 'lease_in_ms' then
    -- A duration from the server's TIME; a leading "-": already past.
    if not int_arg(string.byte(v, 1) == 45 and string.sub(v, 2) or v) then
      return redis.error_reply('BADARG ' .. f .. ' must be a decimal integer of ms (at most 15 digits, "-" = past)')
    end
    if f == 'expires_in_ms' then
      seen, expires = expires, v
    else
      seen, lease = lease, v
    end
  else
    return redis.error_reply('BADARG unknown field; want status, payload, expires_in_ms or lease_in_ms')
  end
  if seen then
    return redis.error_reply('BADARG field ' .. f .. ' given twice')
  end
end
local r, bad = load_record(key)
if bad then
  return bad
end
if not r then
  return redis.error_reply('NOT_FOUND no such record')
end
if token ~= '' and token ~= r[9] then
  return redis.error_reply('STALE_OWNER the record has another owner')
end

local now = now_ms()
-- Durations become deadlines on the server's clock: 0 = none; a deadline is
-- at least 1 (0 would read as "none").
local set_expires = expires ~= nil
if expires then
  local d = tonumber(expires)
  if d < 0 then
    redis.call('DEL', key)
    return 0
  end
  r[5] = d == 0 and 0 or now + d
end
if lease then
  local d = tonumber(lease)
  r[6] = d == 0 and 0 or math.max(now + d, 1)
end
r[1] = status or r[1]
r[2] = payload or r[2]
r[4] = now
if r[1] ~= 'pending' then
  r[6] = 0
end
if not set_expires then
  redis.call('SET', key, record_value(r), 'KEEPTTL')
elseif r[5] == 0 then
  redis.call('SET', key, record_value(r))
else
  redis.call('SET', key, record_value(r), 'PXAT', r[5])
end
return 1
