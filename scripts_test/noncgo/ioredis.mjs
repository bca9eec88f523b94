// The flows of flows.mjs through ioredis: script('LOAD'), evalsha / evalsha_ro
// and fcall / fcall_ro, with their *Buffer variants for binary replies.
import { readFileSync } from 'node:fs';
import Redis from 'ioredis';
import { runAll } from './flows.mjs';

const { version } = JSON.parse(readFileSync(new URL('./node_modules/ioredis/package.json', import.meta.url)));
const redis = new Redis(process.env.REDIS_URL, { maxRetriesPerRequest: 0 });

await runAll({
  name: `ioredis ${version}`,
  loadScript: (src) => redis.script('LOAD', src),
  loadFunctions: (code) => redis.function('LOAD', 'REPLACE', code),
  run(mode, fn, keys, args, buffers) {
    if (mode === 'fcall' && buffers) {
      // The generic form, for any command: callBuffer.
      return redis.callBuffer(fn.ro ? 'FCALL_RO' : 'FCALL', fn.name, keys.length, ...keys, ...args);
    }
    const method = (mode === 'evalsha' ? 'evalsha' : 'fcall') + (fn.ro ? '_ro' : '') + (buffers ? 'Buffer' : '');
    return redis[method](mode === 'evalsha' ? fn.sha : fn.name, keys.length, ...keys, ...args);
  },
  bigintArgs: true, // ioredis sends String(arg): a BigInt goes as is
  isReplyError: (e) => e instanceof Redis.ReplyError,
  send: ([cmd, ...args]) => redis.call(cmd, ...args),
  close: () => redis.quit(),
});
