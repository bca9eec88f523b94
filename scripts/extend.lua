#!lua flags=allow-oom
--[[ extend.lua — keep the caller's claim lease alive while its effect runs.
  KEYS (n=1)
    [1] prefix..message_id   STRING  "1" (processed) or "~<token>" (in flight)
  ARGV (n=2)
    [1] token      the lease token the caller claimed with (without "~"), 1..256 bytes
    [2] lease_ms   decimal integer ms the lease lasts from now, >= 1
  Returns   1 the value is "~<token>": its expiry is now lease_ms from now
            0 the key is absent or holds another value (the lease was lost;
              nothing changed)
  Errors    BADARG <what>    before any write; nothing written (also
                             for a count of ARGV other than the header's)
            CORRUPT <what>   the key holds something other than a string; nothing written
  Writes    PEXPIRE KEYS[1] lease_ms (only when the caller holds the lease)
  Atomicity the check precedes the single PEXPIRE
  Memory    flags=allow-oom: it only moves an existing expiry, so a live
            owner keeps its lease when maxmemory is reached under noeviction
  Complexity O(1)
]]
if #ARGV ~= 2 then
  return redis.error_reply('BADARG want 2 arguments: token, lease_ms')
end
local token, lease = ARGV[1], ARGV[2]

if type(token) ~= 'string' or #token < 1 or #token > 256 then
  return redis.error_reply('BADARG token must be 1..256 bytes')
end
if type(lease) ~= 'string' or not string.find(lease, '^%d+$') or #lease > 15
    or tonumber(lease) < 1 then
  return redis.error_reply('BADARG lease_ms must be a decimal integer >= 1')
end

-- (pcall: a key of another type answers CORRUPT, not Redis's WRONGTYPE.)
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  return redis.error_reply('CORRUPT the key holds something other than a claim string')
end
if v ~= '~' .. token then
  return 0
end
return redis.call('PEXPIRE', KEYS[1], string.format('%d', tonumber(lease)))
