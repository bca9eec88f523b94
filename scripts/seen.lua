#!lua flags=no-writes
--[[ seen.lua — report whether a message id has been claimed.
  KEYS (n=1)
    [1] prefix..message_id   STRING  "1" (processed) or "~<token>" (in flight)
  ARGV (n=0)
  Returns   1 the id is claimed (processed or in flight); 0 it is not
  Errors    BADARG <what>    KEYS is not exactly 1 key of 1..2048 bytes:
                             checked first, before ARGV; nothing read or written
            BADARG <what>    an argument was given; nothing done (any key type is
                             accepted: it reads or removes no field)
  Writes    nothing
  Atomicity one EXISTS
  Complexity O(1)
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
return redis.call('EXISTS', KEYS[1])
