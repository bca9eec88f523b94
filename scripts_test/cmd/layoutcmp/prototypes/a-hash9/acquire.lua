#!lua
--[[ acquire.lua — acquire an idempotency record: create it, take over a pending one whose lease passed, or report it.
  KEYS (n=1)
    [1] prefix..key   HASH  status, payload, created_ms, updated_ms, expires_ms,
                            lease_ms, fence, fp, token
  ARGV (n=4)
    [1] ttl_ms        decimal integer ms a new record lives, 0 = no expiry
    [2] token         the caller's owner token, 1..256 bytes
    [3] fingerprint   the request's fingerprint, 0..256 bytes ('' = none)
    [4] lease_ms      decimal integer ms the caller's lease lasts, 0 = no lease
  Returns   {acquired, status, payload, created_ms, updated_ms, expires_ms,
             lease_ms, fence, fp, token}: 10 elements, acquired and the four
            times integers (ms since the epoch from TIME, 0 = none), the rest
            strings (fence a decimal uint64)
            acquired 1: a new record (pending, fence "1"), or a pending record
               whose lease passed, taken over (new token, fence + 1, new lease,
               created_ms and expires_ms kept); token is the caller's. A
               record at fence 9999999999999999999, the largest, is not taken
               over (acquired 0)
            acquired 0: the existing record, unchanged; token is '' (an owner's
               token is never shown to a non-owner). A pending record with
               lease_ms 0 has no lease and is never taken over
  Errors    BADARG <what>     before any write; nothing written (also
                             for a count of ARGV other than the header's)
            MISMATCH <what>   the caller's and the record's fingerprints are both
                              non-empty and differ; nothing written
            CORRUPT <what>    the key holds something other than a record hash;
                              nothing written
  Writes    new record: HSET of all 9 fields; PEXPIREAT expires_ms when ttl_ms > 0
            takeover: HSET token, lease_ms, updated_ms, fence, fp (the record's
            first non-empty fingerprint sticks)
  Atomicity every check precedes the first write
  Length    72 lines of code besides its snippets: creating, taking over (fence + 1
            on a decimal string, exact past 2^53) and reporting a record must be
            one step, or two callers could both take a lease over
  Complexity O(1) (plus the size of the payload in the reply)
]]
if #ARGV ~= 4 then
  return redis.error_reply('BADARG want 4 arguments: ttl_ms, token, fingerprint, lease_ms')
end
local token, fp = ARGV[2], ARGV[3]
local key = KEYS[1]

-- <snippet:int_arg>
-- A decimal integer argument (ms, or a count) of 1..15 digits, exact as a Lua
-- number, made canonical ("007" -> "7": Redis refuses "007" as a PX or
-- PEXPIRE argument, which would be an error after a write); nil if s is not one.
-- (A canonical s, what every client sends, is returned as is: one pattern
-- match instead of three calls. Measured with bin/benchcmp -server-time-only:
-- claim.lua 1.43x -> 1.26x the minimal script's server time, 12% less.)
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
-- <snippet:record_hash>
-- A record's nine fields in reply order, read in one HMGET; nil when the key
-- is absent; an error reply (CORRUPT) for a key of another type, a missing
-- field or a malformed one. Well-formed: status not empty; the four times
-- decimal ms 0..2^53-1 (at most 16 digits: a 15-digit duration added to now
-- fits); the fence a canonical decimal 1..9999999999999999999 (no leading
-- zero, at most 19 digits, so it never leaves uint64; a record at the largest
-- fence is never taken over).
local function load_record(k)
  local r = redis.pcall('HMGET', k, 'status', 'payload', 'created_ms', 'updated_ms',
    'expires_ms', 'lease_ms', 'fence', 'fp', 'token')
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

local ttl, lease = int_arg(ARGV[1]), int_arg(ARGV[4])
if not ttl then
  return redis.error_reply('BADARG ttl_ms must be a decimal integer >= 0')
end
if #token < 1 or #token > 256 then
  return redis.error_reply('BADARG token must be 1..256 bytes')
end
if #fp > 256 then
  return redis.error_reply('BADARG fingerprint must be 0..256 bytes')
end
if not lease then
  return redis.error_reply('BADARG lease_ms must be a decimal integer >= 0')
end

-- (EXISTS first: an absent key, acquire's common case, then costs one
-- command instead of load_record's two. Measured with bin/benchcmp
-- -server-time-only: 1.20x -> 0.97x the minimal script's server time, 19% less.)
local r, bad
if redis.call('EXISTS', key) == 1 then
  r, bad = load_record(key)
  if bad then
    return bad
  end
end
if r then
  if fp ~= '' and r[8] ~= '' and fp ~= r[8] then
    return redis.error_reply('MISMATCH the key was acquired with a different fingerprint')
  end
  -- A record that can never be taken over is answered without reading the
  -- clock (the duplicate of a finished job, the common case; one call fewer:
  -- 28.4 vs 24.7 µs of server CPU per call, median of 7 interleaved rounds).
  if r[1] ~= 'pending' or tonumber(r[6]) == 0 or r[7] == '9999999999999999999' then
    return {0, r[1], r[2], tonumber(r[3]), tonumber(r[4]), tonumber(r[5]), tonumber(r[6]), r[7], r[8], ''}
  end
end
local now = now_ms()
local now_s = string.format('%d', now)
if r and tonumber(r[6]) > now then
  -- A pending record whose lease still runs.
  return {0, r[1], r[2], tonumber(r[3]), tonumber(r[4]), tonumber(r[5]), tonumber(r[6]), r[7], r[8], ''}
end

local lease_until = '0'
if lease ~= '0' then
  lease_until = string.format('%d', now + tonumber(lease))
end

if r then
  -- Take over: fence + 1 on the decimal string, exact past 2^53.
  local fence, i = r[7], #r[7]
  while i > 0 and string.byte(fence, i) == 57 do
    i = i - 1
  end
  if i == 0 then
    fence = '1' .. string.rep('0', #fence)
  else
    fence = string.sub(fence, 1, i - 1) .. string.char(string.byte(fence, i) + 1)
      .. string.rep('0', #fence - i)
  end
  local newfp = r[8]
  if newfp == '' then
    newfp = fp
  end
  redis.call('HSET', key, 'token', token, 'lease_ms', lease_until,
    'updated_ms', now_s, 'fence', fence, 'fp', newfp)
  return {1, r[1], r[2], tonumber(r[3]), now, tonumber(r[5]), tonumber(lease_until), fence, newfp, token}
end

local expires = '0'
if ttl ~= '0' then
  expires = string.format('%d', now + tonumber(ttl))
end
redis.call('HSET', key, 'status', 'pending', 'payload', '', 'created_ms', now_s,
  'updated_ms', now_s, 'expires_ms', expires, 'lease_ms', lease_until,
  'fence', '1', 'fp', fp, 'token', token)
if expires ~= '0' then
  redis.call('PEXPIREAT', key, expires)
end
-- Times go back as integers (exact below 2^53): the reader allocates no
-- string for them.
return {1, 'pending', '', now, now, tonumber(expires), tonumber(lease_until), '1', fp, token}
