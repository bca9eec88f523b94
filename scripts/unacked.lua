#!lua flags=no-writes
--[[ unacked.lua — read a connection's unacknowledged tail, for replay.
  KEYS (n=1)
    [1] prefix..conn_id   HASH  _seq, _gen, _epoch, _rid, <msg_id> -> "<seq>:<payload>"
  ARGV (n=0)
  Returns   {epoch, generation, id1, value1, id2, value2, ...}: epoch an integer
            (as in append.lua's reply; exact, below 2^53), the rest strings
            (generation a decimal uint64), the
            pairs in no particular order, each value "<seq>:<payload>" (split at
            the first ":"; sort by seq to replay); the reserved fields are never
            among the pairs. An empty array when the connection does not exist.
            Values, and fields the scripts never write (starting with "_"),
            are passed through unchecked: a reader must reject a value that is
            not "<seq>:<payload>" and an id starting with "_" (the Go store
            does: ErrUnexpectedReply)
  Errors    BADARG <what>    KEYS is not exactly 1 key of 1..2048 bytes:
                             checked first, before ARGV; nothing read or written
            BADARG <what>    an argument was given
            CORRUPT <what>   the key is not a well-formed outbox hash (another type,
                             or _seq, _gen, _epoch missing or not canonical
                             decimals, as append.lua defines)
  Writes    nothing
  Atomicity one HGETALL
  Complexity O(messages in the tail)
]]
-- <snippet:one_key>
-- Exactly one key of 1..2048 bytes (a prefix of at most 1024 bytes and an id
-- of 1..1024, as the Go stores check), refused before anything else is read.
if #KEYS ~= 1 or #KEYS[1] == 0 or #KEYS[1] > 2048 then
  return redis.error_reply('BADARG want exactly 1 key (KEYS) of 1..2048 bytes')
end
-- </snippet>
-- The reply is HGETALL's own table, rearranged in place: a tail costs about
-- what a bare `return redis.call('HGETALL', KEYS[1])` costs in server time,
-- where a new table, a C call or a pattern check per field would cost more
-- (BENCHMARKS.md, "What was changed, and what it bought").
if #ARGV ~= 0 then
  return redis.error_reply('BADARG want no arguments')
end
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
-- (pcall: a key of another type answers CORRUPT, not Redis's WRONGTYPE.)
local all = redis.pcall('HGETALL', KEYS[1])
if all.err then
  return redis.error_reply('CORRUPT the key holds something other than an outbox hash')
end
local n = #all
if n == 0 then
  return all
end
local seq, epoch, gen
-- Move the reserved pairs to the end: the message pairs end up in 1..last.
-- (In place, no second table: copying the messages into a new reply table
-- costs more server time, BENCHMARKS.md, "What was changed, and what it bought".)
-- (Comparing interned strings is a VM instruction: no C call per field.)
local i, last = 1, n
while i < last do
  local f = all[i]
  if f == '_epoch' or f == '_gen' or f == '_seq' or f == '_rid' then
    if f == '_epoch' then
      epoch = all[i + 1]
    elseif f == '_gen' then
      gen = all[i + 1]
    elseif f == '_seq' then
      seq = all[i + 1]
    end
    all[i], all[i + 1], all[last - 1], all[last] = all[last - 1], all[last], f, all[i + 1]
    last = last - 2
  else
    i = i + 2
  end
end
if not outbox_ok(seq, gen, epoch) then
  return redis.error_reply('CORRUPT reserved fields _seq, _gen, _epoch missing or not canonical decimals')
end
-- {epoch, generation, pairs 2..m, pair 1}: the first pair moves behind the
-- others, into the reserved slots, and the rest of those is cut off.
all[last + 1], all[last + 2] = all[1], all[2]
all[1], all[2] = tonumber(epoch), gen
for j = last + 3, n do
  all[j] = nil
end
return all
