#!lua flags=no-writes
--[[ get.lua — read an idempotency record, without its owner's token.
  KEYS (n=1)
    [1] prefix..key   HASH  status, payload, created_ms, updated_ms, expires_ms,
                            lease_ms, fence, fp, token
  ARGV (n=0)
  Returns   {status, payload, created_ms, updated_ms, expires_ms, lease_ms,
             fence, fp, token}: the four times integers (ms since the epoch,
            0 = none), the rest strings (fence a decimal uint64), token always '';
            or nil when the key is absent (never created, deleted, or expired)
  Errors    BADARG <what>    KEYS is not exactly 1 key of 1..2048 bytes:
                             checked first, before ARGV; nothing read or written
            BADARG <what>    an argument was given; nothing done
            CORRUPT <what>   the key holds something other than a record hash
  Writes    nothing
  Atomicity one HMGET (and an EXISTS when fields are missing) in one script
  Complexity O(1) (plus the size of the payload in the reply)
]]
-- <snippet:one_key>
-- Exactly one key of 1..2048 bytes (a prefix of at most 1024 bytes and an id
-- of 1..1024, as the Go stores check), refused before anything else is read.
if #KEYS ~= 1 or #KEYS[1] == 0 or #KEYS[1] > 2048 then
  return redis.error_reply('BADARG want exactly 1 key (KEYS) of 1..2048 bytes')
end
-- </snippet>
if #ARGV ~= 0 then
  return redis.error_reply('BADARG want no arguments')
end
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

local r, bad = load_record(key)
if bad then
  return bad
end
if not r then
  return false
end
-- Times as integers (exact: at most 15 digits): no string to allocate per
-- field on the reader's side.
return {r[1], r[2], tonumber(r[3]), tonumber(r[4]), tonumber(r[5]), tonumber(r[6]), r[7], r[8], ''}
