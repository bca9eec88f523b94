#!lua
--[[ advance.lua — raise a connection's ack-generation floor without acking.
  KEYS (n=1)
    [1] prefix..conn_id   HASH  _seq, _gen, _epoch, _rid, <msg_id> -> "<seq>:<payload>"
  ARGV (n=2)
    [1] generation   decimal uint64 (0..18446744073709551615, no sign, no leading
                     zeros), the new owner's generation
    [2] ttl_ms       decimal integer ms the hash lives after a raise; 0 = leave the
                     expiry as it is (a new hash then never expires)
                     (1..15 digits, no sign: "-1" is BADARG)
  Returns   1 the floor was raised to generation (and the TTL re-armed); on a
              connection that does not exist, a new incarnation is created with
              no messages (_seq "0", _gen generation, _epoch now, _rid the
              server's replication ID, as append.lua writes them), so the floor
              holds for the appends and acks that follow, until drop.lua or expiry
            0 generation is not above the floor (0 on an absent connection:
              nothing is created)
  Errors    BADARG <what>    KEYS is not exactly 1 key of 1..2048 bytes:
                             checked first, before ARGV; nothing read or written
            BADARG <what>    before any write; nothing written (also
                             for a count of ARGV other than the header's)
            CORRUPT <what>   the key is not a well-formed outbox hash (another type,
                             or _seq, _gen, _epoch missing or not canonical
                             decimals, as append.lua defines); nothing written
  Writes    HSET _gen generation and PEXPIRE ttl_ms (only when raised); on an
            absent connection HSET _seq "0" _gen generation _epoch <now> _rid <replid>
  Memory    no allow-oom: on an absent connection it creates a hash (4 small
            fields), so when maxmemory is reached under noeviction Redis refuses
            it up front (OOM, nothing written) and the caller retries the takeover
  Atomicity every check precedes the first write
  Complexity O(1)
]]
-- <snippet:one_key>
-- Exactly one key of 1..2048 bytes (a prefix of at most 1024 bytes and an id
-- of 1..1024, as the Go stores check), refused before anything else is read.
if #KEYS ~= 1 or #KEYS[1] == 0 or #KEYS[1] > 2048 then
  return redis.error_reply('BADARG want exactly 1 key (KEYS) of 1..2048 bytes')
end
-- </snippet>
local key = KEYS[1]
if #ARGV ~= 2 then
  return redis.error_reply('BADARG want 2 arguments: generation, ttl_ms')
end
local gen, ttl = ARGV[1], ARGV[2]

-- <snippet:u64>
-- uint64 as canonical decimal strings: valid, and ordered by length then bytes
-- (Lua numbers lose precision above 2^53).
local function u64(s)
  return type(s) == 'string' and #s >= 1 and #s <= 20 and string.find(s, '^%d+$') ~= nil
    and (#s == 1 or string.byte(s, 1) ~= 48)
end
local function cmp(a, b)
  if #a ~= #b then
    return #a < #b and -1 or 1
  end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y and -1 or 1
    end
  end
  return 0
end
local MAX = '18446744073709551615'
-- </snippet>
-- <snippet:outbox_hash>
-- A well-formed outbox hash: _seq a canonical decimal 0..2^53-1, _gen a
-- canonical decimal uint64, _epoch a canonical decimal 1..2^53-1 (microseconds).
-- Integers up to 2^53-1 are exact as Lua numbers.
local EXACT = 9007199254740991
local function outbox_ok(s, g, e)
  return u64(s) and #s <= 16 and tonumber(s) <= EXACT
    and u64(g) and cmp(g, MAX) <= 0
    and u64(e) and e ~= '0' and #e <= 16 and tonumber(e) <= EXACT
end
-- </snippet>
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
-- <snippet:now_us>
-- Now in microseconds since the epoch, from the server's clock, as a decimal
-- string: the _epoch of a new outbox incarnation.
local function now_us()
  local t = redis.call('TIME')
  return t[1] .. string.format('%06d', tonumber(t[2]))
end
-- </snippet>
-- <snippet:replid>
-- The replication ID of the history this server is on (INFO replication
-- master_replid, 40 hex characters), stored as _rid with an outbox epoch: a
-- promoted replica, or a restarted primary, has a new one. INFO is allowed in
-- scripts and costs about 4 us of server time; a plain find, because
-- string.match over INFO's text costs 2 us more.
local function replid()
  local info = redis.call('INFO', 'replication')
  local at = string.find(info, 'master_replid:', 1, true)
  return at and string.sub(info, at + 14, at + 53) or ''
end
-- </snippet>

if not u64(gen) or cmp(gen, MAX) > 0 then
  return redis.error_reply('BADARG generation must be a decimal uint64 without leading zeros')
end
ttl = int_arg(ttl)
if not ttl then
  return redis.error_reply('BADARG ttl_ms must be a decimal integer >= 0')
end

-- (pcall: a key of another type answers CORRUPT, not Redis's WRONGTYPE.)
local r = redis.pcall('HMGET', key, '_seq', '_gen', '_epoch')
if r.err then
  return redis.error_reply('CORRUPT the key holds something other than an outbox hash')
end
local absent = not (r[1] or r[2] or r[3])
if absent then
  if redis.call('EXISTS', key) == 1 then
    return redis.error_reply('CORRUPT reserved fields _seq, _gen, _epoch missing')
  end
  if gen == '0' then
    return 0
  end
elseif not outbox_ok(r[1], r[2], r[3]) then
  return redis.error_reply('CORRUPT reserved fields _seq, _gen, _epoch missing or not canonical decimals')
elseif cmp(gen, r[2]) <= 0 then
  return 0
end

if absent then
  -- A new incarnation that holds only the fence: a raised floor is never lost
  -- to a connection that has no hash yet.
  -- With the server's replication ID, as append.lua stores it with an epoch:
  -- the first append keeps this epoch.
  redis.call('HSET', key, '_seq', '0', '_gen', gen, '_epoch', now_us(), '_rid', replid())
else
  redis.call('HSET', key, '_gen', gen)
end
if ttl ~= '0' then
  redis.call('PEXPIRE', key, ttl)
end
return 1
