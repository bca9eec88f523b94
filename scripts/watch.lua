#!lua
--[[ watch.lua — mark a pending idempotency record as watched, so the write that ends it publishes.
  KEYS (n=1)
    [1] prefix..key   HASH  status, ... (the record, as acquire.lua defines
                            it), watch
  ARGV (n=0)
  Returns   1 the record is pending: its field watch is "1", and the next
              update.lua that gives it another status, or delete.lua fenced by
              its owner's token, SPUBLISHes to the shard channel KEYS[1] (the
              key itself, so it lives in the key's slot) and drops the field. A
              waiter SSUBSCRIBEs to KEYS[1] first, then calls this, then waits
              for a message (re-reading the record after a bounded time in case
              one is missed: an expiry or an unfenced delete.lua publishes
              nothing)
            0 the key is absent or the record is not pending: nothing written;
              the caller reads the record again at once
  Errors    BADARG <what>    KEYS is not exactly 1 key of 1..2048 bytes:
                             checked first, before ARGV; nothing read or written
            BADARG <what>    before any write; nothing written (also for a
                             count of ARGV other than the header's)
            CORRUPT <what>   the key holds something other than a hash;
                             nothing written
  Writes    HSET watch (only when the record is pending)
  Atomicity the check precedes the single HSET: a final write either ran
            before (this returns 0) or sees the field (and publishes)
  Complexity O(1)
]]
-- <snippet:one_key>
-- Exactly one key of 1..2048 bytes (a prefix of at most 1024 bytes and an id
-- of 1..1024, as the Go stores check), refused before anything else is read.
if #KEYS ~= 1 or #KEYS[1] == 0 or #KEYS[1] > 2048 then
  return redis.error_reply('BADARG want exactly 1 key (KEYS) of 1..2048 bytes')
end
-- </snippet>
if #ARGV ~= 0 then
  return redis.error_reply('BADARG want no arguments')
end
local key = KEYS[1]

local status = redis.pcall('HGET', key, 'status')
if type(status) == 'table' then
  return redis.error_reply('CORRUPT the key holds something other than a record hash')
end
if status ~= 'pending' then
  return 0
end
redis.call('HSET', key, 'watch', '1')
return 1
