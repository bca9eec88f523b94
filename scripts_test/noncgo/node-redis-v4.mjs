// The flows of flows.mjs through node-redis v4 (installed as "redis4"):
// scriptLoad, evalSha / evalShaRo and fCall / fCallRo; binary replies through
// commandOptions({ returnBuffers: true }). Every argument is a string or a Buffer.
import { readFileSync } from 'node:fs';
import { createClient, commandOptions, ErrorReply } from 'redis4';
import { runAll } from './flows.mjs';

const { version } = JSON.parse(readFileSync(new URL('./node_modules/redis4/package.json', import.meta.url)));
const client = createClient({ url: process.env.REDIS_URL });
await client.connect();

await runAll({
  name: `node-redis ${version}`,
  loadScript: (src) => client.scriptLoad(src),
  loadFunctions: (code) => client.functionLoad(code, { REPLACE: true }),
  run(mode, fn, keys, args, asBuffers) {
    const head = asBuffers ? [commandOptions({ returnBuffers: true })] : [];
    const opts = { keys, arguments: args };
    const method = (mode === 'evalsha' ? 'evalSha' : 'fCall') + (fn.ro ? 'Ro' : '');
    return client[method](...head, mode === 'evalsha' ? fn.sha : fn.name, opts);
  },
  isReplyError: (e) => e instanceof ErrorReply,
  send: (args) => client.sendCommand(args),
  close: () => client.quit(),
});
