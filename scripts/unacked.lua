#!lua flags=no-writes
--[[ unacked.lua — read a connection's unacknowledged tail, for replay.
  KEYS (n=1)
    [1] prefix..conn_id   HASH  _seq, _gen, _epoch, _rid, <msg_id> -> "<seq>:<payload>"
  ARGV (n=0)
  Returns   {epoch, generation, id1, value1, id2, value2, ...} (all strings), the
            pairs in no particular order, each value "<seq>:<payload>" (split at
            the first ":"; sort by seq to replay); the reserved fields are never
            among the pairs. An empty array when the connection does not exist.
            Values, and fields the scripts never write (starting with "_"),
            are passed through unchecked: a reader must reject a value that is
            not "<seq>:<payload>" and an id starting with "_" (the Go store
            does: ErrUnexpectedReply)
  Errors    CORRUPT <what>   _epoch or _gen missing or not decimal
  Writes    nothing
  Atomicity one HGETALL
  Complexity O(messages in the tail)
]]
-- The reply is HGETALL's own table, rearranged in place: a tail of 1000
-- messages costs about 1.02-1.05x a bare `return redis.call('HGETALL',
-- KEYS[1])` in server time (a new table, a C call or a pattern check per
-- field costs 1.1-1.3x).
local all = redis.call('HGETALL', KEYS[1])
local n = #all
if n == 0 then
  return all
end
local epoch, gen
-- Move the reserved pairs to the end: the message pairs end up in 1..last.
-- (Comparing interned strings is a VM instruction: no C call per field.)
local i, last = 1, n
while i < last do
  local f = all[i]
  if f == '_epoch' or f == '_gen' or f == '_seq' or f == '_rid' then
    if f == '_epoch' then
      epoch = all[i + 1]
    elseif f == '_gen' then
      gen = all[i + 1]
    end
    all[i], all[i + 1], all[last - 1], all[last] = all[last - 1], all[last], f, all[i + 1]
    last = last - 2
  else
    i = i + 2
  end
end
if not (epoch and string.find(epoch, '^[1-9]%d*$') and gen and string.find(gen, '^%d+$')) then
  return redis.error_reply('CORRUPT reserved fields _epoch, _gen missing or not decimal')
end
-- {epoch, generation, pairs 2..m, pair 1}: the first pair moves behind the
-- others, into the reserved slots, and the rest of those is cut off.
all[last + 1], all[last + 2] = all[1], all[2]
all[1], all[2] = epoch, gen
for j = last + 3, n do
  all[j] = nil
end
return all
