#!lua
--[[ append.lua — append a message to a connection's unacknowledged tail, once per id.
  KEYS (n=1)
    [1] prefix..conn_id   HASH  _seq, _gen, _epoch, _rid, <msg_id> -> "<seq>:<payload>"
  ARGV (n=4)
    [1] msg_id        1..256 bytes, not starting with "_"
    [2] payload       any bytes, at most 4194304 (4 MiB)
    [3] ttl_ms        decimal integer ms the hash lives after this append; 0 = leave
                      the expiry as it is (a new hash then never expires)
                      (1..15 digits, no sign: "-1" is BADARG)
    [4] max_unacked   decimal integer, the most messages the tail may hold; 0 = unbounded
                      (1..15 digits, no sign: "-1" is BADARG)
  Returns   {seq, epoch, created} (three integers, all exact: below 2^53)
              seq      the message's sequence number: 1, 2, 3... per incarnation
              epoch    server time in microseconds when this incarnation of the
                       hash was created, or re-minted: when the server's
                       replication ID (INFO replication master_replid) is not
                       the _rid stored with the epoch — a failover or restart
                       since, which may have lost appends acknowledged with
                       it — the epoch becomes max(now, epoch + 1) before
                       anything else (seq goes on), so no (epoch, seq) pair
                       is handed out twice
              created  1 appended now; 0 msg_id was already in the tail and its
                       existing seq is returned (an idempotent retry; the stored
                       payload is kept)
  Errors    BADARG <what>    KEYS is not exactly 1 key of 1..2048 bytes:
                             checked first, before ARGV; nothing read or written
            BADARG <what>    before any write; nothing written (also
                             for a count of ARGV other than the header's)
            FULL <what>      a new msg_id while the tail holds max_unacked, or while
                             _seq is at 2^53-1 (the last exact integer), or a new
                             epoch would pass 2^53-1; nothing written
            CORRUPT <what>   the key is not a well-formed outbox hash (another type,
                             or reserved fields missing or not canonical decimals:
                             _seq 0..2^53-1, _gen a uint64, _epoch 1..2^53-1);
                             nothing written
  Writes    another replication ID: HSET _epoch <new epoch> _rid <replid> (also
            on a retry); then, only for a new msg_id, one HSET _seq <seq> msg_id
            "<seq>:<payload>" (on a new hash with _gen "0" _epoch <now> _rid
            <replid>); PEXPIRE ttl_ms when ttl_ms > 0 (also on a retry)
  Atomicity every check precedes the first write
  Length    72 lines of code besides its snippets: the new epoch after a failover
            (about 8 lines) must be minted in the same step as the seq it
            protects, or a seq could be handed out under the old epoch
  Complexity O(1) (plus the payload's size, and one INFO replication)
]]
-- <snippet:one_key>
-- Exactly one key of 1..2048 bytes (a prefix of at most 1024 bytes and an id
-- of 1..1024, as the Go stores check), refused before anything else is read.
if #KEYS ~= 1 or #KEYS[1] == 0 or #KEYS[1] > 2048 then
  return redis.error_reply('BADARG want exactly 1 key (KEYS) of 1..2048 bytes')
end
-- </snippet>
local key = KEYS[1]
-- (One count instead of a type() call per argument: ARGV holds only strings.)
if #ARGV ~= 4 then
  return redis.error_reply('BADARG want 4 arguments: msg_id, payload, ttl_ms, max_unacked')
end
local id, payload, ttl, max = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

-- <snippet:u64>
-- uint64 as canonical decimal strings: valid, and ordered by length then bytes
-- (Lua numbers lose precision above 2^53).
local function u64(s)
  return type(s) == 'string' and #s >= 1 and #s <= 20 and string.find(s, '^%d+$') ~= nil
    and (#s == 1 or string.byte(s, 1) ~= 48)
end
local function cmp(a, b)
  if #a ~= #b then
    return #a < #b and -1 or 1
  end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y and -1 or 1
    end
  end
  return 0
end
local MAX = '18446744073709551615'
-- </snippet>
-- <snippet:outbox_hash>
-- A well-formed outbox hash: _seq a canonical decimal 0..2^53-1, _gen a
-- canonical decimal uint64, _epoch a canonical decimal 1..2^53-1 (microseconds).
-- Integers up to 2^53-1 are exact as Lua numbers.
local EXACT = 9007199254740991
local function outbox_ok(s, g, e)
  return u64(s) and #s <= 16 and tonumber(s) <= EXACT
    and u64(g) and cmp(g, MAX) <= 0
    and u64(e) and e ~= '0' and #e <= 16 and tonumber(e) <= EXACT
end
-- </snippet>
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
-- <snippet:now_us>
-- Now in microseconds since the epoch, from the server's clock, as a decimal
-- string: the _epoch of a new outbox incarnation.
local function now_us()
  local t = redis.call('TIME')
  return t[1] .. string.format('%06d', tonumber(t[2]))
end
-- </snippet>
-- <snippet:replid>
-- The replication ID of the history this server is on (INFO replication
-- master_replid, 40 hex characters), stored as _rid with an outbox epoch: a
-- promoted replica, or a restarted primary, has a new one. INFO is allowed in
-- scripts and costs about 4 us of server time; a plain find, because
-- string.match over INFO's text costs 2 us more.
local function replid()
  local info = redis.call('INFO', 'replication')
  local at = string.find(info, 'master_replid:', 1, true)
  return at and string.sub(info, at + 14, at + 53) or ''
end
-- </snippet>
-- <snippet:next_epoch>
-- The epoch of an outbox hash whose _rid is not the server's (it came through
-- a failover or restart, which may have lost appends acknowledged with its
-- epoch): now, or epoch + 1 when this server's clock is not past epoch, so it
-- is above every epoch handed out before; nil when that would pass 2^53-1.
-- (Both are canonical decimals: ordered by length, then bytes.)
local function next_epoch(epoch, now)
  if #now < #epoch or (#now == #epoch and now <= epoch) then
    if tonumber(epoch) >= EXACT then
      return nil
    end
    return string.format('%d', tonumber(epoch) + 1)
  end
  return now
end
-- </snippet>

if #id < 1 or #id > 256 or string.byte(id, 1) == 95 then
  return redis.error_reply('BADARG msg_id must be 1..256 bytes and not start with "_"')
end
if #payload > 4194304 then
  return redis.error_reply('BADARG payload must be at most 4194304 bytes')
end
ttl, max = int_arg(ttl), int_arg(max)
if not ttl then
  return redis.error_reply('BADARG ttl_ms must be a decimal integer >= 0')
end
if not max then
  return redis.error_reply('BADARG max_unacked must be a decimal integer >= 0')
end

-- One read on the common path: the reserved fields, which exist together or
-- not at all (anything else is not ours), and the id's value on a retry.
-- (pcall: a key of another type answers CORRUPT, not Redis's WRONGTYPE.)
local r = redis.pcall('HMGET', key, '_seq', '_gen', '_epoch', id, '_rid')
if r.err then
  return redis.error_reply('CORRUPT the key holds something other than an outbox hash')
end
local epoch, oldseq
if r[1] or r[2] or r[3] then
  if not outbox_ok(r[1], r[2], r[3]) then
    return redis.error_reply('CORRUPT reserved fields _seq, _gen, _epoch missing or not canonical decimals')
  end
  epoch = r[3]
  if r[4] then
    oldseq = string.match(r[4], '^([1-9]%d*):')
    if not oldseq or #oldseq > 16 or tonumber(oldseq) > EXACT then
      return redis.error_reply('CORRUPT value of msg_id is not "<seq>:<payload>"')
    end
  else
    if tonumber(r[1]) >= EXACT then
      return redis.error_reply('FULL _seq is at 2^53-1, the last exact sequence number')
    end
    if max ~= '0' then
      local held = redis.call('HLEN', key) - (r[5] and 4 or 3)
      if held >= tonumber(max) then
        return redis.error_reply('FULL the tail holds ' .. string.format('%d', held) .. ' unacked messages')
      end
    end
  end
elseif redis.call('EXISTS', key) == 1 then
  return redis.error_reply('CORRUPT reserved fields _seq, _gen, _epoch missing')
end

-- The price of never handing out an (epoch, seq) twice: one INFO per append.
-- (The clock is read only where an epoch is minted: one TIME fewer on the
-- common append, 16.2 -> 12.4 us of server time per call, median of 7
-- interleaved redis-benchmark rounds.)
local rid = replid()

local seq, created
if epoch and r[5] ~= rid then
  -- Appends acknowledged with this epoch may be lost (the hash came through a
  -- failover or restart): their seqs would be handed out again. A new epoch,
  -- above the old one even if this server's clock is behind; seq goes on.
  epoch = next_epoch(epoch, now_us())
  if not epoch then
    return redis.error_reply('FULL _epoch is at 2^53-1, the last exact epoch')
  end
  redis.call('HSET', key, '_epoch', epoch, '_rid', rid)
end
if oldseq then
  seq, created = tonumber(oldseq), 0
else
  -- The next seq from the _seq read above (below 2^53-1, checked; false on
  -- a new hash): one HSET writes it with the message, no HINCRBY (one write
  -- command instead of two: 11.9 -> 11.2 us of server time per append).
  seq, created = tonumber(r[1] or '0') + 1, 1
  local s = string.format('%d', seq)
  if not epoch then
    -- A new incarnation, stamped with the server's clock and replication ID.
    epoch = now_us()
    redis.call('HSET', key, '_seq', s, '_gen', '0', '_epoch', epoch, '_rid', rid, id, s .. ':' .. payload)
  else
    redis.call('HSET', key, '_seq', s, id, s .. ':' .. payload)
  end
end
if ttl ~= '0' then
  redis.call('PEXPIRE', key, ttl)
end
-- The epoch is an integer in every reply (append's and unacked's): exact, as
-- it is at most 2^53-1.
return {seq, tonumber(epoch), created}
