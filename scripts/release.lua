#!lua flags=allow-oom
--[[ release.lua — give up the caller's lease so the message can be retried.
  KEYS (n=1)
    [1] prefix..message_id   STRING  "1" (processed) or "~<token>" (in flight)
  ARGV (n=1)
    [1] token    the lease token the caller claimed with (without "~"), 1..256 bytes
  Returns   1 the value was "~<token>" and the key is deleted
            0 the key is absent or held by another value (nothing changed)
  Errors    BADARG <what>    KEYS is not exactly 1 key of 1..2048 bytes:
                             checked first, before ARGV; nothing read or written
            BADARG <what>    before any write; nothing written (also
                             for a count of ARGV other than the header's)
            CORRUPT <what>   the key holds something other than a string; nothing written
  Writes    DEL KEYS[1] (only when the caller holds the lease)
  Atomicity the check precedes the single DEL
  Memory    flags=allow-oom: it only deletes, so it runs (and frees memory) when
            maxmemory is reached under noeviction
  Complexity O(1)
]]
-- <snippet:one_key>
-- Exactly one key of 1..2048 bytes (a prefix of at most 1024 bytes and an id
-- of 1..1024, as the Go stores check), refused before anything else is read.
if #KEYS ~= 1 or #KEYS[1] == 0 or #KEYS[1] > 2048 then
  return redis.error_reply('BADARG want exactly 1 key (KEYS) of 1..2048 bytes')
end
-- </snippet>
if #ARGV ~= 1 then
  return redis.error_reply('BADARG want 1 argument: token')
end
local token = ARGV[1]

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

if #token < 1 or #token > 256 then
  return redis.error_reply('BADARG token must be 1..256 bytes')
end

local v, bad = load_claim(KEYS[1])
if bad then
  return bad
end
if v ~= '~' .. token then
  return 0
end
return redis.call('DEL', KEYS[1])
