-- layout (b) prototype update: token, status, payload (the common path only)
local key, token = KEYS[1], ARGV[1]
if #ARGV ~= 5 or ARGV[2] ~= 'status' or ARGV[4] ~= 'payload' or #ARGV[3] < 1 or #ARGV[3] > 64 or #ARGV[5] > 1048576 then
  return redis.error_reply('BADARG')
end
local r = redis.pcall('HMGET', key, 's', 'p', 'm', 'f', 't')
if r.err then return redis.error_reply('CORRUPT') end
if not r[1] then return redis.error_reply('NOT_FOUND') end
if not r[2] or not r[3] or not r[4] or not r[5] then return redis.error_reply('CORRUPT') end
local c, u, e, l, f = string.match(r[3], '^(%d+):(%d+):(%d+):(%d+):([1-9]%d*)$')
if not c or #f > 19 or #c > 16 or #u > 16 or #e > 16 or #l > 16 then return redis.error_reply('CORRUPT') end
if token ~= '' and token ~= r[5] then return redis.error_reply('STALE_OWNER') end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[3] ~= 'pending' then l = '0' end
redis.call('HSET', key, 's', ARGV[3], 'p', ARGV[5], 'm', string.format('%s:%d:%s:%s:%s', c, now, e, l, f))
return 1
