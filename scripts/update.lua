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
             fence, fp, token}: the updated record, 9 strings; token is the
            caller's when it gave one, else ''. updated_ms is now (TIME).
            A status other than "pending" clears the lease (lease_ms 0).
            nil when expires_ms was given at or before now: the record expired
            at once and the key is deleted
  Errors    BADARG <what>        before any write; nothing written
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

local function is_ms(s)
  return #s <= 15 and string.match(s, '^%d+$') ~= nil
end

local n = #ARGV
if n < 3 or n % 2 == 0 then
  return redis.error_reply('BADARG want token, then at least one field, value pair')
end
if #token > 256 then
  return redis.error_reply('BADARG token must be 0..256 bytes')
end
local set = {}
for i = 2, n, 2 do
  local f, v = ARGV[i], ARGV[i + 1]
  if f == 'status' then
    if #v < 1 or #v > 64 then
      return redis.error_reply('BADARG status must be 1..64 bytes')
    end
  elseif f == 'payload' then
    if #v > 1048576 then
      return redis.error_reply('BADARG payload must be at most 1048576 bytes')
    end
  elseif f == 'expires_ms' or f == 'lease_ms' then
    if not is_ms(v) then
      return redis.error_reply('BADARG ' .. f .. ' must be a decimal integer >= 0')
    end
  else
    return redis.error_reply('BADARG unknown field; want status, payload, expires_ms or lease_ms')
  end
  if set[f] then
    return redis.error_reply('BADARG field ' .. f .. ' given twice')
  end
  set[f] = v
end

local kind = redis.call('TYPE', key)['ok']
if kind == 'none' then
  return redis.error_reply('NOT_FOUND no such record')
end
if kind ~= 'hash' then
  return redis.error_reply('CORRUPT the key holds a ' .. kind .. ', not a record hash')
end
local r = redis.call('HMGET', key, 'status', 'payload', 'created_ms', 'updated_ms',
  'expires_ms', 'lease_ms', 'fence', 'fp', 'token')
for i = 1, 9 do
  if not r[i] then
    return redis.error_reply('CORRUPT the record hash lacks a field')
  end
end
for i = 3, 6 do
  if not is_ms(r[i]) then
    return redis.error_reply('CORRUPT a time field is not decimal ms')
  end
end
if r[1] == '' or #r[7] > 19 or not string.match(r[7], '^%d+$') then
  return redis.error_reply('CORRUPT bad status or fence')
end
if token ~= '' and token ~= r[9] then
  return redis.error_reply('STALE_OWNER the record has another owner')
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_s = string.format('%d', now)

local status = set['status'] or r[1]
local payload = set['payload'] or r[2]
local expires = set['expires_ms'] or r[5]
local lease = set['lease_ms'] or r[6]
if status ~= 'pending' then
  lease = '0'
end
-- Normalise "007" to "7" so the stored value reads back as written by TIME.
expires = string.format('%d', tonumber(expires))
lease = string.format('%d', tonumber(lease))

if set['expires_ms'] and expires ~= '0' and tonumber(expires) <= now then
  redis.call('DEL', key)
  return false
end
redis.call('HSET', key, 'status', status, 'payload', payload, 'updated_ms', now_s,
  'expires_ms', expires, 'lease_ms', lease)
if set['expires_ms'] then
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
return {status, payload, r[3], now_s, expires, lease, r[7], r[8], shown}
