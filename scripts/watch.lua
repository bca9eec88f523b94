#!lua
--[[ watch.lua — mark a pending idempotency record as watched, so the write that ends it publishes.
  KEYS (n=1)
    [1] prefix..key   STRING  a record in layout 1 (docs/non-go.md,
                              "Key layout per store"); a layout-0 HASH is
                              read too
  ARGV (n=0)
  Returns   1 the record is pending: its header's fourth byte is "w" (layout
              0: its field watch is "1"), and the next update.lua that gives it
              another status, or delete.lua fenced by its owner's token,
              SPUBLISHes to the shard channel KEYS[1] (the key itself, so it
              lives in the key's slot) and drops the mark. A waiter SSUBSCRIBEs
              to KEYS[1] first, then calls this, then waits for a message
              (re-reading the record after a bounded time in case one is
              missed: an expiry or an unfenced delete.lua publishes nothing)
            0 the key is absent or the record is not pending: nothing written;
              the caller reads the record again at once
  Errors    BADARG <what>    KEYS is not exactly 1 key of 1..2048 bytes:
                             checked first, before ARGV; nothing read or written
            BADARG <what>    before any write; nothing written (also for a
                             count of ARGV other than the header's)
            CORRUPT <what>   the key holds something other than a record;
                             nothing written
  Writes    SETRANGE of the header's fourth byte, in place (only when the
            record is pending and not yet marked); a layout-0 hash not yet
            marked is rewritten in layout 1 with the mark (SET KEEPTTL)
  Atomicity the check precedes the single write: a final write either ran
            before (this returns 0) or sees the mark (and publishes)
  Caller    flags=no-wait: the caller never waits for replicas after it (a
            waiter's mark, of no use on a replica)
  Complexity O(1)
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
-- <snippet:record_hash>
-- A record of layout 0, the nine-field hash written before layout 1 (status,
-- payload, created_ms, updated_ms, expires_ms, lease_ms, fence, fp, token,
-- and watch when watch.lua marked it), read in one HMGET into parse_record's
-- form; nil and CORRUPT for a key of
-- another type, a missing field or a malformed one (status not 1..64 bytes, fp
-- or token over 256; a time not decimal ms 0..2^53-1; a fence not a canonical
-- decimal of at most 19 digits).
-- Every write script rewrites such a record in layout 1.
local function load_hash(k)
  local r = redis.pcall('HMGET', k, 'status', 'payload', 'created_ms', 'updated_ms',
    'expires_ms', 'lease_ms', 'fence', 'fp', 'token', 'watch')
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
  r[10] = r[10] and true or nil
  return r
end
-- </snippet>
-- <snippet:load_record>
-- The record at k: its fields as parse_record answers them, and true when it
-- is a layout-0 hash (which a write rewrites in layout 1); nil when the key
-- is absent; nil and CORRUPT when it holds anything else.
local function load_record(k)
  local v = redis.pcall('GET', k)
  if not v then
    return nil
  elseif type(v) == 'table' then
    local r, bad = load_hash(k)
    return r, bad, true
  end
  return parse_record(v)
end
-- </snippet>

local r, bad, old = load_record(key)
if bad then
  return bad
end
if not r or r[1] ~= 'pending' then
  return 0
end
if r[10] then
  return 1 -- marked already
elseif old then
  r[10] = true
  redis.call('SET', key, record_value(r), 'KEEPTTL')
else
  -- The mark is the header's fourth byte: written in place.
  redis.call('SETRANGE', key, 3, 'w')
end
return 1
