#!lua flags=no-writes
--[[ unacked.lua — read a connection's unacknowledged tail, for replay.
  KEYS (n=1)
    [1] prefix..conn_id   HASH  _seq, _gen, _epoch, <msg_id> -> "<seq>:<payload>"
  ARGV (n=0)
  Returns   {epoch, generation, id1, value1, id2, value2, ...} (all strings), the
            pairs in hash order, each value "<seq>:<payload>" (split at the first
            ":"; sort by seq to replay); the reserved fields are never among the
            pairs. An empty array when the connection does not exist.
  Errors    CORRUPT <what>   a reserved field is missing or a value is not
                             "<seq>:<payload>"
  Writes    nothing
  Atomicity one HGETALL
  Complexity O(messages in the tail)
]]
local all = redis.call('HGETALL', KEYS[1])
if #all == 0 then
  return {}
end
local out = {'', ''}
local epoch, gen
for i = 1, #all, 2 do
  local f, v = all[i], all[i + 1]
  if string.byte(f, 1) == 95 then
    if f == '_epoch' then
      epoch = v
    elseif f == '_gen' then
      gen = v
    end
  elseif not string.find(v, '^%d+:') then
    return redis.error_reply('CORRUPT value of a msg_id is not "<seq>:<payload>"')
  else
    out[#out + 1] = f
    out[#out + 1] = v
  end
end
if not (epoch and string.match(epoch, '^[1-9]%d*$') and gen and string.match(gen, '^%d+$')) then
  return redis.error_reply('CORRUPT reserved fields _epoch, _gen missing or not decimal')
end
out[1], out[2] = epoch, gen
return out
