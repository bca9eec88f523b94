#!lua flags=allow-oom
--[[ delete.lua — delete an idempotency record, unconditionally or only for its owner.
  KEYS (n=1)
    [1] prefix..key   HASH  status, payload, created_ms, updated_ms, expires_ms,
                            lease_ms, fence, fp, token
  ARGV (n=1)
    [1] token   '' = delete whatever the key holds; else the owner token the
                caller acquired with (1..256 bytes): delete only if it is the
                record's current token
  Returns   1 deleted; 0 the key is absent (nothing to fence against)
  Errors    BADARG <what>        before any write; nothing written (also
                             for a count of ARGV other than the header's)
            STALE_OWNER <what>   token given and the record's token differs
                                 (another caller took the record over); nothing written
            CORRUPT <what>       token given and the key is not a record hash;
                                 nothing written
  Writes    DEL KEYS[1]
  Atomicity the checks precede the single DEL
  Memory    flags=allow-oom: it only deletes, so it runs (and frees memory) when
            maxmemory is reached under noeviction
  Complexity O(1)
]]
local token = ARGV[1]
local key = KEYS[1]

if #ARGV ~= 1 then
  return redis.error_reply('BADARG want 1 argument: token')
end
if #token > 256 then
  return redis.error_reply('BADARG token must be 0..256 bytes')
end

if token ~= '' then
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'none' then
    return 0
  end
  if kind ~= 'hash' then
    return redis.error_reply('CORRUPT the key holds a ' .. kind .. ', not a record hash')
  end
  local held = redis.call('HGET', key, 'token')
  if not held then
    return redis.error_reply('CORRUPT the record hash lacks a field')
  end
  if held ~= token then
    return redis.error_reply('STALE_OWNER the record has another owner')
  end
end
return redis.call('DEL', key)
