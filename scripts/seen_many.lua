#!lua flags=no-writes
--[[ seen_many.lua — report which of many message ids of one hash slot are claimed.
  KEYS (n=1..500)
    [1..] prefix..message_id   STRING  "1" (processed) or "~<token>" (in flight);
                               every key in ONE hash slot (see claim_many.lua);
                               Redis refuses keys of several slots with CROSSSLOT
                               before the script runs
  ARGV (n=0)
  Returns   an array with one integer per key, in KEYS order: 1 claimed
            (processed or in flight); 0 not
  Errors    BADARG <what>    KEYS is not 1..500 keys, each of 1..2048 bytes:
                             checked first, before ARGV; nothing read or written
            BADARG <what>   for any ARGV (the script takes none); nothing read
  Writes    nothing
  Atomicity one EXISTS per key in one script call: a consistent snapshot of the group
  Complexity O(number of keys)
]]
-- <snippet:batch_keys>
-- 1..500 keys, each of 1..2048 bytes (a prefix of at most 1024 bytes and an
-- id of 1..1024, as the Go stores check), refused before anything else is read.
if #KEYS == 0 or #KEYS > 500 then
  return redis.error_reply('BADARG want 1..500 keys (KEYS), each of 1..2048 bytes')
end
for i = 1, #KEYS do
  if #KEYS[i] == 0 or #KEYS[i] > 2048 then
    return redis.error_reply('BADARG want 1..500 keys (KEYS), each of 1..2048 bytes')
  end
end
-- </snippet>
if #ARGV ~= 0 then
  return redis.error_reply('BADARG want no arguments')
end
local out = {}
for i = 1, #KEYS do
  out[i] = redis.call('EXISTS', KEYS[i])
end
return out
