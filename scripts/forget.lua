#!lua flags=allow-oom
--[[ forget.lua — remove a claim so the message id can be claimed again.
  KEYS (n=1)
    [1] prefix..message_id   STRING  "1" (processed) or "~<token>" (in flight)
  ARGV (n=0)
  Returns   1 removed; 0 absent
  Errors    BADARG <what>    an argument was given; nothing done (any key type is
                             accepted: it reads or removes no field)
  Writes    DEL KEYS[1]
  Atomicity one DEL
  Memory    flags=allow-oom: it only deletes, so it runs (and frees memory) when
            maxmemory is reached under noeviction
  Complexity O(1)
]]
if #ARGV ~= 0 then
  return redis.error_reply('BADARG want no arguments')
end
return redis.call('DEL', KEYS[1])
