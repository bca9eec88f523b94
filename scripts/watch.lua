#!lua
--[[ watch.lua — mark a pending idempotency record as watched, so the write that ends it publishes.
  KEYS (n=1)
    [1] prefix..key   STRING  a record (docs/non-go.md, "Key layout
                              per store")
  ARGV (n=0)
  Returns   1 the record is pending: its header's fourth byte is "w", and
              the next update.lua that gives it another status, or delete.lua fenced by its owner's token,
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
            record is pending and not yet marked)
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
if not r or r[1] ~= 'pending' then
  return 0
end
if r[10] then
  return 1 -- marked already
end
-- The mark is the header's fourth byte: written in place.
redis.call('SETRANGE', key, 3, 'w')
return 1
