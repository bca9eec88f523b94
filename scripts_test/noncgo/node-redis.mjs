// The flows of flows.mjs through node-redis v5: scriptLoad, evalSha / evalShaRo
// and fCall / fCallRo; binary replies through withTypeMapping (bulk strings as
// Buffers). Every argument is a string or a Buffer: node-redis takes no numbers.
import { readFileSync } from 'node:fs';
import { createClient, ErrorReply, RESP_TYPES } from 'redis';
import { runAll } from './flows.mjs';

const { version } = JSON.parse(readFileSync(new URL('./node_modules/redis/package.json', import.meta.url)));
const client = await createClient({ url: process.env.REDIS_URL }).connect();
const buffers = client.withTypeMapping({ [RESP_TYPES.BLOB_STRING]: Buffer });

await runAll({
  name: `node-redis ${version}`,
  loadScript: (src) => client.scriptLoad(src),
  loadFunctions: (code) => client.functionLoad(code, { REPLACE: true }),
  run(mode, fn, keys, args, asBuffers) {
    const c = asBuffers ? buffers : client;
    const opts = { keys, arguments: args };
    if (mode === 'evalsha') return fn.ro ? c.evalShaRo(fn.sha, opts) : c.evalSha(fn.sha, opts);
    return fn.ro ? c.fCallRo(fn.name, opts) : c.fCall(fn.name, opts);
  },
  isReplyError: (e) => e instanceof ErrorReply,
  send: (args) => client.sendCommand(args),
  close: () => client.quit(),
});
