#!lua flags=allow-oom
--[[ renew.lua — keep the owner's lease on a pending idempotency record alive while its work runs.
  KEYS (n=1)
    [1] prefix..key   HASH  status, payload, created_ms, updated_ms, expires_ms,
                            lease_ms, fence, fp, token
  ARGV (n=2)
    [1] token      the owner token the caller acquired with, 1..256 bytes
    [2] lease_ms   decimal integer ms the lease lasts from now (TIME), >= 1
  Returns   1 the record is pending and owned by token: lease_ms is now
              lease_ms from now
            0 the key is absent (deleted or expired; nothing created)
            -1 the record has another owner, or is no longer pending
              (nothing changed)
  Errors    BADARG <what>    before any write; nothing written
            CORRUPT <what>   the key holds something other than a record hash;
                             nothing written
  Writes    HSET lease_ms (only when the caller owns the pending record)
  Atomicity the checks precede the single HSET
  Memory    flags=allow-oom: it overwrites lease_ms with a time of the same
            length (13 digits from 2001 to 2286), so a live owner keeps its
            lease when maxmemory is reached under noeviction
  Complexity O(1)
]]
local token, lease = ARGV[1], ARGV[2]
local key = KEYS[1]

if #ARGV ~= 2 then
  return redis.error_reply('BADARG want 2 arguments: token, lease_ms')
end
if #token < 1 or #token > 256 then
  return redis.error_reply('BADARG token must be 1..256 bytes')
end
if #lease > 15 or not string.find(lease, '^%d+$') or tonumber(lease) < 1 then
  return redis.error_reply('BADARG lease_ms must be a decimal integer >= 1')
end

local r = redis.pcall('HMGET', key, 'status', 'token')
if r.err then
  return redis.error_reply('CORRUPT the key holds something other than a record hash')
end
if not r[1] or not r[2] then
  if redis.call('EXISTS', key) == 0 then
    return 0
  end
  return redis.error_reply('CORRUPT the record hash lacks a field')
end
if r[1] ~= 'pending' or r[2] ~= token then
  return -1
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', key, 'lease_ms', string.format('%d', now + tonumber(lease)))
return 1
