// Every flow of every redisonce store, driven from a JavaScript client with
// only what docs/non-go.md ("Key layout and scripts") and the
// script headers say: SCRIPT LOAD of each file byte for byte + EVALSHA /
// EVALSHA_RO, then FCALL / FCALL_RO after FUNCTION LOAD REPLACE of the
// Functions library. The same flows as flows.py, for ioredis.mjs,
// node-redis.mjs (v5) and node-redis-v4.mjs, which each give a client adapter:
//
//   name                       e.g. "ioredis 5.9.2"
//   loadScript(buf)            SCRIPT LOAD, the reply (the SHA1)
//   loadFunctions(buf)         FUNCTION LOAD REPLACE, the reply (the name)
//   run(mode, fn, keys, args, buffers)
//                              mode "evalsha": fn is {sha, ro}; mode "fcall":
//                              fn is {name, ro}; keys: an array (one key, or
//                              a batch script's keys); buffers: bulk strings
//                              as Buffers
//   isReplyError(e)            e is the client's error reply
//   bigintArgs                 true when a BigInt argument is sent as its digits
//   send(args)                 any other command (checks and seeding only)
//   close()
//
// Checked: every reply's exact type (integers are numbers, strings strings or
// Buffers, arrays, nil null), error replies `CODE detail` (and the CORRUPT
// element of a batch reply: the client's error object inside the array), binary payloads
// round-tripping, generations and fences near 2^64 as decimal strings.
// Environment: REDIS_URL, REDISONCE_SCRIPTS, REDISONCE_FUNCTIONS,
// REDISONCE_PREFIX, REDISONCE_GO_PREFIX (see flows.py).

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const env = (k) => {
  const v = process.env[k];
  if (v === undefined) throw new Error(`${k} is not set`);
  return v;
};

