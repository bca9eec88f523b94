#!lua flags=allow-oom
--[[ delete.lua — delete an idempotency record, unconditionally or only for its owner.
  KEYS (n=1)
    [1] prefix..key   HASH  status, payload, created_ms, updated_ms, expires_ms,
                            lease_ms, fence, fp, token; watch (optional,
                            watch.lua)
  ARGV (n=1)
    [1] token   '' = delete whatever the key holds; else the owner token the
                caller acquired with (1..256 bytes): delete only if it is the
                record's current token
  Returns   1 deleted; 0 the key is absent (nothing to fence against)
  Errors    BADARG <what>    KEYS is not exactly 1 key of 1..2048 bytes:
                             checked first, before ARGV; nothing read or written
            BADARG <what>        before any write; nothing written (also
                             for a count of ARGV other than the header's)
            STALE_OWNER <what>   token given and the record's token differs
                                 (another caller took the record over); nothing written
            CORRUPT <what>       token given and the key is not a well-formed
                                 record hash (see record_hash below); nothing written
  Writes    DEL KEYS[1]; with a token, on a record watch.lua marked: SPUBLISH
            KEYS[1] "deleted" after it, so its waiters acquire the key (an
            unfenced delete reads nothing and publishes nothing: waiters find
            out on their bounded re-read)
  Atomicity the checks precede the single DEL
  Memory    flags=allow-oom: it only deletes (its SPUBLISH stores nothing), so
            it runs (and frees memory) when maxmemory is reached under noeviction
  Complexity O(1)
]]
-- <snippet:one_key>
-- Exactly one key of 1..2048 bytes (a prefix of at most 1024 bytes and an id
-- of 1..1024, as the Go stores check), refused before anything else is read.
if #KEYS ~= 1 or #KEYS[1] == 0 or #KEYS[1] > 2048 then
  return redis.error_reply('BADARG want exactly 1 key (KEYS) of 1..2048 bytes')
end
-- </snippet>
if #ARGV ~= 1 then
  return redis.error_reply('BADARG want 1 argument: token')
end
local token = ARGV[1]
local key = KEYS[1]

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

if #token > 256 then
  return redis.error_reply('BADARG token must be 0..256 bytes')
end

local watched = false
if token ~= '' then
  local r, bad = load_record(key)
  if bad then
    return bad
  end
  if not r then
    return 0
  end
  if r[9] ~= token then
    return redis.error_reply('STALE_OWNER the record has another owner')
  end
  watched = r[10]
end
local n = redis.call('DEL', key)
-- The owner gave the key back: its waiters (watch.lua) acquire it again (a
-- pcall, as in update.lua: a refused publish never fails the delete).
if watched then
  redis.pcall('SPUBLISH', key, 'deleted')
end
return n
