#!/usr/bin/env python3
"""Every flow of every redisonce store, driven from redis-py with only what the
docs/non-go.md ("Key layout and scripts") and the script headers say:
SCRIPT LOAD of each file byte for byte + EVALSHA / EVALSHA_RO, then FCALL /
FCALL_RO after FUNCTION LOAD REPLACE of the Functions library.

It asserts every reply's exact type (int, bytes, list, None), error replies
`CODE detail`, binary payloads round-tripping, and generations and fences near
2^64 as decimal strings. Run by scripts_test/noncgo_clients_test.go, which sets:

  REDIS_URL              the server
  REDISONCE_SCRIPTS      the scripts/ directory (*.lua and SHA1SUMS)
  REDISONCE_FUNCTIONS    a file holding `redisonce functions`'s output
  REDISONCE_PREFIX       a key prefix of its own for this run
  REDISONCE_GO_PREFIX    where the Go test seeded keys for this script to read,
                         and reads back the keys this script leaves (handoff:*)

Prints one line per mode and "N passed, N failed"; exits 1 on any failure.
"""

import hashlib
import os
import re
import struct
import sys
import time
import traceback

import redis

URL = os.environ["REDIS_URL"]
SCRIPTS = os.environ["REDISONCE_SCRIPTS"]
FUNCTIONS = os.environ["REDISONCE_FUNCTIONS"]
PREFIX = os.environ["REDISONCE_PREFIX"]
GO_PREFIX = os.environ["REDISONCE_GO_PREFIX"]

# A payload no text decoding survives: every byte value, ':' and NUL among them.
BIN = bytes(range(256))
U64_MAX = 2**64 - 1
CODES = ("BADARG", "STALE_OWNER", "NOT_FOUND", "FULL", "MISMATCH", "CORRUPT")