// A payload no text decoding survives: every byte value, ':' and NUL among them.
const BIN = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
const U64_MAX = 2n ** 64n - 1n;
const CODES = ['BADARG', 'STALE_OWNER', 'NOT_FOUND', 'FULL', 'MISMATCH', 'CORRUPT'];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The files the README lists: scripts/*.lua, named in scripts/SHA1SUMS.
function readScripts(dir) {
  const sums = readFileSync(join(dir, 'SHA1SUMS'));
  const scripts = {};
  for (const line of sums.toString().split('\n').filter(Boolean)) {
    const [sha, file] = line.split(/\s+\*?/);
    assert.match(file, /^[a-z_]+\.lua$/, `SHA1SUMS line ${line}`);
    const src = readFileSync(join(dir, file)); // a Buffer: byte for byte
    assert.equal(createHash('sha1').update(src).digest('hex'), sha, `sha1 of ${file}`);
    const shebang = src.subarray(0, src.indexOf(10)).toString();
    assert.match(shebang, /^#!lua/, `${file}'s shebang`);
    // The shebang says how to run it: flags=no-writes means EVALSHA_RO / FCALL_RO.
    scripts[file.slice(0, -4)] = { sha, src, ro: shebang.includes('no-writes') };
  }
  // The README: the library is redisonce_<first 12 hex of sha1(SHA1SUMS)>.
  const library = 'redisonce_' + createHash('sha1').update(sums).digest('hex').slice(0, 12);
  return { scripts, library };
}

const isInt = (v, what) => {
  assert.ok(typeof v === 'number' && Number.isSafeInteger(v), `${what}: ${String(v)} (${typeof v}) is not an exact integer number`);
  return v;
};

// Caller runs one script by EVALSHA or FCALL on one key, or on an array of
// keys (the batch scripts); string replies come back as strings (call) or
// Buffers (callB). Arguments are strings or Buffers.
class Caller {
  constructor(client, scripts, mode) {
    Object.assign(this, { client, scripts, mode });
  }
  fn(name) {
    const s = this.scripts[name];
    assert.ok(s, `no script ${name}`);
    return this.mode === 'evalsha' ? { sha: s.sha, ro: s.ro } : { name: `redisonce_${name}`, ro: s.ro };
  }
  call(name, key, ...args) {
    return this.client.run(this.mode, this.fn(name), [key].flat(), args, false);
  }
  callB(name, key, ...args) {
    return this.client.run(this.mode, this.fn(name), [key].flat(), args, true);
  }
  // err: the call must fail with `code detail`; returns the detail.
  async err(code, name, key, ...args) {
    let got;
    try {
      got = await this.call(name, key, ...args);
    } catch (e) {
      assert.ok(this.client.isReplyError(e), `${name}: ${e} is not the client's error reply`);
      const msg = e.message;
      assert.match(msg, /^[A-Z_]+ \S[^\r\n]*$/, `${name}: error ${JSON.stringify(msg)} is not \`CODE detail\``);
      const [c] = msg.split(' ', 1);
      assert.ok(CODES.includes(c), `${name}: error code ${c} is not one of ${CODES}`);
      assert.equal(c, code, `${name} ${JSON.stringify(args)}: error ${JSON.stringify(msg)}`);
      assert.ok(!msg.includes('script:'), `${name}: error ${msg} carries Redis's script location`);
      return msg.slice(c.length + 1);
    }
    assert.fail(`${name} ${JSON.stringify(args)}: replied ${JSON.stringify(got)}, want an error ${code}`);
  }
}

// record checks a record reply's shape and types (strings or Buffers as
// asked); returns it as an object.
function record(v, what, { acquired, buffers = false } = {}) {
  assert.ok(Array.isArray(v), `${what}: ${v} is not an array`);
  if (acquired !== undefined) {
    assert.equal(v.length, 10, `${what}: elements`);
    assert.equal(v[0], acquired, `${what}: acquired`);
    v = v.slice(1);
  }
  assert.equal(v.length, 9, `${what}: elements`);
  const names = ['status', 'payload', 'created_ms', 'updated_ms', 'expires_ms', 'lease_ms', 'fence', 'fp', 'token'];
  const rec = Object.fromEntries(names.map((n, i) => [n, v[i]]));
  for (const n of ['status', 'payload', 'fence', 'fp', 'token']) {
    assert.ok(buffers ? Buffer.isBuffer(rec[n]) : typeof rec[n] === 'string', `${what}: ${n} is ${typeof rec[n]}`);
  }
  for (const n of ['created_ms', 'updated_ms', 'expires_ms', 'lease_ms']) {
    isInt(rec[n], `${what}: ${n}`);
    assert.ok(rec[n] === 0 || (rec[n] >= 1e12 && rec[n] < 1e13), `${what}: ${n} ${rec[n]} is not 0 or a 13-digit ms time`);
  }
  assert.match(rec.fence.toString(), /^[1-9][0-9]{0,18}$/, `${what}: fence`);
  return rec;
}

// tail checks unacked's reply (asked with Buffers); returns
// {epoch, gen (a string), msgs: [[seq, id, payload Buffer]] by seq}.
function tail(v, what) {
  assert.ok(Array.isArray(v), `${what}: not an array`);
  if (v.length === 0) return { epoch: null, gen: null, msgs: [] };
  assert.equal(v.length % 2, 0, `${what}: odd length`);
  const epoch = isInt(v[0], `${what}: epoch`);
  assert.ok(Buffer.isBuffer(v[1]), `${what}: generation is ${typeof v[1]}`);
  const gen = v[1].toString();
  assert.match(gen, /^(0|[1-9][0-9]*)$/, `${what}: generation`);
  assert.ok(BigInt(gen) <= U64_MAX, `${what}: generation ${gen} above 2^64-1`);
  const msgs = [];
  for (let i = 2; i < v.length; i += 2) {
    assert.ok(Buffer.isBuffer(v[i]) && Buffer.isBuffer(v[i + 1]), `${what}: id and value are Buffers`);
    const val = v[i + 1];
    const colon = val.indexOf(':');
    const seq = val.subarray(0, colon).toString();
    assert.ok(colon > 0 && /^[0-9]+$/.test(seq), `${what}: value is not <seq>:<payload>`);
    msgs.push([Number(seq), v[i].toString(), val.subarray(colon + 1)]);
  }
  msgs.sort((a, b) => a[0] - b[0]);
  return { epoch, gen, msgs };
}

function appended(v, what) {
  assert.ok(Array.isArray(v) && v.length === 3, `${what}: ${JSON.stringify(v)} is not {seq, epoch, created}`);
  const [seq, epoch, created] = v.map((x) => isInt(x, `${what}: element`));
  assert.ok(epoch >= 1e15 && epoch < 2 ** 53, `${what}: epoch ${epoch} is not microseconds below 2^53`);
  return [seq, epoch, created];
}

const pttl = (client, key) => client.send(['PTTL', key]);

// ---- Claims -------------------------------------------------------------

async function flowClaims(c, p, client, goPrefix) {
  let k = p + 'claim:simple';
  assert.equal(await c.call('claim', k, '86400000', '1'), 1, 'claim: first delivery');
  assert.equal(await c.call('claim', k, '86400000', '1'), 0, 'claim: duplicate');
  assert.equal(await c.call('seen', k), 1, 'seen after claim');
  assert.equal(await c.call('forget', k), 1, 'forget');
  assert.equal(await c.call('forget', k), 0, 'forget again');
  assert.equal(await c.call('seen', k), 0, 'seen after forget');
  assert.equal(await c.call('claim', k, '0', '1'), 1, 'claim without expiry');
  assert.equal(await pttl(client, k), -1, 'PTTL of a claim with ttl_ms 0');

  // The safe consumer flow (what Claims.Do does): lease, extend, commit.
  k = p + 'claim:do';
  assert.equal(await c.call('claim', k, '30000', '~tok-1'), 1, 'claim a lease');
  // In flight: the negative of the ms left on the holder's lease (at least 1).
  for (const [value, what] of [['~tok-2', 'claim while in flight'], ['1', 'claim processed while in flight']]) {
    const n = Number(await c.call('claim', k, value === '1' ? '86400000' : '30000', value));
    assert.ok(n >= -30000 && n < -20000, `${what}: ${n}, want -(ms left on the lease)`);
  }
  assert.equal(await c.call('seen', k), 1, 'seen while in flight');
  assert.equal(await c.call('extend', k, 'tok-1', '30000'), 1, 'extend own lease');
  assert.equal(await c.call('extend', k, 'tok-2', '30000'), 0, "extend another's lease");
  assert.equal(await c.call('release', k, 'tok-2'), 0, "release another's lease");
  assert.equal(await c.call('commit', k, 'tok-2', '86400000'), -1, "commit another's lease");
  assert.equal(await c.call('commit', k, 'tok-1', '86400000'), 1, 'commit own lease');
  const left = await pttl(client, k);
  assert.ok(left > 80_000_000 && left <= 86_400_000, `PTTL after commit ${left}: about a day`);
  assert.equal(await c.call('commit', k, 'tok-1', '86400000'), 0, 'commit again (already processed)');
  assert.equal(await c.call('claim', k, '30000', '~tok-3'), 0, 'claim after commit: duplicate');
  assert.equal(await c.call('extend', k, 'tok-1', '30000'), 0, 'extend after commit: lost');

  // The effect failed: release, and the redelivery claims again.
  k = p + 'claim:release';
  assert.equal(await c.call('claim', k, '30000', '~tok-1'), 1, 'claim a lease');
  assert.equal(await c.call('release', k, 'tok-1'), 1, 'release own lease');
  assert.equal(await c.call('release', k, 'tok-1'), 0, 'release again');
  assert.equal(await c.call('seen', k), 0, 'seen after release');
  assert.equal(await c.call('claim', k, '30000', '~tok-2'), 1, 'redelivery claims again');

  // The lease expired and nobody took the id: commit writes "1" anyway.
  k = p + 'claim:expired';
  assert.equal(await c.call('claim', k, '1', '~tok-1'), 1, 'claim a 1 ms lease');
  await sleep(20);
  assert.equal(await c.call('extend', k, 'tok-1', '30000'), 0, 'extend an expired lease');
  assert.equal(await c.call('commit', k, 'tok-1', '86400000'), 2, 'commit after the lease expired');
  assert.equal(await c.call('claim', k, '86400000', '1'), 0, 'claim after that commit');

  k = p + 'claim:bad';
  await c.err('BADARG', 'claim', k, 'soon', '1');
  await c.err('BADARG', 'claim', k, '0', '~tok'); // a lease needs a ttl
  await c.err('BADARG', 'claim', k, '-1', '1');
  await c.err('BADARG', 'claim', k, '60000', '1', 'extra');
  await c.err('BADARG', 'extend', k, 'tok', '0');
  await c.err('BADARG', 'seen', k, 'extra');
  await c.err('BADARG', 'forget', k, 'extra');
  assert.equal(await c.call('seen', k), 0, 'nothing written by refused calls');

  // Go wrote a claim; this caller sees it. This caller leaves one for Go.
  assert.equal(await c.call('seen', goPrefix + 'claim'), 1, "seen of the Go store's claim");
  assert.equal(await c.call('claim', goPrefix + 'claim', '86400000', '1'), 0, "claim of the Go store's claim");
  assert.equal(await c.call('claim', p + 'handoff:claim', '86400000', '1'), 1, 'claim the handoff id');
  assert.equal(await c.call('claim', p + 'handoff:lease', '60000', '~js-tok'), 1, 'lease the handoff id');
}

// ---- Outbox -------------------------------------------------------------

async function flowOutbox(c, p, client, goPrefix) {
  let k = p + 'conn:1';
  let [seq, epoch, created] = appended(await c.call('append', k, 'msg-1', BIN, '3600000', '0'), 'append msg-1');
  assert.deepEqual([seq, created], [1, 1], 'append msg-1: seq, created');
  assert.deepEqual(appended(await c.call('append', k, 'msg-1', 'other', '3600000', '0'), 'retry'), [1, epoch, 0], 'append retry');
  assert.deepEqual(appended(await c.call('append', k, 'msg-2', 'b:c', '3600000', '2'), 'msg-2'), [2, epoch, 1], 'append msg-2');
  await c.err('FULL', 'append', k, 'msg-3', 'x', '3600000', '2');
  assert.deepEqual(appended(await c.call('append', k, 'msg-1', 'again', '3600000', '2'), 'retry when full'), [1, epoch, 0], 'retry while full');
  const left = await pttl(client, k);
  assert.ok(left > 3_500_000 && left <= 3_600_000, `PTTL ${left} after append with ttl_ms`);

  let t = tail(await c.callB('unacked', k), 'unacked');
  assert.equal(t.epoch, epoch, 'unacked epoch = append epoch');
  assert.equal(t.gen, '0', 'unacked generation');
  assert.deepEqual(t.msgs, [[1, 'msg-1', BIN], [2, 'msg-2', Buffer.from('b:c')]], 'unacked messages (the first payload kept, bytes exact)');
  // Without Buffer replies the payload is decoded as UTF-8 and its bytes are lost.
  const asText = await c.call('unacked', k);
  assert.ok(asText.every((x, i) => (i === 0 ? typeof x === 'number' : typeof x === 'string')), 'string replies');
  const text = asText[asText.indexOf('msg-1') + 1];
  assert.notDeepEqual(Buffer.from(text), Buffer.concat([Buffer.from('1:'), BIN]), 'a string reply mangles a binary payload (the README warns)');

  // A new owner takes over at generation 2; the old one (1) is fenced off.
  assert.equal(await c.call('advance', k, '2', '3600000'), 1, 'advance to 2');
  assert.equal(await c.call('advance', k, '2', '0'), 0, 'advance to 2 again');
  assert.equal(await c.call('advance', k, '1', '0'), 0, 'advance below the floor');
  assert.notEqual(await c.err('STALE_OWNER', 'ack', k, '1', 'msg-1'), '', 'STALE_OWNER has a detail');
  assert.equal(tail(await c.callB('unacked', k), 'unacked').msgs.length, 2, 'messages after a refused ack');
  assert.equal(await c.call('ack', k, '2', 'msg-1'), 1, 'ack msg-1 at 2');
  assert.equal(await c.call('ack', k, '2', 'msg-1'), 0, 'ack msg-1 again');
  assert.equal(await c.call('ack', k, '3', 'msg-2', 'msg-unknown'), 1, 'ack msg-2 and an unknown id at 3 (raises the floor)');
  t = tail(await c.callB('unacked', k), 'unacked');
  assert.deepEqual([t.epoch, t.gen, t.msgs], [epoch, '3', []], 'drained tail keeps epoch and floor');
  await c.err('STALE_OWNER', 'ack', k, '2', 'msg-9');

  // Generations are uint64 decimal strings: send String(BigInt), compare as BigInt.
  assert.equal(await c.call('advance', k, String(U64_MAX - 1n), '0'), 1, 'advance to 2^64-2');
  assert.equal(BigInt(tail(await c.callB('unacked', k), 'unacked').gen), U64_MAX - 1n, 'generation 2^64-2 exact');
  await c.err('STALE_OWNER', 'ack', k, String(U64_MAX - 2n), 'x');
  assert.equal(await c.call('ack', k, String(U64_MAX), 'x'), 0, 'ack at 2^64-1');
  assert.equal(tail(await c.callB('unacked', k), 'unacked').gen, '18446744073709551615', 'generation 2^64-1 exact');
  if (client.bigintArgs) {
    assert.equal(await c.call('ack', k, U64_MAX, 'x'), 0, 'ack at 2^64-1 given as a BigInt');
  }
  await c.err('BADARG', 'ack', k, String(U64_MAX + 1n), 'x');
  // A JS number above 2^53 loses digits: String(Number(2^64-2)) is "18446744073709552000".
  await c.err('BADARG', 'ack', k, String(Number(U64_MAX - 1n)), 'x');
  await c.err('BADARG', 'ack', k, '01', 'x');
  await c.err('BADARG', 'advance', k, '-1', '0');
  await c.err('BADARG', 'ack', k, '5'); // no msg_id
  await c.err('BADARG', 'append', k, '_seq', 'x', '0', '0');
  await c.err('BADARG', 'unacked', k, 'extra');

  assert.equal(await c.call('drop', k), 1, 'drop');
  assert.equal(await c.call('drop', k), 0, 'drop again');
  assert.deepEqual(await c.call('unacked', k), [], 'unacked of a dropped connection');
  assert.equal(await c.call('ack', k, '5', 'msg-1'), 0, 'ack on an unknown connection');
  assert.equal(await client.send(['EXISTS', k]), 0, 'an ack creates no key');
  let epoch2;
  [seq, epoch2, created] = appended(await c.call('append', k, 'msg-1', 'new', '0', '0'), 'append after drop');
  assert.deepEqual([seq, created], [1, 1], 'a new incarnation starts at seq 1');
  assert.ok(epoch2 > epoch, `new epoch ${epoch2} > old ${epoch}`);
  assert.equal(await pttl(client, k), -1, 'ttl_ms 0 on a new hash: no expiry');

  // A raised fence is never lost: advance before the first append.
  k = p + 'conn:fence-first';
  assert.equal(await c.call('advance', k, '5', '3600000'), 1, 'advance an absent connection');
  t = tail(await c.callB('unacked', k), 'unacked of a fence-only hash');
  assert.deepEqual([t.gen, t.msgs], ['5', []], 'fence-only hash');
  assert.deepEqual(appended(await c.call('append', k, 'm1', 'p', '3600000', '0'), 'append after advance').slice(0, 2), [1, t.epoch],
    "append after advance: seq 1 in the advance's incarnation");
  await c.err('STALE_OWNER', 'ack', k, '4', 'm1');
  assert.equal(await c.call('ack', k, '5', 'm1'), 1, 'ack at the floor');
  k = p + 'conn:advance-zero';
  assert.equal(await c.call('advance', k, '0', '0'), 0, 'advance an absent connection to 0');
  assert.equal(await client.send(['EXISTS', k]), 0, 'advance to 0 creates nothing');

  // Seqs stay exact integers (the README: below 2^53) past 10^14.
  k = p + 'conn:big-seq';
  appended(await c.call('append', k, 'm0', 'p', '0', '0'), 'append m0');
  await client.send(['HSET', k, '_seq', '99999999999998']); // the hash layout of the header
  let e;
  [seq, e, created] = appended(await c.call('append', k, 'm1', 'x', '0', '0'), 'append at a big seq');
  assert.deepEqual([seq, created], [99999999999999, 1], 'seq after 99999999999998');
  assert.deepEqual(appended(await c.call('append', k, 'm1', 'y', '0', '0'), 'retry'), [99999999999999, e, 0], 'retry at a big seq');
  assert.deepEqual(tail(await c.callB('unacked', k), 'unacked').msgs,
    [[1, 'm0', Buffer.from('p')], [99999999999999, 'm1', Buffer.from('x')]], 'unacked at a big seq');
  await client.send(['HSET', k, '_seq', String(2 ** 53 - 1)]);
  await c.err('FULL', 'append', k, 'm2', 'z', '0', '0');

  // The Go store's connection, read here; one left for the Go store.
  t = tail(await c.callB('unacked', goPrefix + 'conn'), "unacked of the Go store's connection");
  assert.deepEqual([t.gen, t.msgs], ['0', [[1, 'm1', BIN]]], "the Go store's tail");
  k = p + 'handoff:conn';
  appended(await c.call('append', k, 'm1', BIN, '0', '0'), 'handoff append m1');
  appended(await c.call('append', k, 'm2', 'two', '0', '0'), 'handoff append m2');
  assert.equal(await c.call('advance', k, '9', '0'), 1, 'handoff advance');
  assert.equal(await c.call('ack', k, '9', 'm2'), 1, 'handoff ack m2');
}

// ---- Records ------------------------------------------------------------

async function flowRecords(c, p, client, goPrefix) {
  let k = p + 'rec:1';
  const a = record(await c.call('acquire', k, '86400000', 'tok-1', 'sha256:ab12', '30000'), 'acquire', { acquired: 1 });
  assert.deepEqual([a.status, a.payload, a.fence, a.fp, a.token], ['pending', '', '1', 'sha256:ab12', 'tok-1'], 'new record');
  const now = a.created_ms;
  assert.deepEqual([a.updated_ms, a.expires_ms, a.lease_ms], [now, now + 86400000, now + 30000], "new record's times");
  const b = record(await c.call('acquire', k, '86400000', 'tok-2', 'sha256:ab12', '30000'), 'acquire again', { acquired: 0 });
  assert.deepEqual(b, { ...a, token: '' }, 'acquire again: the record, unchanged, without its token');
  await c.err('MISMATCH', 'acquire', k, '86400000', 'tok-3', 'sha256:ffff', '30000');
  assert.deepEqual(record(await c.call('get', k), 'get'), { ...a, token: '' }, 'get: the record without its token');

  // The owner keeps working: a new lease and expiry, durations from TIME.
  // update replies 1 (0 only when a negative expires_in_ms deleted the
  // record); read what it wrote with get.
  assert.equal(await c.call('update', k, 'tok-1', 'lease_in_ms', '30000', 'expires_in_ms', '3600000'), 1, 'update lease and expiry');
  const u = record(await c.call('get', k), 'get after update');
  assert.ok(u.updated_ms >= now, 'updated_ms moves forward');
  assert.deepEqual([u.lease_ms, u.expires_ms], [u.updated_ms + 30000, u.updated_ms + 3600000], 'update: durations from now');
  assert.deepEqual([u.status, u.token, u.created_ms, u.fence], ['pending', '', now, '1'], 'update keeps status and fence');
  const left = await pttl(client, k);
  assert.ok(left > 3_500_000 && left <= 3_600_000, `PTTL ${left} after expires_in_ms`);
  assert.equal(await c.call('renew', k, 'tok-1', '60000'), 1, 'renew own lease');
  assert.ok(record(await c.call('get', k), 'get').lease_ms >= u.updated_ms + 60000, 'renew: lease 60 s from now');
  assert.equal(await c.call('renew', k, 'tok-x', '60000'), -1, "renew another's lease");
  await c.err('STALE_OWNER', 'update', k, 'tok-x', 'status', 'completed');
  await c.err('BADARG', 'update', k, 'tok-1', 'lease_ms', '30000'); // the old, absolute name
  await c.err('BADARG', 'update', k, 'tok-1', 'status');
  await c.err('BADARG', 'update', k, 'tok-1', 'status', 'a', 'status', 'b');
  await c.err('BADARG', 'renew', k, 'tok-1', '0');
  await c.err('BADARG', 'acquire', k, '86400000', '', '', '0');

  // Done: store the result (binary) fenced by the token; retries replay it.
  assert.equal(await c.call('update', k, 'tok-1', 'status', 'completed', 'payload', BIN), 1, 'update completed');
  const d = record(await c.callB('get', k), 'get completed', { buffers: true });
  assert.deepEqual([d.status, d.payload, d.lease_ms, d.fence, d.token],
    [Buffer.from('completed'), BIN, 0, Buffer.from('1'), Buffer.from('')], 'completed record (binary payload exact)');
  assert.notDeepEqual(Buffer.from(record(await c.call('get', k), 'get as text').payload), BIN, 'a string reply mangles a binary payload');
  const r = record(await c.callB('acquire', k, '86400000', 'tok-5', 'sha256:ab12', '30000'), 'acquire completed', { acquired: 0, buffers: true });
  assert.deepEqual([r.status.toString(), r.payload, r.token.toString()], ['completed', BIN, ''], 'acquire of a completed record replays it');
  assert.equal(await c.call('renew', k, 'tok-1', '60000'), -1, 'renew a completed record');
  await c.err('STALE_OWNER', 'delete', k, 'tok-x');
  assert.equal(await c.call('delete', k, 'tok-1'), 1, "delete fenced by the owner's token");
  assert.equal(await c.call('get', k), null, 'get after delete: nil');
  assert.equal(await c.call('delete', k, ''), 0, 'delete absent');
  assert.equal(await c.call('renew', k, 'tok-1', '60000'), 0, 'renew absent');
  await c.err('NOT_FOUND', 'update', k, '', 'status', 'completed');

  // Takeover: a lease passes, a second caller takes the record, the first is fenced.
  k = p + 'rec:takeover';
  record(await c.call('acquire', k, '0', 'tok-a', '', '1'), 'acquire a 1 ms lease', { acquired: 1 });
  await sleep(20);
  let t = record(await c.call('acquire', k, '0', 'tok-b', 'fp-b', '30000'), 'takeover', { acquired: 1 });
  assert.deepEqual([t.fence, t.token, t.fp, t.expires_ms], ['2', 'tok-b', 'fp-b', 0], 'takeover: fence 2, new owner');
  await c.err('STALE_OWNER', 'update', k, 'tok-a', 'status', 'completed');
  await c.err('STALE_OWNER', 'delete', k, 'tok-a');
  assert.equal(await c.call('renew', k, 'tok-a', '30000'), -1, 'renew by the old owner');
  assert.equal(await c.call('update', k, 'tok-b', 'status', 'completed', 'payload', 'r'), 1, 'new owner completes');
  t = record(await c.call('get', k), "get the new owner's record");
  assert.deepEqual([t.status, t.payload, t.fence], ['completed', 'r', '2'], "new owner's record");
  assert.equal(await c.call('update', k, '', 'status', 'failed'), 1, 'unfenced update');
  assert.equal(record(await c.call('get', k), 'get after an unfenced update').status, 'failed', "unfenced update's status");
  assert.equal(await c.call('delete', k, ''), 1, 'unconditional delete');

  // A negative expires_in_ms expires the record at once.
  k = p + 'rec:expire';
  record(await c.call('acquire', k, '0', 'tok', '', '0'), 'acquire without lease', { acquired: 1 });
  assert.equal(await c.call('update', k, 'tok', 'expires_in_ms', '-1'), 0, 'update expires_in_ms -1: 0, deleted');
  assert.equal(await c.call('get', k), null, 'get after expiry');

  // Fences are decimal strings up to 9999999999999999999 (past 2^53): compare as strings or BigInt.
  k = p + 'rec:fence';
  record(await c.call('acquire', k, '0', 'tok-0', '', '1'), 'acquire', { acquired: 1 });
  // The fence set by hand to one below the largest, in the record string
  // (docs/non-go.md, "Key layout per store": the fence's one-byte length at
  // byte offset 36, then its digits), on the server so no client decodes
  // the binary value.
  await client.send(['EVAL', "local v = redis.call('GET', KEYS[1]) " +
    "return redis.call('SET', KEYS[1], string.sub(v, 1, 36) .. string.char(#ARGV[1]) .. ARGV[1] .. " +
    "string.sub(v, 38 + string.byte(v, 37)), 'KEEPTTL')", '1', k, '9999999999999999998']);
  await sleep(20);
  t = record(await c.call('acquire', k, '0', 'tok-1', '', '1'), 'takeover to the largest fence', { acquired: 1 });
  assert.equal(BigInt(t.fence), 9999999999999999999n, 'fence 9999999999999999999 exact');
  await sleep(20);
  t = record(await c.call('acquire', k, '0', 'tok-2', '', '30000'), 'no takeover past the largest fence', { acquired: 0 });
  assert.deepEqual([t.fence, t.token], ['9999999999999999999', ''], 'the largest fence is never taken over');

  // The Go store's record, read here; one left for the Go store.
  const g = record(await c.callB('get', goPrefix + 'rec'), "get of the Go store's record", { buffers: true });
  assert.deepEqual([g.status.toString(), g.payload, g.token.toString()], ['completed', BIN, ''], "the Go store's record");
  k = p + 'handoff:rec';
  record(await c.call('acquire', k, '86400000', 'js-tok', '', '60000'), 'handoff acquire', { acquired: 1 });
  assert.equal(await c.call('update', k, 'js-tok', 'status', 'completed', 'payload', BIN), 1, 'handoff complete');
}

// ---- Batches: several keys in one call, all in ONE hash slot -----------

// appendedMany checks append_many's reply {epoch, seq1, created1, ...};
// returns [epoch, [[seq, created], ...]].
function appendedMany(v, n, what) {
  assert.ok(Array.isArray(v) && v.length === 1 + 2 * n, `${what}: ${JSON.stringify(v)} is not {epoch, seq1, created1, ...} for ${n} messages`);
  const [epoch, ...rest] = v.map((x) => isInt(x, `${what}: element`));
  assert.ok(epoch >= 1e15 && epoch < 2 ** 53, `${what}: epoch ${epoch} is not microseconds below 2^53`);
  const pairs = [];
  for (let i = 0; i < rest.length; i += 2) pairs.push([rest[i], rest[i + 1]]);
  return [epoch, pairs];
}

async function flowBatch(c, p, client, goPrefix) {
  // claim_many / seen_many take many keys of one hash slot: the ids share the
  // hash tag {batch} (a cluster refuses keys of several slots with CROSSSLOT).
  const [k1, k2, k3, k4, k5] = [1, 2, 3, 4, 5].map((i) => `${p}{batch}:m${i}`);
  assert.equal(await c.call('claim', k2, '86400000', '1'), 1, 'claim m2');
  assert.equal(await c.call('claim', k3, '30000', '~tok-3'), 1, 'lease m3');
  assert.deepEqual(await c.call('claim_many', [k1, k2, k3, k1], '86400000', '1'), [1, 0, -1, 0],
    'claim_many: created, processed, in flight, and a key given twice (first wins)');
  const left = await pttl(client, k1);
  assert.ok(left > 80_000_000 && left <= 86_400_000, `PTTL ${left} of a claim_many key`);
  assert.deepEqual(await c.call('seen_many', [k1, k2, k3, k4]), [1, 1, 1, 0], 'seen_many');
  assert.deepEqual(await c.call('claim_many', [k4], '30000', '~tok-4'), [1], 'claim_many of a lease');
  assert.equal(await c.call('commit', k4, 'tok-4', '86400000'), 1, 'commit a lease claim_many took');
  // A key of another type is a CORRUPT element, not an error reply: the
  // client's error object inside the array; the other keys are claimed.
  const h = `${p}{batch}:hash`;
  await client.send(['HSET', h, 'x', 'y']);
  const v = await c.call('claim_many', [k5, h], '86400000', '1');
  assert.ok(Array.isArray(v) && v.length === 2, `claim_many with a hash: ${v}`);
  assert.equal(v[0], 1, 'claim_many with a hash: the string key is claimed');
  assert.ok(client.isReplyError(v[1]) && /^CORRUPT \S/.test(v[1].message),
    `claim_many with a hash: element ${v[1]} is not the client's error reply CORRUPT`);
  assert.equal(await client.send(['HGET', h, 'x']), 'y', 'the hash is untouched');
  await c.err('BADARG', 'claim_many', [k1, k2], '86400000');
  await c.err('BADARG', 'claim_many', [k1, k2], '0', '~tok'); // a lease needs a ttl
  await c.err('BADARG', 'seen_many', [k1, k2], 'extra');
  const g = `${goPrefix}{batch}:`;
  assert.deepEqual(await c.call('seen_many', [g + '1', g + '2', g + '3']), [1, 1, 0], "seen_many of the Go store's ClaimMany");
  assert.deepEqual(await c.call('claim_many', [`${p}handoff:{batch}:1`, `${p}handoff:{batch}:2`], '86400000', '1'), [1, 1],
    'claim_many the handoff ids');

  // append_many: one connection, a burst of messages, all or none.
  const k = p + 'conn:burst';
  const [epoch, got] = appendedMany(await c.call('append_many', k, '3600000', '3', 'm1', BIN, 'm2', 'two', 'm1', 'dup'), 3, 'append_many');
  assert.deepEqual(got, [[1, 1], [2, 1], [1, 0]], 'append_many: seqs and created (m1 given twice: first wins)');
  assert.deepEqual(appendedMany(await c.call('append_many', k, '3600000', '3', 'm2', 'again', 'm3', 'three'), 2, 'append_many m2, m3'),
    [epoch, [[2, 0], [3, 1]]], 'append_many: a retry keeps its seq, m3 is new');
  await c.err('FULL', 'append_many', k, '3600000', '4', 'm4', '4', 'm5', '5'); // 2 new, 1 free: none
  await c.err('BADARG', 'append_many', k, '0', '0', 'm9'); // half a pair
  await c.err('BADARG', 'append_many', k, '0', '0', '_seq', 'x');
  const ttl = await pttl(client, k);
  assert.ok(ttl > 3_500_000 && ttl <= 3_600_000, `PTTL ${ttl} after append_many`);
  let t = tail(await c.callB('unacked', k), 'unacked after append_many');
  assert.deepEqual([t.epoch, t.gen, t.msgs], [epoch, '0', [[1, 'm1', BIN], [2, 'm2', Buffer.from('two')], [3, 'm3', Buffer.from('three')]]],
    'unacked after append_many');
  assert.deepEqual(appended(await c.call('append', k, 'm4', 'p', '0', '0'), 'append after append_many'), [4, epoch, 1], 'append continues the seqs');
  t = tail(await c.callB('unacked', goPrefix + 'burst'), "unacked of the Go store's AppendMany");
  assert.deepEqual([t.gen, t.msgs], ['0', [[1, 'b1', BIN], [2, 'b2', Buffer.from('two')]]], "the Go store's burst");
  appendedMany(await c.call('append_many', p + 'handoff:burst', '0', '0', 'm1', BIN, 'm2', 'two'), 2, 'handoff append_many');
}

// ---- A key of the wrong type ---------------------------------------------

async function flowCorrupt(c, p, client) {
  const s = p + 'wrong:string';
  const h = p + 'wrong:hash';
  await client.send(['SET', s, 'x']);
  await client.send(['HSET', h, 'x', 'y']);
  const cases = [
    ['claim', h, ['60000', '1']],
    ['commit', h, ['tok', '0']],
    ['extend', h, ['tok', '1000']],
    ['release', h, ['tok']],
    ['append', s, ['m', 'p', '0', '0']],
    ['ack', s, ['1', 'm']],
    ['advance', s, ['1', '0']],
    ['unacked', s, []],
    ['append_many', s, ['0', '0', 'm', 'p']],
    ['acquire', s, ['0', 'tok', '', '0']],
    ['get', s, []],
    ['update', s, ['tok', 'status', 'x']],
    ['renew', s, ['tok', '1000']],
    ['delete', s, ['tok']],
  ];
  for (const [name, key, args] of cases) await c.err('CORRUPT', name, key, ...args);
  assert.equal(await client.send(['GET', s]), 'x', 'the string is untouched');
  assert.equal(await client.send(['HGET', h, 'x']), 'y', 'the hash is untouched');
}

// Issue 21: the KEYS rule, the order of checks and the edge statements of
// the README and headers (as flow_edges in flows.py).
async function flowEdges(c, p, client) {
  const k = p + 'edges:k';
  const k2 = p + 'edges:k2';
  const cases = [
    ['claim', ['60000', '1']], ['seen', []], ['forget', []], ['append', ['m', 'p', '0', '0']],
    ['acquire', ['0', 'tok', '', '0']], ['get', []], ['commit', ['tok', '0']],
  ];
  for (const [name, args] of cases) {
    const detail = await c.err('BADARG', name, [], ...args);
    assert.ok(detail.includes('key'), `${name} with no key: detail ${detail} does not speak of the keys`);
    await c.err('BADARG', name, [k, k2], ...args);
    await c.err('BADARG', name, 'x'.repeat(2049), ...args);
    await c.err('BADARG', name, '', ...args);
  }
  assert.equal(await client.send(['EXISTS', k, k2, 'x'.repeat(2049), '']), 0, 'a refused key count or length wrote nothing');
  const long = p + 'edges:' + 'y'.repeat(2048 - p.length - 'edges:'.length);
  assert.equal(await c.call('claim', long, '60000', '1'), 1, 'claim on a 2048-byte key');
  await c.err('BADARG', 'claim_many', [], '60000', '1');
  await c.err('BADARG', 'seen_many', []);
  const many = Array.from({ length: 501 }, (_, i) => `${p}{edges}:${i}`);
  await c.err('BADARG', 'claim_many', many, '60000', '1');
  assert.equal(await client.send(['EXISTS', ...many]), 0, 'claim_many of 501 keys wrote nothing');
  assert.deepEqual(await c.call('claim_many', many.slice(0, 500), '60000', '1'), Array(500).fill(1), 'claim_many of 500 keys');

  // The order: BADARG before CORRUPT and NOT_FOUND; durations have no sign.
  const s = p + 'edges:string';
  await client.send(['SET', s, 'x']);
  await c.err('BADARG', 'ack', s, '01', 'm');
  await c.err('BADARG', 'update', p + 'edges:missing', 'tok', 'status');
  await c.err('BADARG', 'claim', k, '-1', '1');
  await c.err('BADARG', 'acquire', k, '0', 'tok', '', '-5');
  assert.equal(await client.send(['EXISTS', k]), 0, 'refused durations wrote nothing');

  // seen_many: 1 for a key of any type; commit on another value: -1.
  const h = p + '{edges}:hash';
  await client.send(['HSET', h, 'f', 'v']);
  assert.deepEqual(await c.call('seen_many', [h, p + '{edges}:none']), [1, 0], 'seen_many of a hash key and an absent one');
  const d = p + 'edges:done';
  await client.send(['SET', d, 'done']);
  assert.equal(await c.call('commit', d, 'tok', '0'), -1, 'commit on a value written by something else');
  assert.equal(await client.send(['GET', d]), 'done', 'commit left the value');
  // renew answers 1 after the lease passed (no takeover yet); extend 0.
  const rk = p + 'edges:rec';
  record(await c.call('acquire', rk, '0', 'tok', '', '1'), 'acquire a 1 ms lease', { acquired: 1 });
  const ck = p + 'edges:claim';
  assert.equal(await c.call('claim', ck, '1', '~tok'), 1, 'claim a 1 ms lease');
  await sleep(20);
  assert.equal(await c.call('renew', rk, 'tok', '60000'), 1, 'renew after the lease passed, before a takeover');
  assert.equal(await c.call('extend', ck, 'tok', '60000'), 0, 'extend after the lease ran out');
  assert.equal(await c.call('update', rk, 'tok', 'status', 'completed'), 1, 'update replies 1');
}

// runAll loads the scripts and the library, runs every flow both ways, prints
// "N passed, N failed" and sets the exit code.
export async function runAll(client) {
  const { scripts, library } = readScripts(env('REDISONCE_SCRIPTS'));
  const prefix = env('REDISONCE_PREFIX');
  const goPrefix = env('REDISONCE_GO_PREFIX');
  let passed = 0;
  let failed = 0;
  const attempt = async (what, f) => {
    try {
      await f();
      passed++;
    } catch (e) {
      failed++;
      console.error(`FAIL ${client.name} ${what}: ${e && e.stack ? e.stack : e}`);
    }
  };
  try {
    await attempt('load', async () => {
      // SCRIPT LOAD each file byte for byte (a Buffer): the reply is its SHA1SUMS line.
      for (const [name, s] of Object.entries(scripts)) {
        assert.equal(await client.loadScript(s.src), s.sha, `SCRIPT LOAD ${name}.lua`);
      }
      // FUNCTION LOAD REPLACE of `redisonce functions`'s output: its name is
      // redisonce_<version> as the README forms it.
      assert.equal(await client.loadFunctions(readFileSync(env('REDISONCE_FUNCTIONS'))), library, 'FUNCTION LOAD REPLACE');
    });
    for (const mode of ['evalsha', 'fcall']) {
      const c = new Caller(client, scripts, mode);
      const p = `${prefix}${mode}:`;
      for (const flow of [flowClaims, flowOutbox, flowRecords, flowBatch, flowCorrupt, flowEdges]) {
        await attempt(`${mode} ${flow.name}`, () => flow(c, p, client, goPrefix));
      }
      if (mode === 'fcall') {
        await attempt('FCALL_RO of a write function is refused', async () => {
          await assert.rejects(client.run('fcall', { name: 'redisonce_claim', ro: true }, [p + 'ro-probe'], ['0', '1'], false),
            (e) => client.isReplyError(e));
        });
      }
    }
  } finally {
    await client.close();
  }
  console.log(`${client.name}: ${passed} passed, ${failed} failed`);
  process.exitCode = failed ? 1 : 0;
}
