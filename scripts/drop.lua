#!lua flags=allow-oom
--[[ drop.lua — forget a connection: its tail, sequence, floor and epoch.
  KEYS (n=1)
    [1] prefix..conn_id   HASH  _seq, _gen, _epoch, _rid, <msg_id> -> "<seq>:<payload>"
  ARGV (n=0)
  Returns   1 the connection existed and is removed; 0 it did not exist
  Errors    BADARG <what>    KEYS is not exactly 1 key of 1..2048 bytes:
                             checked first, before ARGV; nothing read or written
            BADARG <what>    an argument was given; nothing done (any key type is
                             accepted: it reads or removes no field)
  Writes    DEL KEYS[1]; the next append.lua starts a new incarnation (seq 1,
            a new epoch, floor 0)
  Atomicity one DEL
  Memory    flags=allow-oom: it only deletes, so it runs (and frees memory) when
            maxmemory is reached under noeviction
  Complexity O(messages in the tail)
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
return redis.call('DEL', KEYS[1])
