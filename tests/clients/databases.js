// kv_server's numbered databases through node-redis (v4), as an application meets them: a
// database in the URL and in the options, SELECT, DBSIZE, FLUSHDB while another connection
// scans, SWAPDB, MOVE, FLUSHALL ASYNC. Run by tests/kv_server_databases.rs:
// `node databases.js PORT`; a failed check rejects, and the exit status is not 0.
'use strict';
const assert = require('assert/strict');
const { createClient } = require('redis');

const port = Number(process.argv[2]);

async function conn(database) {
  const c = createClient({ socket: { host: '127.0.0.1', port }, database });
  c.on('error', (e) => { throw e; });
  await c.connect();
  return c;
}

(async () => {
  const c0 = await conn(0);
  const c3 = createClient({ url: `redis://127.0.0.1:${port}/3` });
  await c3.connect();
  await c3.set('js:k', 'three');
  await c0.set('js:k', 'zero');
  assert.equal(await c3.get('js:k'), 'three');
  assert.equal(await c0.get('js:k'), 'zero');
  assert.equal(await c3.dbSize(), 1);

  // SELECT on a connection: later commands go to that database.
  const sel = await conn(0);
  await sel.select(3);
  assert.equal(await sel.get('js:k'), 'three');
  await assert.rejects(sel.select(16), /out of range/);

  // FLUSHDB while another connection scans the same database.
  const multi = c3.multi();
  for (let i = 0; i < 3000; i++) multi.set(`scan:${i}`, String(i));
  await multi.execAsPipeline();
  assert.equal(await c3.dbSize(), 3001);
  const scanner = await conn(3);
  const seen = new Set();
  let flushed = null;
  for await (const k of scanner.scanIterator({ COUNT: 100 })) {
    assert.ok(!seen.has(k), `${k} returned twice`);
    seen.add(k);
    if (flushed === null) flushed = c3.flushDb();
  }
  assert.equal(await flushed, 'OK');
  assert.equal(await c3.dbSize(), 0);
  assert.equal(await c0.get('js:k'), 'zero', 'FLUSHDB of 3 touched 0');

  // SWAPDB and MOVE.
  await c3.set('js:k', 'three again');
  assert.equal(await c0.swapDb(0, 3), 'OK');
  assert.equal(await c3.get('js:k'), 'zero');
  assert.equal(await c0.get('js:k'), 'three again');
  await c3.set('mv', '1');
  assert.equal(await c3.move('mv', 4), true);
  assert.equal(await c3.move('mv', 4), false);
  const c4 = await conn(4);
  assert.equal(await c4.get('mv'), '1');

  // FLUSHALL ASYNC.
  assert.equal(await c0.flushAll('ASYNC'), 'OK');
  for (const c of [c0, c3, c4]) assert.equal(await c.dbSize(), 0);
  for (const c of [c0, c3, c4, sel, scanner]) await c.quit();
  console.log('node-redis ok');
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
