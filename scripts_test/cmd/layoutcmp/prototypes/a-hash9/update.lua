#!lua
--[[ update.lua — change an idempotency record's status, payload, expiry or lease, fenced by the owner's token.
  KEYS (n=1)
    [1] prefix..key   HASH  status, payload, created_ms, updated_ms, expires_ms,
                            lease_ms, fence, fp, token
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
            CORRUPT <what>       the key holds something other than a record hash;
                                 nothing written
  Writes    HSET status, payload, updated_ms, expires_ms, lease_ms; PEXPIREAT
            expires_ms, or PERSIST for 0 (only when expires_in_ms is given); DEL
            instead when expires_in_ms is negative
  Atomicity every check precedes the first write
  Length    100 lines of code besides its snippets: four optional fields, each
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
-- <snippet:record_hash>
-- A record's nine fields in reply order, read in one HMGET; nil when the key
-- is absent; an error reply (CORRUPT) for a key of another type, a missing
-- field or a malformed one. Well-formed: status not empty; the four times
-- decimal ms 0..2^53-1 (at most 16 digits: a 15-digit duration added to now
-- fits); the fence a canonical decimal 1..9999999999999999999 (no leading
-- zero, at most 19 digits, so it never leaves uint64; a record at the largest
-- fence is never taken over).
local function load_record(k)
  local r = redis.pcall('HMGET', k, 'status', 'payload', 'created_ms', 'updated_ms',
    'expires_ms', 'lease_ms', 'fence', 'fp', 'token')
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
local set_expires = expires ~= nil
local r, bad = load_record(key)
if bad then
  return bad
end
if not r then
  return redis.error_reply('NOT_FOUND no such record')
end
local e, l = r[5], r[6]
if token ~= '' and token ~= r[9] then
  return redis.error_reply('STALE_OWNER the record has another owner')
end

local now = now_ms()
local now_s = string.format('%d', now)

status = status or r[1]
payload = payload or r[2]
-- Durations become deadlines on the server's clock: 0 = none; a deadline is
-- at least 1 (0 would read as "none").
local past = false
if expires then
  local d = tonumber(expires)
  if d < 0 then
    past = true
  elseif d == 0 then
    expires = '0'
  else
    expires = string.format('%d', now + d)
  end
else
  expires = e
end
if lease then
  local d = tonumber(lease)
  if d == 0 then
    lease = '0'
  else
    lease = string.format('%d', math.max(now + d, 1))
  end
else
  lease = l
end
if status ~= 'pending' then
  lease = '0'
end
-- Normalise a stored "007" to "7" so the value reads back as written by TIME
-- (only a leading zero needs it: the values are checked to be digits).
if #expires > 1 and string.byte(expires, 1) == 48 then
  expires = string.format('%d', tonumber(expires))
end
if #lease > 1 and string.byte(lease, 1) == 48 then
  lease = string.format('%d', tonumber(lease))
end

if past then
  redis.call('DEL', key)
  return 0
end
redis.call('HSET', key, 'status', status, 'payload', payload, 'updated_ms', now_s,
  'expires_ms', expires, 'lease_ms', lease)
if set_expires then
  if expires == '0' then
    redis.call('PERSIST', key)
  else
    redis.call('PEXPIREAT', key, expires)
  end
end
return 1
