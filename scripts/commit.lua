#!lua flags=allow-oom
--[[ commit.lua — turn the caller's lease into a processed claim.
  KEYS (n=1)
    [1] prefix..message_id   STRING  "1" (processed) or "~<token>" (in flight)
  ARGV (n=2)
    [1] token    the lease token the caller claimed with (without "~"), 1..256 bytes
    [2] ttl_ms   decimal integer ms the processed mark lives, 0 = no expiry
  Returns   1 the value was "~<token>" and is now "1" with the new expiry
            2 the key was absent (the lease expired and nobody took the id):
              "1" is written with the new expiry (SET NX)
            0 the key already holds "1": processed, by another consumer or by
              an earlier attempt of this very commit (nothing changed)
            -1 the key holds another consumer's lease (nothing changed)
  Errors    BADARG <what>    before any write; nothing written (also
                             for a count of ARGV other than the header's)
            CORRUPT <what>   the key holds something other than a string; nothing written
  Writes    SET KEYS[1] "1" [PX ttl_ms] (own lease, or NX on an absent key)
  Atomicity all checks precede the single SET
  Memory    flags=allow-oom: the effect has already happened, so its commit is
            never refused when maxmemory is reached under noeviction; it shrinks
            "~<token>" to "1" (or writes one short key where the lease expired)
  Complexity O(1)
]]
if #ARGV ~= 2 then
  return redis.error_reply('BADARG want 2 arguments: token, ttl_ms')
end
local token, ttl = ARGV[1], ARGV[2]

if type(token) ~= 'string' or #token < 1 or #token > 256 then
  return redis.error_reply('BADARG token must be 1..256 bytes')
end
if type(ttl) ~= 'string' or not string.find(ttl, '^%d+$') or #ttl > 15 then
  return redis.error_reply('BADARG ttl_ms must be a decimal integer >= 0')
end
-- Redis refuses "007" as a PX/PEXPIRE argument (an error after a write): read it as 7.
ttl = string.format('%d', tonumber(ttl))

-- (pcall: a key of another type answers CORRUPT, not Redis's WRONGTYPE.)
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  return redis.error_reply('CORRUPT the key holds something other than a claim string')
end
local reply = 1
if v == false then
  reply = 2
elseif v == '1' then
  return 0
elseif v ~= '~' .. token then
  return -1
end
-- A plain SET drops the lease's expiry; PX sets the dedupe window instead.
if tonumber(ttl) > 0 then
  redis.call('SET', KEYS[1], '1', 'PX', ttl)
else
  redis.call('SET', KEYS[1], '1')
end
return reply
