#!lua flags=allow-oom
--[[ release_many.lua — give up many leases of one hash slot: release.lua for each, in order.
  KEYS (n=1..500)
    [1..] prefix..message_id   STRING  "1" (processed) or "~<token>" (in flight);
                               every key in ONE hash slot (CROSSSLOT otherwise,
                               before the script runs: nothing written)
  ARGV (n>=1)
    [1..] token    the lease token KEYS[i] was claimed with (without "~"),
                   1..256 bytes
  Returns   an array with one element per key, in KEYS order, as release.lua:
            1 the value was "~<token>" and the key is deleted; 0 the key is
            absent or held by another value (nothing changed). A key of another
            type gets a CORRUPT element instead, and the other keys are still
            released
  Errors    BADARG <what>    KEYS is not 1..500 keys, each of 1..2048 bytes:
                             checked first, before ARGV; nothing read or written
            BADARG <what>    before any write; nothing written (also for a
                             count of ARGV other than the number of keys)
            CORRUPT <what>   an element, not the reply: that key only
  Writes    DEL key for every key whose lease the caller holds
  Atomicity every check precedes the first DEL; one script call
  Memory    flags=allow-oom: it only deletes, so it runs (and frees memory)
            when maxmemory is reached under noeviction
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
if #ARGV < 1 or #ARGV ~= #KEYS then
  return redis.error_reply('BADARG want #KEYS arguments: a token per key')
end
-- <snippet:claim_value>
-- A claim's value: false when the key is absent, and an error reply when it
-- holds another type (CORRUPT, not Redis's WRONGTYPE).
local function load_claim(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then
    return nil, redis.error_reply('CORRUPT the key holds something other than a claim string')
  end
  return v
end
-- </snippet>

for i = 1, #ARGV do
  if #ARGV[i] < 1 or #ARGV[i] > 256 then
    return redis.error_reply('BADARG every token must be 1..256 bytes')
  end
end

local out = {}
for i = 1, #KEYS do
  local v, bad = load_claim(KEYS[i])
  if bad then
    out[i] = bad
  elseif v ~= '~' .. ARGV[i] then
    out[i] = 0
  else
    out[i] = redis.call('DEL', KEYS[i])
  end
end
return out
