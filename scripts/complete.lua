#!lua flags=allow-oom
--[[ complete.lua — end a pending idempotency record with a small final outcome, fenced by the owner's token, even when memory is full.
  KEYS (n=1)
    [1] prefix..key   STRING  a record (docs/non-go.md, "Key layout
                              per store")
  ARGV (n=3)
    [1] token     the owner token the caller acquired with (1..256 bytes)
    [2] status    the final status, 1..64 bytes, not "pending"
    [3] payload   0..1024 bytes, binary-safe: a small result, or a note of
                  why the result is not stored
  Returns   1 the record holds status and payload, its lease cleared
              (lease_ms 0) and updated_ms now (TIME)
  Errors    BADARG <what>    KEYS is not exactly 1 key of 1..2048 bytes:
                             checked first, before ARGV; nothing read or written
            BADARG <what>        before any write; nothing written
            NOT_FOUND <what>     the key is absent; nothing created
            STALE_OWNER <what>   the record's token is not token (another
                                 caller took it over); nothing written
            CORRUPT <what>       the key holds something other than a
                                 record; nothing written
  Writes    one SET of the record, PXAT its expiry (expires_ms,
            given the retention again from now when it ran out under the
            lease, as update.lua does), KEEPTTL when it has none; a watched
            record drops its mark and SPUBLISH KEYS[1] the new status
  Expiry    update.lua's rule for a final write: the key goes back on
            expires_ms
  Atomicity every check precedes the first write
  Memory    flags=allow-oom: the final write of an effect that happened
            must not be refused when maxmemory is reached under noeviction,
            or its key would run again once the lease passed. The SET grows
            the record by at most its payload and status (1024 + 64 bytes),
            once per acquired record (acquire.lua is refused when memory is
            full, so no new record joins meanwhile); larger results go
            through update.lua, which Redis refuses up front then
  Complexity O(1)
]]
-- <snippet:one_key>
-- Exactly one key of 1..2048 bytes (a prefix of at most 1024 bytes and an id
-- of 1..1024, as the Go stores check), refused before anything else is read.
if #KEYS ~= 1 or #KEYS[1] == 0 or #KEYS[1] > 2048 then
  return redis.error_reply('BADARG want exactly 1 key (KEYS) of 1..2048 bytes')
end
-- </snippet>
if #ARGV ~= 3 then
  return redis.error_reply('BADARG want 3 arguments: token, status, payload')
end
local token, status, payload = ARGV[1], ARGV[2], ARGV[3]
local key = KEYS[1]
if #token < 1 or #token > 256 then
  return redis.error_reply('BADARG token must be 1..256 bytes')
end
if #status < 1 or #status > 64 or status == 'pending' then
  return redis.error_reply('BADARG status must be 1..64 bytes, not pending')
end
if #payload > 1024 then
  return redis.error_reply('BADARG payload must be at most 1024 bytes')
end

-- <snippet:now_ms>
-- Now in ms since the epoch, from the server's clock: the one that expires keys.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- </snippet>
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
-- <snippet:record_value>
-- A record in parse_record's form as its layout-1 string.
local function record_value(r)
  return struct.pack('>c4ddddBc0Bc0Hc0Hc0', r[10] and 'ro1w' or 'ro1 ', r[3], r[4], r[5], r[6], #r[7], r[7],
    #r[1], r[1], #r[8], r[8], #r[9], r[9]) .. r[2]
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

local r, bad = load_record(key)
if bad then
  return bad
end
if not r then
  return redis.error_reply('NOT_FOUND no such record')
end
if token ~= r[9] then
  return redis.error_reply('STALE_OWNER the record has another owner')
end

local now = now_ms()
r[1], r[2], r[4], r[6] = status, payload, now, 0
-- A watched record (watch.lua) drops the mark and tells its waiters after
-- the write (a pcall: a publish the caller may not make never fails it).
local notify = r[10]
r[10] = nil
-- The expiry rule: the key goes back on expires_ms; a retention that ran
-- out under the lease starts again from now.
if r[5] == 0 then
  redis.call('SET', key, record_value(r), 'KEEPTTL')
else
  if r[5] <= now then
    r[5] = now + math.max(r[5] - r[3], 1)
  end
  redis.call('SET', key, record_value(r), 'PXAT', r[5])
end
if notify then
  redis.pcall('SPUBLISH', key, status)
end
return 1
