#!lua flags=no-writes
--[[ get.lua — read an idempotency record, without its owner's token.
  KEYS (n=1)
    [1] prefix..key   HASH  status, payload, created_ms, updated_ms, expires_ms,
                            lease_ms, fence, fp, token
  ARGV (n=0)
  Returns   {status, payload, created_ms, updated_ms, expires_ms, lease_ms,
             fence, fp, token}: 9 strings, token always ''; or nil when the key
            is absent (never created, deleted, or expired)
  Errors    CORRUPT <what>   the key holds something other than a record hash
  Writes    nothing
  Atomicity one TYPE and one HMGET in one script
  Complexity O(1) (plus the size of the payload in the reply)
]]
local key = KEYS[1]

local function is_ms(s)
  return #s <= 15 and string.match(s, '^%d+$') ~= nil
end

local kind = redis.call('TYPE', key)['ok']
if kind == 'none' then
  return false
end
if kind ~= 'hash' then
  return redis.error_reply('CORRUPT the key holds a ' .. kind .. ', not a record hash')
end
local r = redis.call('HMGET', key, 'status', 'payload', 'created_ms', 'updated_ms',
  'expires_ms', 'lease_ms', 'fence', 'fp', 'token')
for i = 1, 9 do
  if not r[i] then
    return redis.error_reply('CORRUPT the record hash lacks a field')
  end
end
for i = 3, 6 do
  if not is_ms(r[i]) then
    return redis.error_reply('CORRUPT a time field is not decimal ms')
  end
end
if r[1] == '' or #r[7] > 19 or not string.match(r[7], '^%d+$') then
  return redis.error_reply('CORRUPT bad status or fence')
end
return {r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], ''}
