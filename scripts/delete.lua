#!lua flags=allow-oom
--[[ delete.lua — delete an idempotency record, unconditionally or only for its owner.
  KEYS (n=1)
    [1] prefix..key   STRING  a record (docs/non-go.md, "Key layout
                              per store")
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
                                 record (as acquire.lua defines it); nothing written
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
