#!lua
--[[ advance.lua — raise a connection's ack-generation floor without acking.
  KEYS (n=1)
    [1] prefix..conn_id   HASH  _seq, _gen, _epoch, _rid, <msg_id> -> "<seq>:<payload>"
  ARGV (n=2)
    [1] generation   decimal uint64 (0..18446744073709551615, no sign, no leading
                     zeros), the new owner's generation
    [2] ttl_ms       decimal integer ms the hash lives after a raise; 0 = leave the
                     expiry as it is
  Returns   1 the floor was raised to generation (and the TTL re-armed)
            0 generation is not above the floor, or the connection does not exist
              (no key is created)
  Errors    BADARG <what>    before any write; nothing written
            CORRUPT <what>   _gen missing or not a decimal uint64; nothing written
  Writes    HSET _gen generation and PEXPIRE ttl_ms (only when raised)
  Atomicity every check precedes the first write
  Complexity O(1)
]]
local key = KEYS[1]
local gen, ttl = ARGV[1], ARGV[2]

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

if not u64(gen) or cmp(gen, MAX) > 0 then
  return redis.error_reply('BADARG generation must be a decimal uint64 without leading zeros')
end
if type(ttl) ~= 'string' or not string.find(ttl, '^%d+$') or #ttl > 15 then
  return redis.error_reply('BADARG ttl_ms must be a decimal integer >= 0')
end
-- Redis refuses "007" as a PX/PEXPIRE argument (an error after a write): read it as 7.
ttl = string.format('%d', tonumber(ttl))

local floor = redis.call('HGET', key, '_gen')
if not floor then
  if redis.call('EXISTS', key) == 0 then
    return 0
  end
  return redis.error_reply('CORRUPT reserved field _gen is missing')
end
if not u64(floor) or cmp(floor, MAX) > 0 then
  return redis.error_reply('CORRUPT reserved field _gen is not a decimal uint64')
end
if cmp(gen, floor) <= 0 then
  return 0
end

redis.call('HSET', key, '_gen', gen)
if tonumber(ttl) > 0 then
  redis.call('PEXPIRE', key, ttl)
end
return 1
