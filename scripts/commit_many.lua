#!lua flags=allow-oom
--[[ commit_many.lua — turn many leases of one hash slot into processed claims: commit.lua for each.
  KEYS (n=1..500)
    [1..] prefix..message_id   STRING  "1" (processed) or "~<token>" (in flight);
                               every key in ONE hash slot (CROSSSLOT otherwise,
                               before the script runs: nothing written)
  ARGV (n>=2)
    [1] ttl_ms     decimal integer ms every processed mark lives, 0 = no expiry
                   (1..15 digits, no sign: "-1" is BADARG)
    [2..] token    the lease token KEYS[i-1] was claimed with (without "~"),
                   1..256 bytes
  Returns   an array with one element per key, in KEYS order, as commit.lua:
            1 the value was "~<token>" and is now "1" with the new expiry;
            2 the key was absent (the lease expired and nobody took the id):
            "1" is written with the new expiry; 0 the key already holds "1"
            (nothing changed); -1 the key holds any other value: another
            consumer's lease, or a value other than "1" (nothing changed).
            A key of another type gets a CORRUPT element instead, and the
            other keys are still committed: each key's outcome is its own
  Errors    BADARG <what>    KEYS is not 1..500 keys, each of 1..2048 bytes:
                             checked first, before ARGV; nothing read or written
            BADARG <what>    before any write; nothing written (also for a
                             count of ARGV other than 1 + the number of keys)
            CORRUPT <what>   an element, not the reply: that key only
  Writes    SET key "1" [PX ttl_ms] for every key that held the caller's lease
            or was absent
  Atomicity every check precedes the first SET; one script call
  Memory    flags=allow-oom: the effects have already happened, so their
            commits are never refused when maxmemory is reached under
            noeviction; each SET shrinks "~<token>" to "1" (or writes one
            short key where a lease expired)
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
if #ARGV < 2 or #ARGV ~= #KEYS + 1 then
  return redis.error_reply('BADARG want 1 + #KEYS arguments: ttl_ms, a token per key')
end

-- <snippet:int_arg>
-- A decimal integer argument (ms, or a count) of 1..15 digits, exact as a Lua
-- number, made canonical ("007" -> "7": Redis refuses "007" as a PX or
-- PEXPIRE argument, which would be an error after a write); nil if s is not one.
-- (A canonical s, what every client sends, is returned as is: one pattern
-- match instead of three calls; the server time it saves is measured in
-- BENCHMARKS.md, "What was changed, and what it bought".)
local function int_arg(s)
  if #s > 15 then
    return nil
  elseif s == '0' or string.find(s, '^[1-9]%d*$') then
    return s
  elseif not string.find(s, '^%d+$') then
    return nil
  end
  return string.format('%d', tonumber(s))
end
-- </snippet>
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

local ttl = int_arg(ARGV[1])
if not ttl then
  return redis.error_reply('BADARG ttl_ms must be a decimal integer >= 0')
end
for i = 2, #ARGV do
  if #ARGV[i] < 1 or #ARGV[i] > 256 then
    return redis.error_reply('BADARG every token must be 1..256 bytes')
  end
end

local out = {}
for i = 1, #KEYS do
  local v, bad = load_claim(KEYS[i])
  if bad then
    out[i] = bad
  elseif v == '1' then
    out[i] = 0
  elseif v ~= false and v ~= '~' .. ARGV[i + 1] then
    out[i] = -1
  else
    out[i] = v == false and 2 or 1
    -- A plain SET drops the lease's expiry; PX sets the dedupe window instead.
    if ttl ~= '0' then
      redis.call('SET', KEYS[i], '1', 'PX', ttl)
    else
      redis.call('SET', KEYS[i], '1')
    end
  end
end
return out
