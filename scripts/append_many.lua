#!lua
--[[ append_many.lua — append a burst of messages to one connection's tail: all or none, once per id.
  KEYS (n=1)
    [1] prefix..conn_id   HASH  _seq, _gen, _epoch, _rid, <msg_id> -> "<seq>:<payload>"
  ARGV (n>=3)
    [1] ttl_ms        decimal integer ms the hash lives after this append; 0 = leave
                      the expiry as it is (a new hash then never expires)
                      (1..15 digits, no sign: "-1" is BADARG)
    [2] max_unacked   decimal integer, the most messages the tail may hold; 0 = unbounded
                      (1..15 digits, no sign: "-1" is BADARG)
    [3..] pairs       msg_id, payload, ... : 1..1000 pairs; msg_id 1..256 bytes, not
                      starting with "_"; payload any bytes, at most 4194304 (4 MiB)
  Returns   {epoch, seq1, created1, seq2, created2, ...} (integers): per message,
            in ARGV order, what append.lua returns for it
              epoch    server time in microseconds when this incarnation of the
                       hash was created, or re-minted as append.lua does it: when
                       the server's replication ID (INFO replication
                       master_replid) is not the _rid stored with the epoch,
                       the epoch becomes max(now, epoch + 1) before anything
                       else (also when every msg_id is a retry; seq goes on),
                       so no (epoch, seq) pair is handed out twice
              seq      the message's sequence number; the new messages of one call
                       get consecutive seqs, in ARGV order
              created  1 appended now; 0 msg_id was already in the tail, or given
                       earlier in this call (first wins), and its seq is returned
                       (the stored payload is kept)
  Errors    BADARG <what>    KEYS is not exactly 1 key of 1..2048 bytes:
                             checked first, before ARGV; nothing read or written
            BADARG <what>    before any write; nothing written
            FULL <what>      the new messages do not all fit under max_unacked, or
                             _seq would pass 2^53-1 (the last exact integer), or
                             a new epoch would; nothing written (all or nothing)
            CORRUPT <what>   the key is not a well-formed outbox hash (another type,
                             reserved fields missing or not canonical decimals, as
                             append.lua checks them, or a msg_id's value not
                             "<seq>:<payload>"); nothing written
  Writes    another replication ID: HSET _epoch <new epoch> _rid <replid> (also
            when none is new); then, only when there are new ones, one HSET of
            _seq <last seq> and every new msg_id -> "<seq>:<payload>" (on a new
            hash with _gen "0" _epoch <now> _rid <replid>); PEXPIRE ttl_ms when
            ttl_ms > 0 (also when none is new)
  Atomicity every check precedes the first write; the burst is one script call
  Length    110 lines of code besides its snippets: every message validated
            before the first write, then classified (new, already in the tail,
            or given twice), numbered and written in one HSET, all or nothing;
            and the new epoch after a failover, minted in the same step as the
            seqs it protects (as append.lua)
  Complexity O(number of messages) (plus the payloads' size, and one INFO replication)
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
if #ARGV < 3 or #ARGV % 2 == 1 or #ARGV > 2002 then
  return redis.error_reply('BADARG want ttl_ms, max_unacked, then 1..1000 msg_id, payload pairs')
end
local n = #ARGV
local ttl, max = ARGV[1], ARGV[2]

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

ttl, max = int_arg(ttl), int_arg(max)
if not ttl then
  return redis.error_reply('BADARG ttl_ms must be a decimal integer >= 0')
end
if not max then
  return redis.error_reply('BADARG max_unacked must be a decimal integer >= 0')
end
local byte = string.byte
local fields = {'_seq', '_gen', '_epoch', '_rid'}
for i = 3, n, 2 do
  local id = ARGV[i]
  if #id < 1 or #id > 256 or byte(id, 1) == 95 then
    return redis.error_reply('BADARG msg_id must be 1..256 bytes and not start with "_"')
  end
  if #ARGV[i + 1] > 4194304 then
    return redis.error_reply('BADARG payload must be at most 4194304 bytes')
  end
  fields[#fields + 1] = id
end

-- One read: the reserved fields, which exist together or not at all (anything
-- else is not ours; _rid is absent on a hash written before it existed), and
-- every id's value.
-- (pcall: a key of another type answers CORRUPT, not Redis's WRONGTYPE.)
local r = redis.pcall('HMGET', key, unpack(fields))
if r.err then
  return redis.error_reply('CORRUPT the key holds something other than an outbox hash')
end
local epoch
if r[1] or r[2] or r[3] then
  if not outbox_ok(r[1], r[2], r[3]) then
    return redis.error_reply('CORRUPT reserved fields _seq, _gen, _epoch missing or not canonical decimals')
  end
  epoch = r[3]
elseif redis.call('EXISTS', key) == 1 then
  return redis.error_reply('CORRUPT reserved fields _seq, _gen, _epoch missing')
end

-- Per message (by ARGV index of its msg_id): the stored seq (a string) of an
-- id already in the tail; firsts maps each new id to its first ARGV index.
local old, firsts, fresh = {}, {}, 0
for j = 5, #r do
  local i = j * 2 - 7 -- the msg_id's ARGV index
  if r[j] then
    local s = string.match(r[j], '^([1-9]%d*):')
    if not s or #s > 16 or tonumber(s) > EXACT then
      return redis.error_reply('CORRUPT value of msg_id is not "<seq>:<payload>"')
    end
    old[i] = s
  elseif not firsts[ARGV[i]] then
    fresh = fresh + 1
    firsts[ARGV[i]] = i
  end
end
if fresh > 0 and epoch and tonumber(r[1]) + fresh > EXACT then
  return redis.error_reply('FULL _seq would pass 2^53-1, the last exact sequence number')
end
if fresh > 0 and max ~= '0' then
  local held = 0
  if epoch then
    held = redis.call('HLEN', key) - (r[4] and 4 or 3)
  end
  if held + fresh > tonumber(max) then
    return redis.error_reply('FULL ' .. string.format('the tail holds %d unacked messages, %d more do not fit',
      held, fresh))
  end
end

-- The price of never handing out an (epoch, seq) twice: one INFO per call.
-- (The clock is read only where an epoch is minted, as append.lua.)
local rid = replid()

if epoch and r[4] ~= rid then
  -- As append.lua: appends acknowledged with this epoch may be lost (the hash
  -- came through a failover or restart): their seqs would be handed out
  -- again. A new epoch, above the old one even if this server's clock is
  -- behind; seq goes on.
  epoch = next_epoch(epoch, now_us())
  if not epoch then
    return redis.error_reply('FULL _epoch is at 2^53-1, the last exact epoch')
  end
  redis.call('HSET', key, '_epoch', epoch, '_rid', rid)
end

-- The reply: {epoch, seq, created, ...}; epoch goes in front at the end.
local out = {0}
if fresh > 0 then
  -- The seqs go on from the _seq read above (checked: _seq + fresh is at
  -- most 2^53-1; false on a new hash), written with the messages in one
  -- HSET, as append.lua.
  local seq = tonumber(r[1] or '0')
  local set, given = {'_seq', string.format('%d', seq + fresh)}, {} -- given: the seq each new id got
  if not epoch then
    -- A new incarnation, stamped with the server's clock and replication ID.
    epoch = now_us()
    set[3], set[4], set[5], set[6], set[7], set[8] = '_gen', '0', '_epoch', epoch, '_rid', rid
  end
  for i = 3, n, 2 do
    local id = ARGV[i]
    if old[i] then
      out[#out + 1] = tonumber(old[i])
      out[#out + 1] = 0
    elseif firsts[id] == i then
      seq = seq + 1
      given[id] = seq
      set[#set + 1] = id
      set[#set + 1] = string.format('%d', seq) .. ':' .. ARGV[i + 1]
      out[#out + 1] = seq
      out[#out + 1] = 1
    else
      out[#out + 1] = given[id]
      out[#out + 1] = 0
    end
  end
  redis.call('HSET', key, unpack(set))
else
  for i = 3, n, 2 do
    out[#out + 1] = tonumber(old[i])
    out[#out + 1] = 0
  end
end
if ttl ~= '0' then
  redis.call('PEXPIRE', key, ttl)
end
out[1] = tonumber(epoch)
return out
