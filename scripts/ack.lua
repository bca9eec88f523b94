#!lua flags=allow-oom
--[[ ack.lua — acknowledge messages of one connection, fenced by generation.
  KEYS (n=1)
    [1] prefix..conn_id   HASH  _seq, _gen, _epoch, _rid, <msg_id> -> "<seq>:<payload>"
  ARGV (n>=2)
    [1] generation   decimal uint64 (0..18446744073709551615, no sign, no leading
                     zeros), the caller's ownership generation
    [2..] msg_id     ids to remove, each 1..256 bytes, not starting with "_"
  Returns   number of messages removed (ids not in the tail count 0; 0 when the
            connection does not exist, and no key is created). A floor raised by
            advance.lua holds even on a connection with no messages yet: advance
            creates the hash. An ack carries no epoch: message ids minted at random
            never repeat across incarnations; a caller who reuses its own ids after
            DropConn must not let an old owner's acks reach the new incarnation
  Errors    BADARG <what>    KEYS is not exactly 1 key of 1..2048 bytes:
                             checked first, before ARGV; nothing read or written
            BADARG <what>        before any write; nothing written (also
                             for a count of ARGV other than the header's)
            STALE_OWNER <what>   generation below the stored floor _gen; nothing written
            CORRUPT <what>       the key is not a well-formed outbox hash (another type,
                                 or _seq, _gen, _epoch missing or not canonical
                                 decimals, as append.lua defines); nothing written
  Writes    HSET _gen generation (only when above the floor); HDEL msg ids.
            The reserved fields stay: without a TTL a drained connection keeps
            its 4 small fields until drop.lua
  Atomicity every check precedes the first write
  Memory    flags=allow-oom: it removes messages (its one other write, HSET, overwrites the
            existing _gen field with at most 20 bytes), so a gateway can drain its
            tails when maxmemory is reached under noeviction
  Complexity O(number of ids)
]]
-- <snippet:one_key>
-- Exactly one key of 1..2048 bytes (a prefix of at most 1024 bytes and an id
-- of 1..1024, as the Go stores check), refused before anything else is read.
if #KEYS ~= 1 or #KEYS[1] == 0 or #KEYS[1] > 2048 then
  return redis.error_reply('BADARG want exactly 1 key (KEYS) of 1..2048 bytes')
end
-- </snippet>
local key = KEYS[1]
local gen = ARGV[1]

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

if not u64(gen) or cmp(gen, MAX) > 0 then
  return redis.error_reply('BADARG generation must be a decimal uint64 without leading zeros')
end
if #ARGV < 2 then
  return redis.error_reply('BADARG at least one msg_id is needed')
end
for i = 2, #ARGV do
  local id = ARGV[i]
  if #id < 1 or #id > 256 or string.byte(id, 1) == 95 then
    return redis.error_reply('BADARG msg_id must be 1..256 bytes and not start with "_"')
  end
end

-- (pcall: a key of another type answers CORRUPT, not Redis's WRONGTYPE.)
local r = redis.pcall('HMGET', key, '_seq', '_gen', '_epoch')
if r.err then
  return redis.error_reply('CORRUPT the key holds something other than an outbox hash')
end
if not (r[1] or r[2] or r[3]) then
  if redis.call('EXISTS', key) == 0 then
    return 0
  end
  return redis.error_reply('CORRUPT reserved fields _seq, _gen, _epoch missing')
end
if not outbox_ok(r[1], r[2], r[3]) then
  return redis.error_reply('CORRUPT reserved fields _seq, _gen, _epoch missing or not canonical decimals')
end
local floor = r[2]
local order = cmp(gen, floor)
if order < 0 then
  return redis.error_reply('STALE_OWNER generation ' .. gen .. ' is below the floor ' .. floor)
end

if order > 0 then
  redis.call('HSET', key, '_gen', gen)
end
local n = #ARGV
if n == 2 then
  return redis.call('HDEL', key, ARGV[2])
end
-- HDEL in chunks: unpack of a long ARGV would overflow Lua's C stack.
local removed = 0
for i = 2, n, 1000 do
  removed = removed + redis.call('HDEL', key, unpack(ARGV, i, math.min(i + 999, n)))
end
return removed
