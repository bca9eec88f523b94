#!lua
--[[ update.lua — change an idempotency record's status, payload, expiry or lease, fenced by the owner's token.
  KEYS (n=1)
    [1] prefix..key   STRING  a record (docs/non-go.md, "Key layout
                              per store")
  ARGV (n>=3)
    [1] token     '' = unfenced (anyone may update); else the owner token the
                  caller acquired with (1..256 bytes)
    [2..] pairs   field, value, ... : at least one pair, each field at most once,
                  from: status      1..64 bytes
                        payload     0..1048576 bytes (1 MiB), binary-safe
                        expires_in_ms  decimal ms from now (the server's TIME)
                                    until the record expires; 0 = never expire;
                                    negative ("-1") = already past: delete it
                        lease_in_ms    decimal ms from now (TIME) until the
                                    owner's lease passes; 0 = no lease; negative
                                    = a lease already passed (open to takeover)
                  (durations, as in acquire.lua, never absolute times: at most
                  15 digits after an optional "-"; the record stores the
                  deadlines expires_ms and lease_ms, ms since the epoch)
  Returns   1 the record is updated (updated_ms is now, TIME; a status other
              than "pending" clears the lease: lease_ms 0)
            0 expires_in_ms was negative: the record expired at once and the
              key is deleted
            (Only a status: the caller gave every value it wrote. Sending the
            record back with its payload cost a quarter of the script's server
            time, BENCHMARKS.md; read the record with get.lua.)
  Errors    BADARG <what>    KEYS is not exactly 1 key of 1..2048 bytes:
                             checked first, before ARGV; nothing read or written
            BADARG <what>        before any write; nothing written (also
                             for a count of ARGV other than the header's)
            NOT_FOUND <what>     the key is absent; nothing created
            STALE_OWNER <what>   token given and the record's token differs
                                 (another caller took the record over); nothing written
            CORRUPT <what>       the key holds something other than a record;
                                 nothing written
  Writes    one SET of the record:
            PXAT max(expires_ms, lease_ms) when expires_in_ms is given or the
            expiry rule moves the key, no expiry for expires_in_ms 0, else
            KEEPTTL; DEL instead when expires_in_ms is negative. A watched
            record (the header's mark, set by watch.lua) that stops being
            pending: the SET drops the mark, then SPUBLISH KEYS[1] the new
            status ("deleted" after the DEL), so its waiters read it again
  Expiry    the records' expiry rule (see renew.lua): the key lives until
            expires_ms, or until lease_ms while the record stays pending with
            a lease past it. A write that leaves no live lease (the final
            write: a status other than pending) puts the key back on
            expires_ms, the retention the caller asked for; when that ran out
            while the lease kept the record, the record gets it again from
            now: expires_ms = now + (expires_ms - created_ms)
  Atomicity every check precedes the first write
  Length    104 lines of code besides its snippets: four optional fields, each
            validated before the first write, two durations turned into
            deadlines on the server's clock, the expiry rule, and the waiters'
            notice; one script, so a fenced change is all or nothing
  Complexity O(1) (plus the size of the payload)
]]
-- <snippet:one_key>
-- Exactly one key of 1..2048 bytes (a prefix of at most 1024 bytes and an id
-- of 1..1024, as the Go stores check), refused before anything else is read.
if #KEYS ~= 1 or #KEYS[1] == 0 or #KEYS[1] > 2048 then
  return redis.error_reply('BADARG want exactly 1 key (KEYS) of 1..2048 bytes')
end
-- </snippet>
local token = ARGV[1]
local key = KEYS[1]

if #ARGV < 3 or #ARGV % 2 == 0 then
  return redis.error_reply('BADARG want token, then at least one field, value pair')
end

-- <snippet:int_arg>
-- A decimal integer argument (ms, or a count) of 1..15 digits, exact as a Lua
-- number, made canonical ("007" -> "7": Redis refuses "007" as a PX or
-- PEXPIRE argument, which would be an error after a write); nil if s is not one.
-- (A canonical s, what every client sends, is returned as is: one pattern
-- match instead of three calls; the server time it saves is measured in
-- BENCHMARKS.md, "What was changed, and what it bought".)
local function int_arg(s)
  if #s > 15 then
    return nil
  elseif s == '0' or string.find(s, '^[1-9]%d*$') then
    return s
  elseif not string.find(s, '^%d+$') then
    return nil
  end
  return string.format('%d', tonumber(s))
end
-- </snippet>
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

if #token > 256 then
  return redis.error_reply('BADARG token must be 0..256 bytes')
end
-- The fields given, nil when absent (locals: no table to build and collect).
local status, payload, expires, lease
for i = 2, #ARGV, 2 do
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
  elseif f == 'expires_in_ms' or f == 'lease_in_ms' then
    -- A duration from the server's TIME; a leading "-": already past.
    if not int_arg(string.byte(v, 1) == 45 and string.sub(v, 2) or v) then
      return redis.error_reply('BADARG ' .. f .. ' must be a decimal integer of ms (at most 15 digits, "-" = past)')
    end
    if f == 'expires_in_ms' then
      seen, expires = expires, v
    else
      seen, lease = lease, v
    end
  else
    return redis.error_reply('BADARG unknown field; want status, payload, expires_in_ms or lease_in_ms')
  end
  if seen then
    return redis.error_reply('BADARG field ' .. f .. ' given twice')
  end
end
local r, bad = load_record(key)
if bad then
  return bad
end
if not r then
  return redis.error_reply('NOT_FOUND no such record')
end
if token ~= '' and token ~= r[9] then
  return redis.error_reply('STALE_OWNER the record has another owner')
end

local now = now_ms()
-- What the key's expiry was under the expiry rule, before this write.
local was = r[5]
if r[1] == 'pending' then
  was = math.max(r[5], r[6])
end
-- Durations become deadlines on the server's clock: 0 = none; a deadline is
-- at least 1 (0 would read as "none").
local set_expires = expires ~= nil
if expires then
  local d = tonumber(expires)
  if d < 0 then
    redis.call('DEL', key)
    -- A watched record (watch.lua) tells its waiters it is gone (a pcall: a
    -- publish the caller may not make never fails the write before it).
    if r[10] then
      redis.pcall('SPUBLISH', key, 'deleted')
    end
    return 0
  end
  r[5] = d == 0 and 0 or now + d
end
if lease then
  local d = tonumber(lease)
  r[6] = d == 0 and 0 or math.max(now + d, 1)
end
r[1] = status or r[1]
r[2] = payload or r[2]
r[4] = now
if r[1] ~= 'pending' then
  r[6] = 0
end
-- A watched record (watch.lua) that stops being pending drops the mark and
-- tells its waiters, after the write (a pcall: a publish the caller may not
-- make never fails the write before it; the waiter's bounded re-read covers
-- it). An unwatched record, the common case, pays for one test.
local notify = r[10] and r[1] ~= 'pending'
if notify then
  r[10] = nil
end
-- The expiry rule: the key lives until max(expires_ms, a pending lease_ms);
-- a retention that ran out under a lease starts again once no lease holds.
local ttl = 'KEEPTTL'
if r[5] == 0 then
  if set_expires then
    ttl = nil
  end
else
  if r[5] <= now and r[6] <= now then
    r[5] = now + math.max(r[5] - r[3], 1)
  end
  local at = math.max(r[5], r[6])
  if set_expires or at ~= was then
    ttl = at
  end
end
if ttl == 'KEEPTTL' then
  redis.call('SET', key, record_value(r), 'KEEPTTL')
elseif ttl then
  redis.call('SET', key, record_value(r), 'PXAT', ttl)
else
  redis.call('SET', key, record_value(r))
end
if notify then
  redis.pcall('SPUBLISH', key, r[1])
end
return 1
