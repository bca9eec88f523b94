#!lua
--[[ update.lua — change an idempotency record's status, payload, expiry or lease, fenced by the owner's token.
  KEYS (n=1)
    [1] prefix..key   HASH  status, payload, created_ms, updated_ms, expires_ms,
                            lease_ms, fence, fp, token
  ARGV (n>=2)
    [1] token     '' = unfenced (anyone may update); else the owner token the
                  caller acquired with (1..256 bytes)
    [2..] pairs   field, value, ... : at least one pair, each field at most once,
                  from: status      1..64 bytes
                        payload     0..1048576 bytes (1 MiB), binary-safe
                        expires_ms  decimal ms since the epoch, 0 = never expire
                        lease_ms    decimal ms since the epoch, 0 = no lease
  Returns   {status, payload, created_ms, updated_ms, expires_ms, lease_ms,
             fence, fp, token}: the updated record, the four times integers
            (ms since the epoch, 0 = none), the rest strings (fence a decimal
            uint64); token is the caller's when it gave one, else ''. updated_ms is now (TIME).
            A status other than "pending" clears the lease (lease_ms 0).
            nil when expires_ms was given at or before now: the record expired
            at once and the key is deleted
  Errors    BADARG <what>        before any write; nothing written (also
                             for a count of ARGV other than the header's)
            NOT_FOUND <what>     the key is absent; nothing created
            STALE_OWNER <what>   token given and the record's token differs
                                 (another caller took the record over); nothing written
            CORRUPT <what>       the key holds something other than a record hash;
                                 nothing written
  Writes    HSET status, payload, updated_ms, expires_ms, lease_ms; PEXPIREAT
            expires_ms, or PERSIST for 0 (only when expires_ms is given); DEL
            instead when expires_ms is given and already past
  Atomicity every check precedes the first write
  Complexity O(1) (plus the size of the payload)
]]
local token = ARGV[1]
local key = KEYS[1]

local n = #ARGV
if n < 3 or n % 2 == 0 then
  return redis.error_reply('BADARG want token, then at least one field, value pair')
end
if #token > 256 then
  return redis.error_reply('BADARG token must be 0..256 bytes')
end
-- The fields given, nil when absent (locals: no table to build and collect).
local status, payload, expires, lease
for i = 2, n, 2 do
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
  elseif f == 'expires_ms' or f == 'lease_ms' then
    if #v > 15 or not string.find(v, '^%d+$') then
      return redis.error_reply('BADARG ' .. f .. ' must be a decimal integer >= 0')
    end
    if f == 'expires_ms' then
      seen, expires = expires, v
    else
      seen, lease = lease, v
    end
  else
    return redis.error_reply('BADARG unknown field; want status, payload, expires_ms or lease_ms')
  end
  if seen then
    return redis.error_reply('BADARG field ' .. f .. ' given twice')
  end
end
local set_expires = expires ~= nil

-- One read: HMGET answers all nil for an absent key and WRONGTYPE (caught)
-- for a key of another type; EXISTS tells absent from incomplete only then.
local r = redis.pcall('HMGET', key, 'status', 'payload', 'created_ms', 'updated_ms',
  'expires_ms', 'lease_ms', 'fence', 'fp', 'token')
if r.err then
  return redis.error_reply('CORRUPT the key holds something other than a record hash')
end
for i = 1, 9 do
  if not r[i] then
    if redis.call('EXISTS', key) == 0 then
      return redis.error_reply('NOT_FOUND no such record')
    end
    return redis.error_reply('CORRUPT the record hash lacks a field')
  end
end
-- The four times (1..15 digits) and the fence (1..19 digits), checked with one
-- pattern match over their concatenation.
local c, u, e, l, fence = r[3], r[4], r[5], r[6], r[7]
if r[1] == '' or #c < 1 or #c > 15 or #u < 1 or #u > 15 or #e < 1 or #e > 15
    or #l < 1 or #l > 15 or #fence < 1 or #fence > 19
    or not string.find(c .. u .. e .. l .. fence, '^%d+$') then
  return redis.error_reply('CORRUPT bad status, time field or fence')
end
if token ~= '' and token ~= r[9] then
  return redis.error_reply('STALE_OWNER the record has another owner')
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_s = string.format('%d', now)

status = status or r[1]
payload = payload or r[2]
expires = expires or e
lease = lease or l
if status ~= 'pending' then
  lease = '0'
end
-- Normalise "007" to "7" so the stored value reads back as written by TIME
-- (only a leading zero needs it: the values are checked to be digits).
if #expires > 1 and string.byte(expires, 1) == 48 then
  expires = string.format('%d', tonumber(expires))
end
if #lease > 1 and string.byte(lease, 1) == 48 then
  lease = string.format('%d', tonumber(lease))
end

if set_expires and expires ~= '0' and tonumber(expires) <= now then
  redis.call('DEL', key)
  return false
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
local shown = ''
if token ~= '' then
  shown = token
end
return {status, payload, tonumber(c), now, tonumber(expires), tonumber(lease), fence, r[8], shown}
