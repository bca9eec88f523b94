-- layout (b) prototype: five fields s, p, m ("created:updated:expires:lease:fence"), f, t
local key, ttl, token, fp, lease = KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if #ARGV ~= 4 or not string.find(ttl, '^%d+$') or not string.find(lease, '^%d+$') or #token < 1 or #token > 256 or #fp > 256 then
  return redis.error_reply('BADARG')
end
local function load(k)
  local r = redis.pcall('HMGET', k, 's', 'p', 'm', 'f', 't')
  if r.err then return nil, redis.error_reply('CORRUPT') end
  if not r[1] or not r[2] or not r[3] or not r[4] or not r[5] then return nil, redis.error_reply('CORRUPT') end
  local c, u, e, l, f = string.match(r[3], '^(%d+):(%d+):(%d+):(%d+):([1-9]%d*)$')
  if not c or #f > 19 or #c > 16 or #u > 16 or #e > 16 or #l > 16 then return nil, redis.error_reply('CORRUPT') end
  return {r[1], r[2], tonumber(c), tonumber(u), tonumber(e), tonumber(l), f, r[4], r[5]}
end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
if redis.call('EXISTS', key) == 1 then
  local r, bad = load(key)
  if bad then return bad end
  if fp ~= '' and r[8] ~= '' and fp ~= r[8] then return redis.error_reply('MISMATCH') end
  if r[1] ~= 'pending' or r[6] == 0 or r[7] == '9999999999999999999' then
    return {0, r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], ''}
  end
  return redis.error_reply('UNSUPPORTED takeover in the prototype')
end
local now = now_ms()
local e, l = 0, 0
if ttl ~= '0' then e = now + tonumber(ttl) end
if lease ~= '0' then l = now + tonumber(lease) end
redis.call('HSET', key, 's', 'pending', 'p', '', 'm', string.format('%d:%d:%d:%d:1', now, now, e, l), 'f', fp, 't', token)
if e ~= 0 then redis.call('PEXPIREAT', key, e) end
return {1, 'pending', '', now, now, e, l, '1', fp, token}
