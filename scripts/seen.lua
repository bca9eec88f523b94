#!lua flags=no-writes
--[[ seen.lua — report whether a message id has been claimed.
  KEYS (n=1)
    [1] prefix..message_id   STRING  "1" (processed) or "~<token>" (in flight)
  ARGV (n=0)
  Returns   1 the id is claimed (processed or in flight); 0 it is not
  Errors    BADARG <what>    an argument was given; nothing done (any key type is
                             accepted: it reads or removes no field)
  Writes    nothing
  Atomicity one EXISTS
  Complexity O(1)
]]
if #ARGV ~= 0 then
  return redis.error_reply('BADARG want no arguments')
end
return redis.call('EXISTS', KEYS[1])
