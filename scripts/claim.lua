#!lua
--[[ claim.lua — claim a message id: exactly one caller creates it.
  KEYS (n=1)
    [1] prefix..message_id   STRING  "1" (processed) or "~<token>" (in flight, leased)
  ARGV (n=2)
    [1] ttl_ms   decimal integer ms, 0 = no expiry (a "~" lease needs ttl_ms > 0)
    [2] value    "1" to mark the id processed, or "~<token>" to lease it
  Returns   1  created (the caller won)
            0  exists and is processed (any value not starting with "~", so keys
               written by `SET key 1 NX PX ttl` count as processed)
            -1 exists and is in flight
  Errors    BADARG <what>    before any write; nothing written (also
                             for a count of ARGV other than the header's)
            CORRUPT <what>   the key holds something other than a string; nothing written
  Writes    SET KEYS[1] value NX [PX ttl_ms] (only when absent)
  Atomicity all checks (a TYPE read among them) precede the single SET NX GET
  Complexity O(1)
]]
-- (One count instead of a type() call per argument: ARGV holds only strings.)
if #ARGV ~= 2 then
  return redis.error_reply('BADARG want 2 arguments: ttl_ms, value')
end
local ttl, value = ARGV[1], ARGV[2]

-- ttl in canonical form ("0", or digits without a leading zero) takes one
-- pattern match; anything else is checked and normalised on a slower path
-- (Redis refuses "007" as a PX argument, an error after a write: read it as 7).
if #ttl > 15 or (ttl ~= '0' and not string.find(ttl, '^[1-9]%d*$')) then
  if #ttl > 15 or not string.find(ttl, '^%d+$') then
    return redis.error_reply('BADARG ttl_ms must be a decimal integer >= 0')
  end
  ttl = string.format('%d', tonumber(ttl))
end
if value ~= '1' and not (#value > 1 and #value <= 257 and string.byte(value, 1) == 126) then
  return redis.error_reply('BADARG value must be "1" or "~<token>" (token 1..256 bytes)')
end
if value ~= '1' and ttl == '0' then
  return redis.error_reply('BADARG a "~" lease needs ttl_ms > 0')
end

-- A key of another type answers CORRUPT, not Redis's WRONGTYPE from SET.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'string' then
  return redis.error_reply('CORRUPT the key holds a ' .. kind .. ', not a claim string')
end

-- SET NX GET (Redis >= 7.0) creates and reports the previous value in one call.
local old
if ttl ~= '0' then
  old = redis.call('SET', KEYS[1], value, 'NX', 'GET', 'PX', ttl)
else
  old = redis.call('SET', KEYS[1], value, 'NX', 'GET')
end
if not old then
  return 1
end
if string.byte(old, 1) == 126 then
  return -1
end
return 0