class Fail(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Fail(what)


def eq(got, want, what):
    if got != want or type(got) is not type(want):
        raise Fail(f"{what}: got {got!r} ({type(got).__name__}), want {want!r} ({type(want).__name__})")


def is_int(v, what):
    # bool is an int subclass: demand int itself.
    check(type(v) is int, f"{what}: {v!r} is {type(v).__name__}, want int")
    return v


def is_bytes(v, what):
    check(type(v) is bytes, f"{what}: {v!r} is {type(v).__name__}, want bytes")
    return v


class Scripts:
    """The files the README lists: scripts/*.lua, named in scripts/SHA1SUMS."""

    def __init__(self, d):
        with open(os.path.join(d, "SHA1SUMS"), "rb") as f:
            self.sums_bytes = f.read()
        self.sha = {}
        self.src = {}
        self.read_only = {}
        for line in self.sums_bytes.decode().splitlines():
            sha, name = line.split()
            name = name.lstrip("*")
            check(name.endswith(".lua"), f"SHA1SUMS line {line!r}")
            with open(os.path.join(d, name), "rb") as f:
                src = f.read()
            n = name[: -len(".lua")]
            eq(hashlib.sha1(src).hexdigest(), sha, f"sha1 of {name} against SHA1SUMS")
            self.sha[n], self.src[n] = sha, src
            # The shebang says how to run it: flags=no-writes means EVALSHA_RO.
            shebang = src.split(b"\n", 1)[0]
            check(shebang.startswith(b"#!lua"), f"{name} starts with {shebang!r}")
            self.read_only[n] = b"no-writes" in shebang
        # The README: the library is redisonce_<first 12 hex of sha1(SHA1SUMS)>.
        self.library = "redisonce_" + hashlib.sha1(self.sums_bytes).hexdigest()[:12]


class Caller:
    """Runs one script on one key, by EVALSHA or by FCALL."""

    def __init__(self, r, scripts, mode):
        self.r, self.s, self.mode = r, scripts, mode

    def __call__(self, name, key, *argv):
        """key: one key, or a list of keys (the batch scripts: one hash slot)."""
        keys = key if isinstance(key, list) else [key]
        ro = self.s.read_only[name]
        if self.mode == "evalsha":
            f = self.r.evalsha_ro if ro else self.r.evalsha
            return f(self.s.sha[name], len(keys), *keys, *argv)
        f = self.r.fcall_ro if ro else self.r.fcall
        return f("redisonce_" + name, len(keys), *keys, *argv)

    def err(self, code, name, key, *argv):
        """The call must fail with `code detail`; returns the detail."""
        try:
            got = self(name, key, *argv)
        except redis.exceptions.ResponseError as e:
            msg = str(e)
            check(re.fullmatch(r"[A-Z_]+ \S[^\r\n]*", msg) is not None, f"{name}: error {msg!r} is not `CODE detail`")
            c, detail = msg.split(" ", 1)
            check(c in CODES, f"{name}: error code {c!r} is not one of {CODES}")
            eq(c, code, f"{name} {argv!r}: error code ({msg!r})")
            check("script:" not in detail, f"{name}: error {msg!r} carries Redis's script location")
            return detail
        raise Fail(f"{name} {argv!r}: replied {got!r}, want an error {code}")


def record(v, what, acquired=None):
    """Checks a record reply's shape and types; returns it as a dict."""
    check(type(v) is list, f"{what}: {v!r} is not a list")
    if acquired is not None:
        eq(len(v), 10, f"{what}: elements")
        eq(v[0], acquired, f"{what}: acquired")
        v = v[1:]
    eq(len(v), 9, f"{what}: elements")
    names = ("status", "payload", "created_ms", "updated_ms", "expires_ms", "lease_ms", "fence", "fp", "token")
    rec = dict(zip(names, v))
    for n in ("status", "payload", "fence", "fp", "token"):
        is_bytes(rec[n], f"{what}: {n}")
    for n in ("created_ms", "updated_ms", "expires_ms", "lease_ms"):
        is_int(rec[n], f"{what}: {n}")
        check(rec[n] == 0 or 10**12 <= rec[n] < 10**13, f"{what}: {n} {rec[n]} is not 0 or a 13-digit ms time")
    check(re.fullmatch(rb"[1-9][0-9]{0,18}", rec["fence"]) is not None, f"{what}: fence {rec['fence']!r}")
    return rec


def fence(v, what):
    """Checks a fence: a lease's (claim) or a record's, the server's clock in
    ns at µs precision, a 19-digit decimal string past 2^53; returns it as an
    int (Python's ints are exact: never a float)."""
    is_bytes(v, what)
    check(re.fullmatch(rb"[1-9][0-9]{18}", v) is not None, f"{what}: fence {v!r} is not 19 digits")
    return int(v)


def decode_record(v):
    """Decodes a record's raw value by hand, as docs/non-go.md's "Key layout per store" says
    (layout 1): "ro1 ", four big-endian doubles (created, updated, expires,
    lease ms), the fence and the status after a 1-byte length, fp and token
    after a 2-byte length, then the payload."""
    check(v[:4] == b"ro1 ", f"raw record {v[:8]!r}: not layout 1")
    created, updated, expires, lease = struct.unpack_from(">4d", v, 4)
    pos, fields = 36, []
    for size in (1, 1, 2, 2):  # fence, status, fp, token
        (n,) = struct.unpack_from(">B" if size == 1 else ">H", v, pos)
        fields.append(v[pos + size:pos + size + n])
        pos += size + n
    fence, status, fp, token = fields
    return {"status": status, "payload": v[pos:], "created_ms": int(created), "updated_ms": int(updated),
            "expires_ms": int(expires), "lease_ms": int(lease), "fence": fence, "fp": fp, "token": token}


def set_fence(r, k, fence):
    """Rewrites a record's fence by hand, keeping its expiry."""
    v = r.get(k)
    n = v[36]
    r.set(k, v[:36] + bytes([len(fence)]) + fence + v[37 + n:], keepttl=True)


def tail(v, what):
    """Checks unacked's reply; returns (epoch, generation, [(seq, id, payload)] by seq)."""
    check(type(v) is list, f"{what}: {v!r} is not a list")
    if not v:
        return None, None, []
    check(len(v) % 2 == 0, f"{what}: odd length {len(v)}")
    epoch = is_int(v[0], f"{what}: epoch")
    gen = is_bytes(v[1], f"{what}: generation")
    check(re.fullmatch(rb"0|[1-9][0-9]*", gen) is not None and int(gen) <= U64_MAX, f"{what}: generation {gen!r}")
    msgs = []
    for i in range(2, len(v), 2):
        mid, val = is_bytes(v[i], f"{what}: id"), is_bytes(v[i + 1], f"{what}: value")
        seq, sep, payload = val.partition(b":")
        check(sep == b":" and seq.isdigit(), f"{what}: value {val!r} is not <seq>:<payload>")
        msgs.append((int(seq), mid, payload))
    msgs.sort()
    return epoch, gen, msgs


def appended(v, what):
    check(type(v) is list and len(v) == 3, f"{what}: {v!r} is not {{seq, epoch, created}}")
    seq, epoch, created = (is_int(x, f"{what}: element") for x in v)
    check(10**15 <= epoch < 2**53, f"{what}: epoch {epoch} is not microseconds below 2^53")
    return seq, epoch, created


# ---- Claims -------------------------------------------------------------


def flow_claims(call, p, r):
    k = p + "claim:simple"
    eq(call("claim", k, "86400000", "1"), 1, "claim: first delivery")
    eq(call("claim", k, "86400000", "1"), 0, "claim: duplicate")
    eq(call("seen", k), 1, "seen after claim")
    eq(call("forget", k), 1, "forget")
    eq(call("forget", k), 0, "forget again")
    eq(call("seen", k), 0, "seen after forget")
    eq(call("claim", k, "0", "1"), 1, "claim without expiry")
    eq(r.pttl(k), -1, "PTTL of a claim with ttl_ms 0")

    # The safe consumer flow (what Claims.Do does): lease, extend, commit.
    k = p + "claim:do"
    # A lease won answers its fence (a string), a mark 1.
    f1 = fence(call("claim", k, "30000", "~tok-1"), "claim a lease")
    # In flight: the negative of the ms left on the holder's lease (at least 1).
    left = call("claim", k, "30000", "~tok-2")
    check(-30000 <= left < -20000, f"claim while in flight: {left}, want -(ms left on the lease)")
    left = call("claim", k, "86400000", "1")
    check(-30000 <= left < -20000, f"claim processed while in flight: {left}, want -(ms left on the lease)")
    eq(call("seen", k), 1, "seen while in flight")
    eq(call("extend", k, "tok-1", "30000"), 1, "extend own lease")
    eq(call("extend", k, "tok-2", "30000"), 0, "extend another's lease")
    eq(call("release", k, "tok-2"), 0, "release another's lease")
    eq(call("commit", k, "tok-2", "86400000"), -1, "commit another's lease")
    eq(call("commit", k, "tok-1", "86400000"), 1, "commit own lease")
    check(80_000_000 < r.pttl(k) <= 86_400_000, "PTTL after commit is about a day")
    eq(call("commit", k, "tok-1", "86400000"), 0, "commit again (already processed)")
    eq(call("claim", k, "30000", "~tok-3"), 0, "claim after commit: duplicate")
    eq(call("extend", k, "tok-1", "30000"), 0, "extend after commit: lost")

    # The effect failed: release, and the redelivery claims again.
    k = p + "claim:release"
    f2 = fence(call("claim", k, "30000", "~tok-1"), "claim a lease")
    check(f2 > f1, f"fence {f2} of a later lease is not above {f1}")
    eq(call("release", k, "tok-1"), 1, "release own lease")
    eq(call("release", k, "tok-1"), 0, "release again")
    eq(call("seen", k), 0, "seen after release")
    f3 = fence(call("claim", k, "30000", "~tok-2"), "redelivery claims again")
    check(f3 > f2, f"fence {f3} after a release is not above {f2}")

    # The lease expired and nobody took the id: commit writes "1" anyway.
    k = p + "claim:expired"
    fence(call("claim", k, "1", "~tok-1"), "claim a 1 ms lease")
    time.sleep(0.02)
    eq(call("extend", k, "tok-1", "30000"), 0, "extend an expired lease")
    eq(call("commit", k, "tok-1", "86400000"), 2, "commit after the lease expired")
    eq(call("claim", k, "86400000", "1"), 0, "claim after that commit")

    k = p + "claim:bad"
    call.err("BADARG", "claim", k, "soon", "1")
    call.err("BADARG", "claim", k, "0", "~tok")  # a lease needs a ttl
    call.err("BADARG", "claim", k, "-1", "1")
    call.err("BADARG", "claim", k, "60000", "1", "extra")
    call.err("BADARG", "extend", k, "tok", "0")
    call.err("BADARG", "seen", k, "extra")
    call.err("BADARG", "forget", k, "extra")
    eq(call("seen", k), 0, "nothing written by refused calls")

    # Go wrote a claim; this caller sees it. This caller leaves one for Go.
    eq(call("seen", GO_PREFIX + "claim"), 1, "seen of the Go store's claim")
    eq(call("claim", GO_PREFIX + "claim", "86400000", "1"), 0, "claim of the Go store's claim")
    eq(call("claim", p + "handoff:claim", "86400000", "1"), 1, "claim the handoff id")
    fence(call("claim", p + "handoff:lease", "60000", "~py-tok"), "lease the handoff id")


# ---- Outbox -------------------------------------------------------------


def flow_outbox(call, p, r):
    c = p + "conn:1"
    seq, epoch, created = appended(call("append", c, "msg-1", BIN, "3600000", "0"), "append msg-1")
    eq((seq, created), (1, 1), "append msg-1: seq, created")
    eq(appended(call("append", c, "msg-1", b"other", "3600000", "0"), "retry"), (1, epoch, 0), "append retry")
    eq(appended(call("append", c, "msg-2", b"b:c", "3600000", "2"), "append msg-2"), (2, epoch, 1), "append msg-2")
    call.err("FULL", "append", c, "msg-3", b"x", "3600000", "2")
    eq(appended(call("append", c, "msg-1", b"again", "3600000", "2"), "retry when full"), (1, epoch, 0), "retry while full")
    check(3_500_000 < r.pttl(c) <= 3_600_000, "PTTL of the connection after append with ttl_ms")

    e, gen, msgs = tail(call("unacked", c), "unacked")
    eq(e, epoch, "unacked epoch = append epoch")
    eq(gen, b"0", "unacked generation")
    eq(msgs, [(1, b"msg-1", BIN), (2, b"msg-2", b"b:c")], "unacked messages (the first payload kept, bytes exact)")

    # A new owner takes over at generation 2; the old one (1) is fenced off.
    eq(call("advance", c, "2", "3600000"), 1, "advance to 2")
    eq(call("advance", c, "2", "0"), 0, "advance to 2 again")
    eq(call("advance", c, "1", "0"), 0, "advance below the floor")
    detail = call.err("STALE_OWNER", "ack", c, "1", "msg-1")
    check(detail != "", "STALE_OWNER has a detail")
    eq(len(tail(call("unacked", c), "unacked")[2]), 2, "messages after a refused ack")
    eq(call("ack", c, "2", "msg-1"), 1, "ack msg-1 at 2")
    eq(call("ack", c, "2", "msg-1"), 0, "ack msg-1 again")
    eq(call("ack", c, "3", "msg-2", "msg-unknown"), 1, "ack msg-2 and an unknown id at 3 (raises the floor)")
    eq(tail(call("unacked", c), "unacked")[:3], (epoch, b"3", []), "drained tail keeps epoch and floor")
    call.err("STALE_OWNER", "ack", c, "2", "msg-9")

    # Generations are uint64 decimal strings, exact up to 2^64-1.
    eq(call("advance", c, str(U64_MAX - 1), "0"), 1, "advance to 2^64-2")
    eq(tail(call("unacked", c), "unacked")[1], str(U64_MAX - 1).encode(), "generation 2^64-2 exact")
    call.err("STALE_OWNER", "ack", c, str(U64_MAX - 2), "x")
    eq(call("ack", c, str(U64_MAX), "x"), 0, "ack at 2^64-1")
    eq(tail(call("unacked", c), "unacked")[1], str(U64_MAX).encode(), "generation 2^64-1 exact")
    call.err("BADARG", "ack", c, str(U64_MAX + 1), "x")
    call.err("BADARG", "ack", c, "01", "x")
    call.err("BADARG", "advance", c, "-1", "0")
    call.err("BADARG", "ack", c, "5")  # no msg_id
    call.err("BADARG", "append", c, "_seq", b"x", "0", "0")
    call.err("BADARG", "unacked", c, "extra")

    eq(call("drop", c), 1, "drop")
    eq(call("drop", c), 0, "drop again")
    eq(call("unacked", c), [], "unacked of a dropped connection")
    eq(call("ack", c, "5", "msg-1"), 0, "ack on an unknown connection")
    eq(r.exists(c), 0, "an ack creates no key")
    seq, epoch2, created = appended(call("append", c, "msg-1", b"new", "0", "0"), "append after drop")
    eq((seq, created), (1, 1), "a new incarnation starts at seq 1")
    check(epoch2 > epoch, f"new epoch {epoch2} > old {epoch}")
    eq(r.pttl(c), -1, "ttl_ms 0 on a new hash: no expiry")

    # A raised fence is never lost: advance before the first append.
    c = p + "conn:fence-first"
    eq(call("advance", c, "5", "3600000"), 1, "advance an absent connection")
    e, gen, msgs = tail(call("unacked", c), "unacked of a fence-only hash")
    eq((gen, msgs), (b"5", []), "fence-only hash")
    seq, epoch, _ = appended(call("append", c, "m1", b"p", "3600000", "0"), "append after advance")
    eq((seq, epoch), (1, e), "append after advance: seq 1 in the advance's incarnation")
    call.err("STALE_OWNER", "ack", c, "4", "m1")
    eq(call("ack", c, "5", "m1"), 1, "ack at the floor")
    c = p + "conn:advance-zero"
    eq(call("advance", c, "0", "0"), 0, "advance an absent connection to 0")
    eq(r.exists(c), 0, "advance to 0 creates nothing")

    # Seqs stay exact integers (the README: below 2^53) past 10^14.
    c = p + "conn:big-seq"
    appended(call("append", c, "m0", b"p", "0", "0"), "append m0")
    r.hset(c, "_seq", "99999999999998")  # the hash layout of the header: _seq, _gen, _epoch
    seq, e, created = appended(call("append", c, "m1", b"x", "0", "0"), "append at a big seq")
    eq((seq, created), (99999999999999, 1), "seq after 99999999999998")
    eq(appended(call("append", c, "m1", b"y", "0", "0"), "retry at a big seq"), (99999999999999, e, 0), "retry at a big seq")
    msgs = tail(call("unacked", c), "unacked at a big seq")[2]
    eq(msgs, [(1, b"m0", b"p"), (99999999999999, b"m1", b"x")], "unacked at a big seq")
    r.hset(c, "_seq", str(2**53 - 1))
    call.err("FULL", "append", c, "m2", b"z", "0", "0")

    # The Go store's connection, read here; one left for the Go store.
    e, gen, msgs = tail(call("unacked", GO_PREFIX + "conn"), "unacked of the Go store's connection")
    eq((gen, msgs), (b"0", [(1, b"m1", BIN)]), "the Go store's tail")
    c = p + "handoff:conn"
    appended(call("append", c, "m1", BIN, "0", "0"), "handoff append m1")
    appended(call("append", c, "m2", b"two", "0", "0"), "handoff append m2")
    eq(call("advance", c, "9", "0"), 1, "handoff advance")
    eq(call("ack", c, "9", "m2"), 1, "handoff ack m2")


# ---- Records ------------------------------------------------------------


def flow_records(call, p, r):
    k = p + "rec:1"
    a = record(call("acquire", k, "86400000", "tok-1", "sha256:ab12", "30000"), "acquire", acquired=1)
    eq((a["status"], a["payload"], a["fp"], a["token"]), (b"pending", b"", b"sha256:ab12", b"tok-1"), "new record")
    fa = fence(a["fence"], "new record")
    now = a["created_ms"]
    eq((a["updated_ms"], a["expires_ms"], a["lease_ms"]), (now, now + 86400000, now + 30000), "new record's times")
    b = record(call("acquire", k, "86400000", "tok-2", "sha256:ab12", "30000"), "acquire again", acquired=0)
    eq(b, dict(a, token=b""), "acquire again: the record, unchanged, without its token")
    call.err("MISMATCH", "acquire", k, "86400000", "tok-3", "sha256:ffff", "30000")
    g = record(call("get", k), "get")
    eq(g, dict(a, token=b""), "get: the record without its token")

    # The owner keeps working: a new lease and expiry, durations from TIME.
    # update replies 1 (0 only when a negative expires_in_ms deleted the
    # record); read what it wrote with get.
    eq(call("update", k, "tok-1", "lease_in_ms", "30000", "expires_in_ms", "3600000"), 1, "update lease and expiry")
    u = record(call("get", k), "get after update")
    check(u["updated_ms"] >= now, "updated_ms moves forward")
    eq((u["lease_ms"], u["expires_ms"]), (u["updated_ms"] + 30000, u["updated_ms"] + 3600000), "update: durations from now")
    eq((u["status"], u["token"], u["created_ms"], u["fence"]), (b"pending", b"", now, a["fence"]), "update keeps status and fence")
    check(3_500_000 < r.pttl(k) <= 3_600_000, "PTTL after expires_in_ms")
    eq(call("renew", k, "tok-1", "60000"), 1, "renew own lease")
    check(record(call("get", k), "get")["lease_ms"] >= u["updated_ms"] + 60000, "renew: lease 60 s from now")
    eq(call("renew", k, "tok-x", "60000"), -1, "renew another's lease")
    call.err("STALE_OWNER", "update", k, "tok-x", "status", "completed")
    call.err("BADARG", "update", k, "tok-1", "lease_ms", "30000")  # the old, absolute name
    call.err("BADARG", "update", k, "tok-1", "status")
    call.err("BADARG", "update", k, "tok-1", "status", "a", "status", "b")
    call.err("BADARG", "renew", k, "tok-1", "0")
    call.err("BADARG", "acquire", k, "86400000", "", "", "0")

    # Done: store the result (binary) fenced by the token; retries replay it.
    eq(call("update", k, "tok-1", "status", "completed", "payload", BIN), 1, "update completed")
    d = record(call("get", k), "get completed")
    eq((d["status"], d["payload"], d["lease_ms"], d["fence"], d["token"]), (b"completed", BIN, 0, a["fence"], b""), "completed record (binary payload exact)")
    raw = decode_record(r.get(k))
    eq(raw, dict(d, token=b"tok-1"), "the raw value decoded by hand: get's record, with its owner's token")
    eq(r.pexpiretime(k), raw["expires_ms"], "the record's expires_ms is its key's expiry")
    c = record(call("acquire", k, "86400000", "tok-5", "sha256:ab12", "30000"), "acquire completed", acquired=0)
    eq((c["status"], c["payload"], c["token"]), (b"completed", BIN, b""), "acquire of a completed record replays it")
    eq(call("renew", k, "tok-1", "60000"), -1, "renew a completed record")
    call.err("STALE_OWNER", "delete", k, "tok-x")
    eq(call("delete", k, "tok-1"), 1, "delete fenced by the owner's token")
    eq(call("get", k), None, "get after delete: nil")
    eq(call("delete", k, ""), 0, "delete absent")
    eq(call("renew", k, "tok-1", "60000"), 0, "renew absent")
    call.err("NOT_FOUND", "update", k, "", "status", "completed")

    # Takeover: a lease passes, a second caller takes the record, the first is fenced.
    k = p + "rec:takeover"
    a = record(call("acquire", k, "0", "tok-a", "", "1"), "acquire a 1 ms lease", acquired=1)
    check(fence(a["fence"], "new record") > fa, "a later record's fence (the clock's) is above an earlier one's")
    time.sleep(0.02)
    # acquired 2: taken over; the fence is above the first owner's.
    t = record(call("acquire", k, "0", "tok-b", "fp-b", "30000"), "takeover", acquired=2)
    eq((t["token"], t["fp"], t["expires_ms"]), (b"tok-b", b"fp-b", 0), "takeover: new owner")
    check(fence(t["fence"], "takeover") > int(a["fence"]), "takeover: a fence above the first owner's")
    call.err("STALE_OWNER", "update", k, "tok-a", "status", "completed")
    call.err("STALE_OWNER", "delete", k, "tok-a")
    eq(call("renew", k, "tok-a", "30000"), -1, "renew by the old owner")
    eq(call("update", k, "tok-b", "status", "completed", "payload", b"r"), 1, "new owner completes")
    d = record(call("get", k), "get the new owner's record")
    eq((d["status"], d["payload"], d["fence"]), (b"completed", b"r", t["fence"]), "new owner's record")
    eq(call("update", k, "", "status", "failed"), 1, "unfenced update")
    eq(record(call("get", k), "get after an unfenced update")["status"], b"failed", "unfenced update's status")
    eq(call("delete", k, ""), 1, "unconditional delete")

    # A negative expires_in_ms expires the record at once.
    k = p + "rec:expire"
    record(call("acquire", k, "0", "tok", "", "0"), "acquire without lease", acquired=1)
    eq(call("update", k, "tok", "expires_in_ms", "-1"), 0, "update expires_in_ms -1: 0, deleted")
    eq(call("get", k), None, "get after expiry")

    # Fences are decimal strings up to 9999999999999999999 (past 2^53); a
    # takeover gives max(fence + 1, the clock's): + 1 on a fence ahead of the clock.
    k = p + "rec:fence"
    record(call("acquire", k, "0", "tok-0", "", "1"), "acquire", acquired=1)
    set_fence(r, k, b"9999999999999999998")  # the record layout (docs/non-go.md, "Key layout per store")
    time.sleep(0.02)
    t = record(call("acquire", k, "0", "tok-1", "", "1"), "takeover to the largest fence", acquired=2)
    eq(t["fence"], b"9999999999999999999", "fence 9999999999999999999 exact")
    time.sleep(0.02)
    t = record(call("acquire", k, "0", "tok-2", "", "30000"), "no takeover past the largest fence", acquired=0)
    eq((t["fence"], t["token"]), (b"9999999999999999999", b""), "the largest fence is never taken over")

    # The Go store's record, read here; one left for the Go store.
    g = record(call("get", GO_PREFIX + "rec"), "get of the Go store's record")
    eq((g["status"], g["payload"], g["token"]), (b"completed", BIN, b""), "the Go store's record")
    k = p + "handoff:rec"
    a = record(call("acquire", k, "86400000", "py-tok", "", "60000"), "handoff acquire", acquired=1)
    eq(call("update", k, "py-tok", "status", "completed", "payload", BIN), 1, "handoff complete")


# ---- Batches: several keys in one call, all in ONE hash slot -----------


def appended_many(v, n, what):
    """Checks append_many's reply {epoch, seq1, created1, ...}; returns (epoch, [(seq, created)])."""
    check(type(v) is list and len(v) == 1 + 2 * n, f"{what}: {v!r} is not {{epoch, seq1, created1, ...}} for {n} messages")
    epoch = is_int(v[0], f"{what}: epoch")
    check(10**15 <= epoch < 2**53, f"{what}: epoch {epoch} is not microseconds below 2^53")
    return epoch, [(is_int(v[i], f"{what}: seq"), is_int(v[i + 1], f"{what}: created")) for i in range(1, len(v), 2)]


def flow_batch(call, p, r):
    # claim_many / seen_many take many keys of one hash slot: the ids share the
    # hash tag {batch} (a cluster refuses keys of several slots with CROSSSLOT).
    k1, k2, k3, k4, k5 = (p + "{batch}:m" + str(i) for i in range(1, 6))
    eq(call("claim", k2, "86400000", "1"), 1, "claim m2")
    fence(call("claim", k3, "30000", "~tok-3"), "lease m3")
    eq(call("claim_many", [k1, k2, k3, k1], "86400000", "1"), [1, 0, -1, 0],
       "claim_many: created, processed, in flight, and a key given twice (first wins)")
    check(80_000_000 < r.pttl(k1) <= 86_400_000, "PTTL of a claim_many key")
    eq(call("seen_many", [k1, k2, k3, k4]), [1, 1, 1, 0], "seen_many")
    m = call("claim_many", [k4], "30000", "~tok-4")
    check(type(m) is list and len(m) == 1, f"claim_many of a lease: {m!r}")
    fence(m[0], "claim_many of a lease")
    eq(call("commit", k4, "tok-4", "86400000"), 1, "commit a lease claim_many took")
    # A key of another type is a CORRUPT element, not an error reply: redis-py
    # puts the ResponseError in the list; the other keys are claimed.
    h = p + "{batch}:hash"
    r.hset(h, "x", "y")
    v = call("claim_many", [k5, h], "86400000", "1")
    check(type(v) is list and len(v) == 2, f"claim_many with a hash: {v!r}")
    eq(v[0], 1, "claim_many with a hash: the string key is claimed")
    check(isinstance(v[1], redis.exceptions.ResponseError) and str(v[1]).startswith("CORRUPT "),
          f"claim_many with a hash: element {v[1]!r} is not a CORRUPT error")
    eq(r.hgetall(h), {b"x": b"y"}, "the hash is untouched")
    call.err("BADARG", "claim_many", [k1, k2], "86400000")
    call.err("BADARG", "claim_many", [k1, k2], "0", "~tok")  # a lease needs a ttl
    call.err("BADARG", "seen_many", [k1, k2], "extra")
    g = GO_PREFIX + "{batch}:"
    eq(call("seen_many", [g + "1", g + "2", g + "3"]), [1, 1, 0], "seen_many of the Go store's ClaimMany")
    eq(call("claim_many", [p + "handoff:{batch}:1", p + "handoff:{batch}:2"], "86400000", "1"), [1, 1], "claim_many the handoff ids")

    # append_many: one connection, a burst of messages, all or none.
    c = p + "conn:burst"
    epoch, got = appended_many(call("append_many", c, "3600000", "3", "m1", BIN, "m2", b"two", "m1", b"dup"), 3, "append_many")
    eq(got, [(1, 1), (2, 1), (1, 0)], "append_many: seqs and created (m1 given twice: first wins)")
    e, got = appended_many(call("append_many", c, "3600000", "3", "m2", b"again", "m3", b"three"), 2, "append_many a retry and m3")
    eq((e, got), (epoch, [(2, 0), (3, 1)]), "append_many: a retry keeps its seq, m3 is new")
    call.err("FULL", "append_many", c, "3600000", "4", "m4", b"4", "m5", b"5")  # 2 new, 1 free: none
    call.err("BADARG", "append_many", c, "0", "0", "m9")  # half a pair
    call.err("BADARG", "append_many", c, "0", "0", "_seq", b"x")
    check(3_500_000 < r.pttl(c) <= 3_600_000, "PTTL of the connection after append_many")
    e, gen, msgs = tail(call("unacked", c), "unacked after append_many")
    eq((e, gen, msgs), (epoch, b"0", [(1, b"m1", BIN), (2, b"m2", b"two"), (3, b"m3", b"three")]), "unacked after append_many")
    eq(appended(call("append", c, "m4", b"p", "0", "0"), "append after append_many"), (4, epoch, 1), "append continues the seqs")
    e, gen, msgs = tail(call("unacked", GO_PREFIX + "burst"), "unacked of the Go store's AppendMany")
    eq((gen, msgs), (b"0", [(1, b"b1", BIN), (2, b"b2", b"two")]), "the Go store's burst")
    appended_many(call("append_many", p + "handoff:burst", "0", "0", "m1", BIN, "m2", b"two"), 2, "handoff append_many")


# ---- A key of the wrong type, and the library's gotchas ----------------


def flow_corrupt(call, p, r):
    s, h = p + "wrong:string", p + "wrong:hash"
    r.set(s, "x")
    r.hset(h, "x", "y")
    for name, key, argv in [
        ("claim", h, ("60000", "1")),
        ("commit", h, ("tok", "0")),
        ("extend", h, ("tok", "1000")),
        ("release", h, ("tok",)),
        ("append", s, ("m", b"p", "0", "0")),
        ("ack", s, ("1", "m")),
        ("advance", s, ("1", "0")),
        ("unacked", s, ()),
        ("append_many", s, ("0", "0", "m", b"p")),
        ("acquire", s, ("0", "tok", "", "0")),
        ("get", s, ()),
        ("update", s, ("tok", "status", "x")),
        ("renew", s, ("tok", "1000")),
        ("delete", s, ("tok",)),
    ]:
        call.err("CORRUPT", name, key, *argv)
    eq(r.get(s), b"x", "the string is untouched")
    eq(r.hgetall(h), {b"x": b"y"}, "the hash is untouched")


def flow_decode(url, scripts, p):
    """decode_responses=True breaks binary payloads, as the README warns."""
    k = p + "decode:rec"
    r = redis.Redis.from_url(url)
    r.evalsha(scripts.sha["acquire"], 1, k, "0", "tok", "", "0")
    r.evalsha(scripts.sha["update"], 1, k, "tok", "payload", BIN)
    rs = redis.Redis.from_url(url, decode_responses=True)
    try:
        rs.evalsha_ro(scripts.sha["get"], 1, k)
    except UnicodeDecodeError:
        return
    raise Fail("decode_responses=True decoded a binary payload: the README's warning is stale")


# ---- The KEYS rule, the order of checks, and edge statements --


# The README's Functions flags: allow-oom on these, no-writes on the
# read-only scripts, none on the others.
ALLOW_OOM = {"forget", "commit", "extend", "release", "ack", "drop", "delete", "renew", "complete", "coalesce_extend", "coalesce_finish",
             "extend_many", "commit_many", "release_many"}


def flow_edges(call, p, r):
    k, k2 = p + "edges:k", p + "edges:k2"
    # KEYS: exactly one key (1..500 for a batch), each 1..2048 bytes, checked
    # before anything else: BADARG, nothing written.
    for name, argv in [("claim", ("60000", "1")), ("seen", ()), ("forget", ()), ("append", ("m", b"p", "0", "0")),
                       ("acquire", ("0", "tok", "", "0")), ("get", ()), ("commit", ("tok", "0"))]:
        detail = call.err("BADARG", name, [], *argv)
        check("key" in detail, f"{name} with no key: detail {detail!r} does not speak of the keys")
        call.err("BADARG", name, [k, k2], *argv)
        call.err("BADARG", name, "x" * 2049, *argv)
        call.err("BADARG", name, "", *argv)
    eq(r.exists(k, k2, "x" * 2049, ""), 0, "a refused key count or length wrote nothing")
    long = p + "edges:" + "y" * (2048 - len(p) - len("edges:"))
    eq(call("claim", long, "60000", "1"), 1, "claim on a 2048-byte key")
    call.err("BADARG", "claim_many", [], "60000", "1")
    call.err("BADARG", "seen_many", [])
    many = [p + "{edges}:" + str(i) for i in range(501)]
    call.err("BADARG", "claim_many", many, "60000", "1")
    eq(r.exists(*many), 0, "claim_many of 501 keys wrote nothing")
    eq(call("claim_many", many[:500], "60000", "1"), [1] * 500, "claim_many of 500 keys")
    call.err("BADARG", "claim_many", [p + "{edges}:x", "{edges}" + "z" * 2049], "60000", "1")
    eq(r.exists(p + "{edges}:x"), 0, "a batch with a long key wrote nothing")

    # The order: BADARG before CORRUPT, NOT_FOUND, STALE_OWNER.
    s = p + "edges:string"
    r.set(s, "x")
    call.err("BADARG", "ack", s, "01", "m")  # a bad generation on a string key
    call.err("BADARG", "update", p + "edges:missing", "tok", "status")  # half a pair on a missing record
    call.err("BADARG", "delete", s, "t" * 257)
    # Durations have no sign.
    call.err("BADARG", "claim", k, "-1", "1")
    call.err("BADARG", "acquire", k, "0", "tok", "", "-5")
    call.err("BADARG", "append", k, "m", b"p", "-1", "0")
    eq(r.exists(k), 0, "refused durations wrote nothing")

    # seen_many answers 1 for a key of any type (no CORRUPT element).
    h = p + "{edges}:hash"
    r.hset(h, "f", "v")
    eq(call("seen_many", [h, p + "{edges}:none"]), [1, 0], "seen_many of a hash key and an absent one")
    # commit on a value other than "1" or the caller's lease: -1, unchanged.
    d = p + "edges:done"
    r.set(d, "done")
    eq(call("commit", d, "tok", "0"), -1, "commit on a value written by something else")
    eq(r.get(d), b"done", "commit left the value")
    eq(call("claim", d, "60000", "1"), 0, "claim counts that value processed")
    # renew answers 1 after the lease passed (no takeover yet); extend 0.
    rk = p + "edges:rec"
    record(call("acquire", rk, "0", "tok", "", "1"), "acquire a 1 ms lease", acquired=1)
    ck = p + "edges:claim"
    fence(call("claim", ck, "1", "~tok"), "claim a 1 ms lease")
    time.sleep(0.02)
    eq(call("renew", rk, "tok", "60000"), 1, "renew after the lease passed, before a takeover")
    eq(call("extend", ck, "tok", "60000"), 0, "extend after the lease ran out")
    eq(call("update", rk, "tok", "status", "completed"), 1, "update replies 1")


def flow_function_flags(r, scripts):
    """FUNCTION LIST shows the flags the README names."""
    libs = r.execute_command("FUNCTION", "LIST", "LIBRARYNAME", scripts.library)
    lib = [l for l in libs if dict(zip(l[::2], l[1::2])).get(b"library_name") == scripts.library.encode()]
    eq(len(lib), 1, "FUNCTION LIST of the library")
    fns = dict(zip(lib[0][::2], lib[0][1::2]))[b"functions"]
    got = {}
    for f in fns:
        f = dict(zip(f[::2], f[1::2]))
        got[f[b"name"].decode()] = sorted(x.decode() for x in f[b"flags"])
    want = {}
    for name in scripts.src:
        if scripts.read_only[name]:
            want["redisonce_" + name] = ["no-writes"]
        elif name in ALLOW_OOM:
            want["redisonce_" + name] = ["allow-oom"]
        else:
            want["redisonce_" + name] = []
    eq(got, want, "the functions' flags")


# ---- Coalescing -----------------------------------------------------------


def flow_coalesce(call, p, r):
    """docs/non-go.md, "Coalescing": trigger, extend, take, finish by hand."""
    args = ("30000", "0", "0", "0")  # lease_ms, debounce_ms, max_wait_ms, throttle_ms
    k = p + "coalesce:k"
    # Nobody holds the key: the caller runs its own payload, with a clock fence.
    got = call("coalesce_trigger", k, "tok-1", *args, b"\x00p1")
    eq(got[0], 1, "coalesce_trigger on an idle key runs")
    fence1 = got[1]
    check(is_bytes(fence1, "fence") and len(fence1) == 19 and fence1.isdigit(), f"fence {fence1!r}: 19 digits")
    # A run holds it: each trigger is kept as the next, a later one replacing it.
    for payload in (b"p2", b"p3"):
        got = call("coalesce_trigger", k, "tok-x", *args, payload)
        eq(got[0], 0, "coalesce_trigger while held is kept")
        check(20000 < got[1] <= 30000, f"wait_ms {got[1]}: the holder's lease left")
    eq(r.hget(k, "next"), b"p3", "the next is the last payload")
    eq(call("coalesce_extend", k, "tok-1", "30000"), 1, "coalesce_extend by the holder")
    eq(call("coalesce_extend", k, "tok-x", "30000"), 0, "coalesce_extend by another")
    eq(call("coalesce_take", k, "tok-4", "30000")[0], 0, "coalesce_take while held waits")
    # A stale fence (or token) can neither finish the run nor clear the next.
    call.err("STALE_OWNER", "coalesce_finish", k, "tok-1", "999", "done", "1000", "30000", "0")
    call.err("STALE_OWNER", "coalesce_finish", k, "tok-x", fence1, "done", "1000", "30000", "0")
    eq(r.hget(k, "next"), b"p3", "the next survives a stale finish")
    # The run ends: the next is due, so the same caller is handed it.
    got = call("coalesce_finish", k, "tok-1", fence1, "done", "1000", "30000", "0")
    eq([got[0], got[2]], [1, b"p3"], "coalesce_finish hands over the next")
    check(int(got[1]) > int(fence1), "the handed-over run's fence is above the first")
    eq(call("coalesce_finish", k, "tok-1", got[1], "done", "1000", "30000", "0"), [-1], "coalesce_finish: idle")
    eq(r.exists(k), 0, "an idle key is deleted")

    # A holder that died: once its lease passed, a take runs its payload again.
    k = p + "coalesce:dead"
    got = call("coalesce_trigger", k, "tok-1", "1", "0", "0", "0", b"x")
    eq(got[0], 1, "a run with a 1 ms lease")
    dead = got[1]
    time.sleep(0.02)
    got = call("coalesce_take", k, "tok-2", "30000")
    eq([got[0], got[2]], [1, b"x"], "coalesce_take of a dead holder's run")
    call.err("STALE_OWNER", "coalesce_finish", k, "tok-1", dead, "done", "1000", "30000", "0")
    eq(call("coalesce_finish", k, "tok-2", got[1], "retry", "1000", "30000", "0")[0], 0, "a failed run is kept for a retry")
    eq(r.hget(k, "next"), b"x", "the retried payload is the next")

    # Debounce: kept until the key was quiet for debounce_ms.
    k = p + "coalesce:debounce"
    got = call("coalesce_trigger", k, "tok-1", "30000", "50", "1000", "0", b"d")
    check(got[0] == 0 and 0 < got[1] <= 50, f"a debounced trigger is kept: {got!r}")
    eq(call("coalesce_take", k, "tok-2", "30000")[0], 0, "coalesce_take before the debounce passed")
    time.sleep(0.08)
    got = call("coalesce_take", k, "tok-2", "30000")
    eq([got[0], got[2]], [1, b"d"], "coalesce_take after the debounce")

    k = p + "coalesce:bad"
    call.err("BADARG", "coalesce_trigger", k, "tok", "0", "0", "0", "0", b"p")
    call.err("BADARG", "coalesce_trigger", k, "tok", "1000", "-1", "0", "0", b"p")
    call.err("BADARG", "coalesce_finish", k, "tok", "1", "ok", "0", "1000", "0")
    eq(r.exists(k), 0, "nothing written by refused calls")
    eq(call("coalesce_take", k, "tok", "30000"), [-1], "coalesce_take of nothing")


# ---- main ---------------------------------------------------------------


def main():
    scripts = Scripts(SCRIPTS)
    r = redis.Redis.from_url(URL)  # bytes replies: binary payloads intact
    passed, failed = 0, 0

    # SCRIPT LOAD each file byte for byte: the reply is its SHA1SUMS line.
    for name, src in scripts.src.items():
        eq(r.script_load(src), scripts.sha[name], f"SCRIPT LOAD {name}.lua")
    # FUNCTION LOAD REPLACE of `redisonce functions`'s output: its name is
    # redisonce_<version> as the README forms it.
    with open(FUNCTIONS, "rb") as f:
        lib = f.read()
    eq(r.function_load(lib, replace=True), scripts.library.encode(), "FUNCTION LOAD REPLACE: the library's name")

    for mode in ("evalsha", "fcall"):
        call = Caller(r, scripts, mode)
        p = f"{PREFIX}{mode}:"
        for flow in (flow_claims, flow_outbox, flow_records, flow_batch, flow_corrupt, flow_edges, flow_coalesce):
            try:
                flow(call, p, r)
                passed += 1
            except Exception as e:  # noqa: BLE001 - report and go on with the next flow
                failed += 1
                print(f"FAIL redis-py {mode} {flow.__name__}: {e}", file=sys.stderr)
                if not isinstance(e, Fail):
                    traceback.print_exc()
        # The FCALL_RO flags: a write function is refused by FCALL_RO.
        if mode == "fcall":
            try:
                r.fcall_ro("redisonce_claim", 1, p + "ro-probe", "0", "1")
                failed += 1
                print("FAIL redis-py fcall: FCALL_RO ran a write function", file=sys.stderr)
            except redis.exceptions.ResponseError:
                passed += 1
    try:
        flow_function_flags(r, scripts)
        passed += 1
    except Exception as e:  # noqa: BLE001
        failed += 1
        print(f"FAIL redis-py flow_function_flags: {e}", file=sys.stderr)
    try:
        flow_decode(URL, scripts, PREFIX)
        passed += 1
    except Exception as e:  # noqa: BLE001
        failed += 1
        print(f"FAIL redis-py flow_decode: {e}", file=sys.stderr)

    print(f"redis-py {redis.__version__}: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
